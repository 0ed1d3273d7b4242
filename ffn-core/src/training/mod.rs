//! Everything that turns labelled volumes into FFN training steps, without files:
//!
//! - [`partitions`]: google/ffn's `compute_partitions` (local object mask fractions, quantised);
//! - [`coordinates`]: `build_coordinates` (class-balanced, shuffled training locations);
//! - [`examples`]: training examples (patch cutting, soft labels, seed canvas, FOV movement policies,
//!   write-back of predictions);
//! - [`augmentation`]: reflections and axis permutations;
//! - [`tracker`]: precision / recall / F1 / accuracy of the predicted masks;
//! - [`schedule`]: learning-rate schedules;
//! - [`source`]: where training patches come from (volumes in memory, or regions read on demand);
//! - [`step`]: one optimisation step (network, gradient reduction hook, clipping, optimiser);
//! - [`trainer`]: batches of independent example generators, with a serialisable state for exact
//!   resume.

pub mod augmentation;
pub mod coordinates;
pub mod distributed;
pub mod examples;
pub mod partitions;
pub mod schedule;
pub mod source;
pub mod step;
pub mod tracker;
pub mod trainer;

use alloc::string::String;
use core::fmt;

/// Errors of the training data pipeline. Messages name the field or item and what was expected.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TrainingError {
    /// A configuration value out of range.
    InvalidConfig {
        /// The field, e.g. `lom_radius`.
        field: &'static str,
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
    /// Two arrays that must agree do not.
    ShapeMismatch {
        /// What is being compared, e.g. `volume "a" image vs labels`.
        what: String,
        /// The expected shape.
        expected: [usize; 3],
        /// The shape found.
        found: [usize; 3],
    },
    /// A coordinate whose training patch does not fit in its volume, or names a missing volume.
    BadCoordinate {
        /// Index of the coordinate in the list.
        index: usize,
        /// Why.
        reason: String,
    },
    /// A saved state that does not match the current configuration or is truncated.
    BadState {
        /// Why.
        reason: String,
    },
    /// A [`source::PatchSource`] could not read a training patch.
    Read {
        /// The volume's name.
        volume: String,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for TrainingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidConfig {
                field,
                expected,
                found,
            } => {
                write!(f, "{field}: expected {expected}, found {found}")
            }
            Self::ShapeMismatch {
                what,
                expected,
                found,
            } => {
                write!(
                    f,
                    "{what}: expected shape {expected:?} (z,y,x), found {found:?}"
                )
            }
            Self::BadCoordinate { index, reason } => write!(f, "coordinate #{index}: {reason}"),
            Self::BadState { reason } => write!(f, "training state: {reason}"),
            Self::Read { volume, reason } => {
                write!(f, "reading a training patch of volume {volume:?}: {reason}")
            }
        }
    }
}

impl core::error::Error for TrainingError {}

/// `log(p / (1 - p))`.
pub fn logit(p: f32) -> f32 {
    libm::logf(p / (1.0 - p))
}

pub use crate::loss::sigmoid;

pub(crate) fn invalid(
    field: &'static str,
    expected: impl Into<String>,
    found: impl fmt::Debug,
) -> TrainingError {
    TrainingError::InvalidConfig {
        field,
        expected: expected.into(),
        found: alloc::format!("{found:?}"),
    }
}
