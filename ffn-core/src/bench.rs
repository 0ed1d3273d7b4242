//! Throughput of the network behind `ffn bench train` and `ffn bench forward`: timed calls on a
//! synthetic batch ([`measure_network`]) and, for a fast convolution, how far its result is from
//! the direct one's. Needs the `std` feature (the clock).

use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;
use std::time::Instant;

use crate::CoreError;
use crate::conv::Simd;
use crate::conv::winograd::ConvAlgorithm;
use crate::model_spec::ModelConfig;
use crate::network::{ConvStack3d, analytic_flops};
use crate::optim::{Optimizer, Sgd, clip_by_value};
use crate::rng::Rng;

/// What [`measure_network`] runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetworkBenchOptions {
    /// The network.
    pub model: ModelConfig,
    /// Training steps (forward, loss, backward, clip, SGD) instead of forward passes.
    pub train: bool,
    /// FOVs per call.
    pub batch: usize,
    /// Worker threads of the kernels (a pool of its own).
    pub threads: usize,
    /// Timed calls.
    pub reps: usize,
    /// Untimed calls first.
    pub warmup: usize,
    /// Seed of the weights and the synthetic batch.
    pub seed: u64,
    /// Convolution algorithm of the 3x3x3 layers.
    pub conv: ConvAlgorithm,
    /// With a convolution other than `direct`: also compare the first call's result with `direct`.
    pub compare: bool,
    /// The SIMD kernels asked for (the widest supported one below it runs: [`Simd::usable`]).
    pub simd: Simd,
}

impl NetworkBenchOptions {
    /// Checks the model, then `batch`, `threads` and `reps` (each >= 1); errors name the
    /// `ffn bench` flag.
    pub fn validate(&self) -> Result<(), CoreError> {
        self.model.validate().map_err(CoreError::InvalidConfig)?;
        for (option, value) in [
            ("--batch", self.batch),
            ("--threads", self.threads),
            ("--reps", self.reps),
        ] {
            if value == 0 {
                return Err(CoreError::OutOfRange {
                    option,
                    expected: ">= 1",
                    actual: value.to_string(),
                });
            }
        }
        Ok(())
    }
}

/// How far one algorithm's result is from the direct one's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Deviation {
    /// Largest absolute difference.
    pub max_abs: f64,
    /// `|got - want| / |want|` (L2 norms).
    pub relative_l2: f64,
}

/// The result of [`measure_network`].
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkBench {
    /// Seconds of every timed call, in order.
    pub times_s: Vec<f64>,
    /// Median of [`Self::times_s`].
    pub median_s: f64,
    /// Fastest call.
    pub min_s: f64,
    /// Analytic FLOPs of one example (forward or training step, see [`analytic_flops`]).
    pub flops_per_example: u64,
    /// FOVs (examples) per second at the median.
    pub examples_per_s: f64,
    /// GFLOP/s at the median.
    pub gflops: f64,
    /// The logits (forward) or gradients (train) against the direct convolution, when compared.
    pub vs_direct: Option<Deviation>,
    /// The SIMD kernels that ran.
    pub simd: Simd,
}

/// The median (0 for no values); sorts `values`.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => 0.5 * (values[n / 2 - 1] + values[n / 2]),
    }
}

/// Times `warmup + reps` calls (training steps or forward passes) of a freshly initialised network
/// on a synthetic batch, on a pool of `threads` threads, and compares with the direct convolution
/// when asked.
///
/// # Errors
/// An invalid option ([`NetworkBenchOptions::validate`]) or a pool that cannot start.
pub fn measure_network(o: &NetworkBenchOptions) -> Result<NetworkBench, CoreError> {
    o.validate()?;
    let (mut times_s, vs_direct) = crate::parallel::with_threads(o.threads, || {
        let mut net = Setup::new(o, o.conv);
        for _ in 0..o.warmup {
            net.call(o);
        }
        let times: Vec<f64> = (0..o.reps)
            .map(|_| {
                let t = Instant::now();
                net.call(o);
                t.elapsed().as_secs_f64()
            })
            .collect();
        let compare = o.compare && o.conv != ConvAlgorithm::Direct;
        (times, compare.then(|| deviation_from_direct(o)))
    })?;
    let min_s = times_s.iter().cloned().fold(f64::INFINITY, f64::min);
    let median_s = median(&mut times_s);
    let flops = analytic_flops(&o.model);
    let flops_per_example = if o.train { flops.train } else { flops.forward };
    let examples_per_s = o.batch as f64 / median_s;
    Ok(NetworkBench {
        times_s,
        median_s,
        min_s,
        flops_per_example,
        examples_per_s,
        gflops: flops_per_example as f64 * examples_per_s / 1e9,
        vs_direct,
        simd: o.simd.usable(),
    })
}

/// A network and its synthetic batch, built from the seed.
struct Setup {
    net: ConvStack3d,
    image: Vec<f32>,
    seed: Vec<f32>,
    labels: Vec<f32>,
    logits: Vec<f32>,
    grads: Vec<f32>,
}

impl Setup {
    fn new(o: &NetworkBenchOptions, conv: ConvAlgorithm) -> Self {
        let mut rng = Rng::new(o.seed);
        let mut net = ConvStack3d::new(o.model, 0.01, &mut rng);
        net.set_conv_algorithm(conv);
        net.set_simd(o.simd);
        let (image, seed, labels) = make_batch(&o.model, o.batch, &mut rng);
        Self {
            logits: vec![0.0; image.len()],
            grads: vec![0.0; net.params().len()],
            net,
            image,
            seed,
            labels,
        }
    }

    /// One forward pass (returns the logits), or forward and backward (returns the gradients).
    fn evaluate(&mut self, o: &NetworkBenchOptions) -> &[f32] {
        let s = self;
        if o.train {
            s.net.forward_backward(
                &s.image,
                &s.seed,
                &s.labels,
                o.batch,
                &mut s.logits,
                &mut s.grads,
            );
            &s.grads
        } else {
            s.net.forward(&s.image, &s.seed, o.batch, &mut s.logits);
            &s.logits
        }
    }

    /// One training step (forward, backward, clip, SGD) or one forward pass.
    fn call(&mut self, o: &NetworkBenchOptions) {
        self.evaluate(o);
        if o.train {
            clip_by_value(&mut self.grads, 0.7);
            Sgd.step(self.net.params_mut(), &self.grads, 1e-3);
        }
    }
}

/// A synthetic batch like the PyTorch peer's `make_batch`: normalised uniform image, seed at
/// logit(0.05) with logit(0.95) at each FOV centre, random 0.05/0.95 labels.
fn make_batch(cfg: &ModelConfig, batch: usize, rng: &mut Rng) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let v: usize = cfg.fov.iter().product();
    let n = batch * v;
    let image: Vec<f32> = (0..n)
        .map(|_| (rng.next_f32() * 255.0 - 128.0) / 33.0)
        .collect();
    let logit = |p: f32| (p / (1.0 - p)).ln();
    let mut seed = vec![logit(0.05); n];
    let [_, fy, fx] = cfg.fov;
    let centre = (cfg.fov[0] / 2 * fy + fy / 2) * fx + fx / 2;
    for b in 0..batch {
        seed[b * v + centre] = logit(0.95);
    }
    let labels = (0..n)
        .map(|_| if rng.next_f32() > 0.5 { 0.95 } else { 0.05 })
        .collect();
    (image, seed, labels)
}

/// Runs the first call (same weights and batch, before any update) with `o.conv` and with the
/// direct algorithm and compares the logits (forward) or the gradients (train).
fn deviation_from_direct(o: &NetworkBenchOptions) -> Deviation {
    let result = |conv: ConvAlgorithm| Setup::new(o, conv).evaluate(o).to_vec();
    let (got, want) = (result(o.conv), result(ConvAlgorithm::Direct));
    let mut max_abs = 0.0f64;
    let (mut diff2, mut norm2) = (0.0f64, 0.0f64);
    for (x, y) in got.iter().zip(&want) {
        let d = (*x as f64 - *y as f64).abs();
        max_abs = max_abs.max(d);
        diff2 += d * d;
        norm2 += (*y as f64).powi(2);
    }
    Deviation {
        max_abs,
        relative_l2: (diff2 / norm2.max(f64::MIN_POSITIVE)).sqrt(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(train: bool) -> NetworkBenchOptions {
        NetworkBenchOptions {
            model: ModelConfig {
                depth: 2,
                features: 3,
                fov: [5; 3],
                ..ModelConfig::default()
            },
            train,
            batch: 2,
            threads: 1,
            reps: 3,
            warmup: 1,
            seed: 0,
            conv: ConvAlgorithm::Winograd,
            compare: true,
            simd: Simd::active(),
        }
    }

    #[test]
    fn median_of_odd_even_and_no_values() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn forward_and_train_report_finite_throughput_and_a_small_deviation() {
        for train in [false, true] {
            let o = small(train);
            let r = measure_network(&o).unwrap();
            assert_eq!(r.times_s.len(), 3);
            assert!(r.min_s > 0.0 && r.min_s <= r.median_s && r.median_s.is_finite());
            assert!(r.examples_per_s.is_finite() && r.examples_per_s > 0.0);
            assert!(r.gflops.is_finite() && r.gflops > 0.0);
            let f = analytic_flops(&o.model);
            assert_eq!(r.flops_per_example, if train { f.train } else { f.forward });
            let d = r.vs_direct.expect("winograd is compared with direct");
            assert!(d.max_abs.is_finite() && d.relative_l2 < 1e-3, "{d:?}");
            let direct = NetworkBenchOptions {
                conv: ConvAlgorithm::Direct,
                ..o
            };
            assert_eq!(measure_network(&direct).unwrap().vs_direct, None);
        }
    }

    #[test]
    fn zero_options_are_errors_naming_the_flag() {
        for (o, flag) in [
            (
                NetworkBenchOptions {
                    batch: 0,
                    ..small(false)
                },
                "--batch",
            ),
            (
                NetworkBenchOptions {
                    threads: 0,
                    ..small(false)
                },
                "--threads",
            ),
            (
                NetworkBenchOptions {
                    reps: 0,
                    ..small(true)
                },
                "--reps",
            ),
        ] {
            let e = measure_network(&o).unwrap_err().to_string();
            assert_eq!(e, format!("{flag} must be >= 1, found 0"));
        }
        let even = NetworkBenchOptions {
            model: ModelConfig {
                fov: [4; 3],
                ..small(false).model
            },
            ..small(false)
        };
        assert!(matches!(
            measure_network(&even),
            Err(CoreError::InvalidConfig(_))
        ));
    }
}
