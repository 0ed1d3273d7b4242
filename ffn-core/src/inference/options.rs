//! Inference options (google/ffn's `InferenceOptions`), as probabilities, and their logit forms.

/// Options of the flood-fill loop. Probabilities in `(0, 1)`, as users write them in google/ffn
/// requests; [`InferenceOptions::logits`] converts them for the canvas.
#[derive(Clone, Debug, PartialEq)]
pub struct InferenceOptions {
    /// Object probability written at a new seed (default 0.95).
    pub init_activation: f32,
    /// Probability fed to the network for never-visited voxels (default 0.05).
    pub pad_value: f32,
    /// Probability needed at a FOV position to move there, and at the seed to keep going (default 0.9).
    pub move_threshold: f32,
    /// Probability at which a voxel joins the finished segment (default 0.6).
    pub segment_threshold: f32,
    /// Segments with fewer (newly claimed) voxels are dropped (default 1000).
    pub min_segment_size: usize,
    /// A seed closer than this (`[z, y, x]`, Chebyshev box) to an existing segment is skipped
    /// (default 1,1,1).
    pub min_boundary_dist: [usize; 3],
    /// The "disco" rule threshold (default 0): when the fraction of the new prediction's voxels at or
    /// above the move threshold exceeds it, voxels that were below probability 0.5 are not raised.
    /// Negative disables the rule.
    pub disco_seed_threshold: f32,
    /// Keep a quantised probability map of the accepted segments (default false).
    pub keep_probability_map: bool,
    /// Test-time augmentation: average the predictions of the FOV reflected and swapped so
    /// (default none: one prediction per call, as google/ffn). Not a google/ffn option.
    pub symmetries: super::Symmetries,
}

impl Default for InferenceOptions {
    fn default() -> Self {
        Self {
            init_activation: 0.95,
            pad_value: 0.05,
            move_threshold: 0.9,
            segment_threshold: 0.6,
            min_segment_size: 1000,
            min_boundary_dist: [1, 1, 1],
            disco_seed_threshold: 0.0,
            keep_probability_map: false,
            symmetries: super::Symmetries::default(),
        }
    }
}

/// `log(p / (1 - p))` in double precision.
pub fn logit(p: f64) -> f64 {
    libm::log(p / (1.0 - p))
}

pub use crate::loss::sigmoid;

/// The thresholds of [`InferenceOptions`] in logit space, as the canvas compares them.
///
/// google/ffn stores the converted values back into its float32 options proto, so the canvas values
/// are `f32(logit(f64(p)))`; its movement policy compares face maxima against the unrounded
/// `logit(f64(p))`, kept here as [`Logits::move_score_threshold`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Logits {
    /// logit(init_activation).
    pub init_activation: f32,
    /// logit(pad_value).
    pub pad_value: f32,
    /// logit(move_threshold).
    pub move_threshold: f32,
    /// logit(segment_threshold).
    pub segment_threshold: f32,
    /// logit(move_threshold) in double precision (movement policy).
    pub move_score_threshold: f64,
    /// logit(0.5) = 0, the disco rule's "disconnected" level.
    pub disco_level: f32,
}

/// A problem with the options; the message names the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionsError(pub alloc::string::String);

impl core::fmt::Display for OptionsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "invalid inference options: {}", self.0)
    }
}

impl core::error::Error for OptionsError {}

impl InferenceOptions {
    /// Checks that every probability lies strictly between 0 and 1.
    pub fn validate(&self) -> Result<(), OptionsError> {
        for (name, p) in [
            ("init_activation", self.init_activation),
            ("pad_value", self.pad_value),
            ("move_threshold", self.move_threshold),
            ("segment_threshold", self.segment_threshold),
        ] {
            if !(p > 0.0 && p < 1.0) {
                return Err(OptionsError(alloc::format!(
                    "{name}: expected a probability strictly between 0 and 1, found {p}"
                )));
            }
        }
        if !self.disco_seed_threshold.is_finite() {
            return Err(OptionsError(alloc::format!(
                "disco_seed_threshold: expected a finite number, found {}",
                self.disco_seed_threshold
            )));
        }
        Ok(())
    }

    /// The thresholds in logit space.
    pub fn logits(&self) -> Logits {
        let l = |p: f32| logit(p as f64);
        Logits {
            init_activation: l(self.init_activation) as f32,
            pad_value: l(self.pad_value) as f32,
            move_threshold: l(self.move_threshold) as f32,
            segment_threshold: l(self.segment_threshold) as f32,
            move_score_threshold: l(self.move_threshold),
            disco_level: 0.0,
        }
    }
}
