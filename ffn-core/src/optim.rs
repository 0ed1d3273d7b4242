//! Optimisers over the flat parameter buffer, and gradient clipping.
//!
//! Update rules follow TensorFlow's optimisers, as google/ffn used them:
//! - [`Sgd`]: `p -= lr g`.
//! - [`Momentum`]: `v = m v + g; p -= lr v` (TF `MomentumOptimizer`, not Nesterov).
//! - [`Adam`]: `m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//!   p -= lr sqrt(1-b2^t)/(1-b1^t) m / (sqrt(v) + eps)` (TF `AdamOptimizer`, whose epsilon is added
//!   after the bias correction; PyTorch adds it before).
//!
//! State is exposed as named flat buffers ([`Optimizer::state`]) so that checkpoints can store it
//! next to the parameters and [`Optimizer::load_state`] can check it on resume.

use crate::error::CoreError;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

/// An optimiser that updates a flat parameter buffer from a gradient of the same length.
pub trait Optimizer {
    /// One update step with learning rate `lr`.
    ///
    /// # Panics
    /// When `params` and `grads` differ in length, or differ from the length of loaded state.
    fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f32);

    /// The state as named flat buffers (empty for SGD; created by the first step).
    fn state(&self) -> Vec<(String, Vec<f32>)>;

    /// Restores state saved by [`Optimizer::state`].
    ///
    /// # Errors
    /// [`CoreError::OptimizerState`] when a buffer is missing, unknown, or of inconsistent length.
    fn load_state(&mut self, state: &[(String, Vec<f32>)]) -> Result<(), CoreError>;

    /// The optimiser's name, as accepted by [`from_name`].
    fn name(&self) -> &'static str;
}

/// Clips every gradient entry to `[-max_abs, max_abs]` (google/ffn's `max_gradient_entry_mag`,
/// 0.7 by default). NaN entries stay NaN.
pub fn clip_by_value(grads: &mut [f32], max_abs: f32) {
    for g in grads {
        *g = g.clamp(-max_abs, max_abs);
    }
}

fn check_lengths(params: &[f32], grads: &[f32]) {
    assert_eq!(
        params.len(),
        grads.len(),
        "optimizer step: params and grads lengths differ"
    );
}

/// Finds buffer `name` in `state`.
fn find<'a>(state: &'a [(String, Vec<f32>)], name: &str) -> Result<&'a [f32], CoreError> {
    state
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
        .ok_or_else(|| CoreError::OptimizerState(format!("missing buffer {name:?}")))
}

fn only_known(state: &[(String, Vec<f32>)], known: &[&str], opt: &str) -> Result<(), CoreError> {
    match state.iter().find(|(n, _)| !known.contains(&n.as_str())) {
        Some((n, _)) => Err(CoreError::OptimizerState(format!(
            "unexpected buffer {n:?} for {opt} (expected {known:?})"
        ))),
        None => Ok(()),
    }
}

/// Plain stochastic gradient descent (google/ffn's default, lr 0.001).
#[derive(Clone, Debug, Default)]
pub struct Sgd;

impl Optimizer for Sgd {
    fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f32) {
        check_lengths(params, grads);
        params.iter_mut().zip(grads).for_each(|(p, g)| *p -= lr * g);
    }
    fn state(&self) -> Vec<(String, Vec<f32>)> {
        Vec::new()
    }
    fn load_state(&mut self, state: &[(String, Vec<f32>)]) -> Result<(), CoreError> {
        only_known(state, &[], "sgd")
    }
    fn name(&self) -> &'static str {
        "sgd"
    }
}

/// SGD with (heavy-ball) momentum, TensorFlow's formulation.
#[derive(Clone, Debug)]
pub struct Momentum {
    /// Momentum coefficient (0.9 in google/ffn).
    pub momentum: f32,
    velocity: Vec<f32>,
}

impl Momentum {
    /// Name of the velocity buffer in [`Optimizer::state`].
    pub const VELOCITY: &'static str = "momentum/velocity";

    /// A momentum optimiser with coefficient `momentum`.
    pub fn new(momentum: f32) -> Self {
        Self {
            momentum,
            velocity: Vec::new(),
        }
    }
}

impl Default for Momentum {
    /// Momentum 0.9.
    fn default() -> Self {
        Self::new(0.9)
    }
}

impl Optimizer for Momentum {
    fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f32) {
        check_lengths(params, grads);
        if self.velocity.is_empty() {
            self.velocity = vec![0.0; params.len()];
        }
        assert_eq!(
            self.velocity.len(),
            params.len(),
            "momentum: state length differs from params"
        );
        for ((p, g), v) in params.iter_mut().zip(grads).zip(&mut self.velocity) {
            *v = self.momentum * *v + g;
            *p -= lr * *v;
        }
    }
    fn state(&self) -> Vec<(String, Vec<f32>)> {
        vec![(Self::VELOCITY.to_string(), self.velocity.clone())]
    }
    fn load_state(&mut self, state: &[(String, Vec<f32>)]) -> Result<(), CoreError> {
        only_known(state, &[Self::VELOCITY], "momentum")?;
        self.velocity = find(state, Self::VELOCITY)?.to_vec();
        Ok(())
    }
    fn name(&self) -> &'static str {
        "momentum"
    }
}

/// Adam, TensorFlow's formulation (defaults 0.9 / 0.999 / 1e-8).
#[derive(Clone, Debug)]
pub struct Adam {
    /// First-moment decay.
    pub beta1: f32,
    /// Second-moment decay.
    pub beta2: f32,
    /// Added to the square root of the second moment.
    pub epsilon: f32,
    m: Vec<f32>,
    v: Vec<f32>,
    t: u64,
}

impl Adam {
    /// Name of the first-moment buffer in [`Optimizer::state`].
    pub const M: &'static str = "adam/m";
    /// Name of the second-moment buffer.
    pub const V: &'static str = "adam/v";
    /// Name of the step counter: three f32 values holding 16 bits each (low first), so that
    /// every count below 2^48 round-trips exactly.
    pub const STEP: &'static str = "adam/step";

    /// An Adam optimiser with the given coefficients.
    pub fn new(beta1: f32, beta2: f32, epsilon: f32) -> Self {
        Self {
            beta1,
            beta2,
            epsilon,
            m: Vec::new(),
            v: Vec::new(),
            t: 0,
        }
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.t
    }
}

impl Default for Adam {
    /// beta1 0.9, beta2 0.999, epsilon 1e-8.
    fn default() -> Self {
        Self::new(0.9, 0.999, 1e-8)
    }
}

impl Optimizer for Adam {
    fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f32) {
        check_lengths(params, grads);
        if self.m.is_empty() {
            self.m = vec![0.0; params.len()];
            self.v = vec![0.0; params.len()];
        }
        assert_eq!(
            self.m.len(),
            params.len(),
            "adam: state length differs from params"
        );
        self.t += 1;
        let t = self.t as f64;
        let (b1, b2) = (self.beta1, self.beta2);
        let lr_t = (lr as f64 * libm::sqrt(1.0 - libm::pow(b2 as f64, t))
            / (1.0 - libm::pow(b1 as f64, t))) as f32;
        for (((p, g), m), v) in params
            .iter_mut()
            .zip(grads)
            .zip(&mut self.m)
            .zip(&mut self.v)
        {
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            *p -= lr_t * *m / (libm::sqrtf(*v) + self.epsilon);
        }
    }
    fn state(&self) -> Vec<(String, Vec<f32>)> {
        let t = self.t;
        let step = vec![
            (t & 0xffff) as f32,
            ((t >> 16) & 0xffff) as f32,
            ((t >> 32) & 0xffff) as f32,
        ];
        vec![
            (Self::M.to_string(), self.m.clone()),
            (Self::V.to_string(), self.v.clone()),
            (Self::STEP.to_string(), step),
        ]
    }
    fn load_state(&mut self, state: &[(String, Vec<f32>)]) -> Result<(), CoreError> {
        only_known(state, &[Self::M, Self::V, Self::STEP], "adam")?;
        let (m, v, step) = (
            find(state, Self::M)?,
            find(state, Self::V)?,
            find(state, Self::STEP)?,
        );
        if m.len() != v.len() {
            return Err(CoreError::OptimizerState(format!(
                "{} has {} values but {} has {}",
                Self::M,
                m.len(),
                Self::V,
                v.len()
            )));
        }
        let word = |x: f32| {
            if (0.0..65536.0).contains(&x) && x == (x as u32) as f32 {
                Some(x as u64)
            } else {
                None
            }
        };
        let t = match step {
            [a, b, c] => word(*a)
                .zip(word(*b))
                .zip(word(*c))
                .map(|((a, b), c)| a | (b << 16) | (c << 32)),
            _ => None,
        }
        .ok_or_else(|| {
            CoreError::OptimizerState(format!(
                "{}: expected three 16-bit integer words, found {step:?}",
                Self::STEP
            ))
        })?;
        self.m = m.to_vec();
        self.v = v.to_vec();
        self.t = t;
        Ok(())
    }
    fn name(&self) -> &'static str {
        "adam"
    }
}

/// The optimiser called `name` (`sgd`, `momentum`, `adam`) with google/ffn's default coefficients.
///
/// # Errors
/// [`CoreError::UnknownName`] for any other name.
pub fn from_name(name: &str) -> Result<Box<dyn Optimizer + Send>, CoreError> {
    match name {
        "sgd" => Ok(Box::new(Sgd)),
        "momentum" => Ok(Box::new(Momentum::default())),
        "adam" => Ok(Box::new(Adam::default())),
        _ => Err(CoreError::UnknownName {
            what: "optimizer".into(),
            expected: "sgd, momentum, adam".into(),
            found: name.into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_bounds_every_entry() {
        let mut g = vec![-2.0, -0.5, 0.0, 0.69, 0.71, 9.0];
        clip_by_value(&mut g, 0.7);
        assert_eq!(g, [-0.7, -0.5, 0.0, 0.69, 0.7, 0.7]);
    }

    #[test]
    fn sgd_and_momentum_follow_their_formulas() {
        let mut p = vec![1.0f32, -1.0];
        Sgd.step(&mut p, &[0.5, -0.5], 0.1);
        assert_eq!(p, [0.95, -0.95]);
        let mut m = Momentum::new(0.9);
        let mut p = vec![0.0f32];
        m.step(&mut p, &[1.0], 0.1); // v = 1, p = -0.1
        m.step(&mut p, &[1.0], 0.1); // v = 1.9, p = -0.29
        assert!((p[0] + 0.29).abs() < 1e-6, "{}", p[0]);
    }

    #[test]
    fn adam_first_steps_match_hand_computation() {
        let mut a = Adam::default();
        let mut p = vec![0.0f32, 0.0];
        a.step(&mut p, &[0.5, -2.0], 0.01);
        // First step: m/(1-b1) = g, sqrt(v/(1-b2)) = |g| -> p = -lr * sign(g) (up to epsilon).
        assert!(
            (p[0] + 0.01).abs() < 1e-6 && (p[1] - 0.01).abs() < 1e-6,
            "{p:?}"
        );
        // Second step with the same gradient moves by lr again.
        a.step(&mut p, &[0.5, -2.0], 0.01);
        assert!((p[0] + 0.02).abs() < 1e-6, "{p:?}");
        assert_eq!(a.steps(), 2);
    }

    #[test]
    fn state_round_trips_and_resumes_identically() {
        let grads = [[0.3f32, -0.1, 0.7], [0.2, 0.2, -0.4], [-0.5, 0.1, 0.0]];
        for name in ["sgd", "momentum", "adam"] {
            let mut a = from_name(name).unwrap();
            let mut pa = vec![1.0f32, 2.0, 3.0];
            a.step(&mut pa, &grads[0], 0.1);
            let saved = a.state();
            let mut b = from_name(name).unwrap();
            b.load_state(&saved).unwrap();
            let mut pb = pa.clone();
            for g in &grads[1..] {
                a.step(&mut pa, g, 0.1);
                b.step(&mut pb, g, 0.1);
            }
            assert_eq!(pa, pb, "{name}");
            assert_eq!(a.name(), name);
        }
        let a = Adam {
            t: (1 << 40) + 12345,
            ..Adam::default()
        };
        let mut b = Adam::default();
        b.load_state(&a.state()).unwrap();
        assert_eq!(b.steps(), a.steps());
    }

    #[test]
    fn bad_state_and_names_are_clear_errors() {
        let mut a = Adam::default();
        let err = a.load_state(&[("adam/m".into(), vec![0.0])]).unwrap_err();
        assert!(format!("{err}").contains("adam/v"), "{err}");
        let err = Momentum::default()
            .load_state(&[("adam/m".into(), vec![])])
            .unwrap_err();
        assert!(format!("{err}").contains("unexpected buffer"), "{err}");
        let bad_step = [
            ("adam/m".into(), vec![0.0]),
            ("adam/v".into(), vec![0.0]),
            ("adam/step".into(), vec![0.5]),
        ];
        assert!(a.load_state(&bad_step).is_err());
        let err = from_name("rmsprop").err().unwrap();
        assert!(format!("{err}").contains("sgd, momentum, adam"), "{err}");
    }
}
