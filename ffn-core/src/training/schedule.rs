//! Learning-rate schedules: constant or exponential decay (staircase or smooth, as
//! `tf.train.exponential_decay`), optionally preceded by a linear warm-up (Goyal et al.; used by
//! Dong et al. when scaling the learning rate with the number of ranks).

use super::{TrainingError, invalid};

/// The learning rate as a function of the (0-based) step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LrSchedule {
    /// Base learning rate.
    pub lr: f32,
    /// Decay: `lr * rate^(step / steps)`; `None` keeps the rate constant.
    pub decay: Option<Decay>,
    /// Steps of linear warm-up: step `s < warmup` uses `lr(s) * (s + 1) / warmup`.
    pub warmup_steps: u64,
}

/// Exponential decay parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decay {
    /// Factor per `steps` steps, in `(0, 1]`.
    pub rate: f32,
    /// Steps per decay period, >= 1.
    pub steps: u64,
    /// Decay in whole periods (`floor(step / steps)`), as google/ffn does.
    pub staircase: bool,
}

impl LrSchedule {
    /// A constant rate.
    pub fn constant(lr: f32) -> Self {
        Self {
            lr,
            decay: None,
            warmup_steps: 0,
        }
    }

    /// Checks the fields.
    pub fn validate(&self) -> Result<(), TrainingError> {
        // 0 is allowed: the training loop then runs without changing the weights (an evaluation).
        if !(self.lr.is_finite() && self.lr >= 0.0) {
            return Err(invalid("learning_rate", "a finite value >= 0", self.lr));
        }
        if let Some(d) = self.decay {
            if !(d.rate > 0.0 && d.rate <= 1.0) {
                return Err(invalid("decay_rate", "a value in (0, 1]", d.rate));
            }
            if d.steps == 0 {
                return Err(invalid("decay_steps", ">= 1", d.steps));
            }
        }
        Ok(())
    }

    /// The learning rate at `step`.
    pub fn at(&self, step: u64) -> f32 {
        let mut lr = self.lr as f64;
        if let Some(d) = self.decay {
            let periods = step as f64 / d.steps as f64;
            let periods = if d.staircase {
                libm::floor(periods)
            } else {
                periods
            };
            lr *= libm::pow(d.rate as f64, periods);
        }
        if step < self.warmup_steps {
            lr *= (step + 1) as f64 / self.warmup_steps as f64;
        }
        lr as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_decay_and_warmup() {
        assert_eq!(LrSchedule::constant(0.001).at(12345), 0.001);
        let s = LrSchedule {
            lr: 1.0,
            decay: Some(Decay {
                rate: 0.5,
                steps: 10,
                staircase: true,
            }),
            warmup_steps: 0,
        };
        assert_eq!(s.at(9), 1.0);
        assert_eq!(s.at(10), 0.5);
        assert_eq!(s.at(25), 0.25);
        let smooth = LrSchedule {
            decay: Some(Decay {
                rate: 0.5,
                steps: 10,
                staircase: false,
            }),
            ..s
        };
        assert!((smooth.at(5) - 0.5f32.sqrt()).abs() < 1e-6);
        let w = LrSchedule {
            lr: 0.4,
            decay: None,
            warmup_steps: 4,
        };
        assert_eq!([w.at(0), w.at(1), w.at(3), w.at(4)], [0.1, 0.2, 0.4, 0.4]);
        // 0 runs the loop without learning (an evaluation); negative or NaN rates are errors.
        assert!(LrSchedule::constant(0.0).validate().is_ok());
        assert!(LrSchedule::constant(-1e-3).validate().is_err());
        assert!(LrSchedule::constant(f32::NAN).validate().is_err());
        assert!(
            LrSchedule {
                decay: Some(Decay {
                    rate: 0.5,
                    steps: 0,
                    staircase: true
                }),
                ..w
            }
            .validate()
            .is_err()
        );
    }
}
