//! The optimiser chosen on the command line of `ffn train`.

use anyhow::Result;

use crate::commands::train::Args;

/// Optimiser names.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerKind {
    /// Plain SGD (google/ffn's default).
    Sgd,
    /// SGD with momentum (`--momentum`).
    Momentum,
    /// Adam (`--adam-beta1/2`, `--adam-epsilon`).
    Adam,
}

/// The optimiser interface `ffn train` needs: update and (re)store named state buffers.
pub trait Optimizer {
    /// `params -= update(grads, lr)`.
    fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f32);
    /// Named state buffers, for checkpoints.
    fn state(&self) -> Vec<(String, Vec<f32>)>;
    /// Restores [`Optimizer::state`].
    fn load_state(&mut self, state: &[(String, Vec<f32>)]) -> Result<()>;
}

/// Builds the optimiser of `args`.
pub fn make_optimizer(args: &Args) -> Result<Box<dyn Optimizer>> {
    Ok(match args.optimizer {
        OptimizerKind::Sgd => Box::new(local::Sgd),
        OptimizerKind::Momentum => Box::new(local::Momentum { m: args.momentum, v: Vec::new() }),
        OptimizerKind::Adam => Box::new(local::Adam {
            b1: args.adam_beta1,
            b2: args.adam_beta2,
            eps: args.adam_epsilon,
            m: Vec::new(),
            v: Vec::new(),
            t: 0,
        }),
    })
}

mod local {
    use anyhow::{Result, bail};

    pub struct Sgd;

    impl super::Optimizer for Sgd {
        fn step(&mut self, p: &mut [f32], g: &[f32], lr: f32) {
            p.iter_mut().zip(g).for_each(|(p, g)| *p -= lr * g);
        }
        fn state(&self) -> Vec<(String, Vec<f32>)> {
            Vec::new()
        }
        fn load_state(&mut self, s: &[(String, Vec<f32>)]) -> Result<()> {
            if !s.is_empty() {
                bail!("optimizer state: expected none for sgd, found {} buffers", s.len());
            }
            Ok(())
        }
    }

    pub struct Momentum {
        pub m: f32,
        pub v: Vec<f32>,
    }

    impl super::Optimizer for Momentum {
        fn step(&mut self, p: &mut [f32], g: &[f32], lr: f32) {
            self.v.resize(p.len(), 0.0);
            for i in 0..p.len() {
                self.v[i] = self.m * self.v[i] + g[i];
                p[i] -= lr * self.v[i];
            }
        }
        fn state(&self) -> Vec<(String, Vec<f32>)> {
            vec![("momentum".into(), self.v.clone())]
        }
        fn load_state(&mut self, s: &[(String, Vec<f32>)]) -> Result<()> {
            match s {
                [(n, v)] if n == "momentum" => self.v = v.clone(),
                _ => bail!("optimizer state: expected one 'momentum' buffer"),
            }
            Ok(())
        }
    }

    pub struct Adam {
        pub b1: f32,
        pub b2: f32,
        pub eps: f32,
        pub m: Vec<f32>,
        pub v: Vec<f32>,
        pub t: u64,
    }

    impl super::Optimizer for Adam {
        fn step(&mut self, p: &mut [f32], g: &[f32], lr: f32) {
            self.m.resize(p.len(), 0.0);
            self.v.resize(p.len(), 0.0);
            self.t += 1;
            let t = self.t as i32;
            let a = lr * (1.0 - self.b2.powi(t)).sqrt() / (1.0 - self.b1.powi(t));
            for i in 0..p.len() {
                self.m[i] = self.b1 * self.m[i] + (1.0 - self.b1) * g[i];
                self.v[i] = self.b2 * self.v[i] + (1.0 - self.b2) * g[i] * g[i];
                p[i] -= a * self.m[i] / (self.v[i].sqrt() + self.eps);
            }
        }
        fn state(&self) -> Vec<(String, Vec<f32>)> {
            vec![("m".into(), self.m.clone()), ("v".into(), self.v.clone()), ("t".into(), vec![self.t as f32])]
        }
        fn load_state(&mut self, s: &[(String, Vec<f32>)]) -> Result<()> {
            match s {
                [(a, m), (b, v), (c, t)] if a == "m" && b == "v" && c == "t" && t.len() == 1 => {
                    self.m = m.clone();
                    self.v = v.clone();
                    self.t = t[0] as u64;
                }
                _ => bail!("optimizer state: expected buffers m, v, t"),
            }
            Ok(())
        }
    }
}
