//! Training metrics as google/ffn's `EvalTracker` computes them: a voxel is predicted "object" when
//! its logit is >= `logit(0.9)` and is truly object when its soft label is > 0.5; precision, recall,
//! F1 and accuracy follow from the confusion counts, summed over the examples of a reporting window.

use super::logit;

/// Confusion counts and loss sums over a reporting window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tracker {
    /// True positives.
    pub tp: u64,
    /// False positives.
    pub fp: u64,
    /// True negatives.
    pub tn: u64,
    /// False negatives.
    pub fn_: u64,
    /// Sum of per-step mean losses.
    pub loss_sum: f64,
    /// Steps added with [`Tracker::add_loss`].
    pub steps: u64,
    /// Examples added with [`Tracker::add_patch`].
    pub examples: u64,
}

/// The ratios of one window. Ratios with a zero denominator are 0.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Metrics {
    /// Mean loss per step.
    pub loss: f64,
    /// tp / (tp + fp).
    pub precision: f64,
    /// tp / (tp + fn).
    pub recall: f64,
    /// 2 p r / (p + r).
    pub f1: f64,
    /// (tp + tn) / all.
    pub accuracy: f64,
    /// Examples finished in the window.
    pub examples: u64,
    /// Steps in the window.
    pub steps: u64,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

impl Tracker {
    /// The default decision threshold (probability).
    pub const THRESHOLD: f32 = 0.9;

    /// Adds one predicted patch: `logits` vs soft `labels` (same length).
    pub fn add_patch(&mut self, logits: &[f32], labels: &[f32]) {
        let t = logit(Self::THRESHOLD);
        for (&p, &l) in logits.iter().zip(labels) {
            match (p >= t, l > 0.5) {
                (true, true) => self.tp += 1,
                (true, false) => self.fp += 1,
                (false, false) => self.tn += 1,
                (false, true) => self.fn_ += 1,
            }
        }
        self.examples += 1;
    }

    /// Adds one step's mean loss.
    pub fn add_loss(&mut self, loss: f32) {
        self.loss_sum += loss as f64;
        self.steps += 1;
    }

    /// Ratios of the window so far.
    pub fn metrics(&self) -> Metrics {
        let precision = ratio(self.tp, self.tp + self.fp);
        let recall = ratio(self.tp, self.tp + self.fn_);
        let f1 = if precision + recall > 0.0 {
            2.0 * precision * recall / (precision + recall)
        } else {
            0.0
        };
        Metrics {
            loss: if self.steps == 0 {
                0.0
            } else {
                self.loss_sum / self.steps as f64
            },
            precision,
            recall,
            f1,
            accuracy: ratio(self.tp + self.tn, self.tp + self.tn + self.fp + self.fn_),
            examples: self.examples,
            steps: self.steps,
        }
    }

    /// Returns the window's metrics and starts a new window.
    pub fn take(&mut self) -> Metrics {
        let m = self.metrics();
        *self = Self::default();
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_ratios() {
        let mut t = Tracker::default();
        // logit(0.9) = 2.197: 2.2 is object, 2.1 is not.
        let logits = [2.2, 2.2, 2.1, -5.0, 2.1];
        let labels = [0.95, 0.05, 0.95, 0.05, 0.05];
        t.add_patch(&logits, &labels);
        t.add_loss(1.0);
        t.add_loss(0.5);
        assert_eq!((t.tp, t.fp, t.tn, t.fn_), (1, 1, 2, 1));
        let m = t.take();
        assert!((m.precision - 0.5).abs() < 1e-12 && (m.recall - 0.5).abs() < 1e-12);
        assert!((m.f1 - 0.5).abs() < 1e-12 && (m.accuracy - 0.6).abs() < 1e-12);
        assert!((m.loss - 0.75).abs() < 1e-12);
        assert_eq!(t, Tracker::default());
        assert_eq!(t.metrics().f1, 0.0);
    }
}
