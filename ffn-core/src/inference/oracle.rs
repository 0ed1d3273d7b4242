//! A predictor without a model, for tests and demonstrations of the flood-fill machinery.

use super::{InferenceOptions, Predictor, SeedPolicy, SegmentOptions};

/// A [`Predictor`] that reads an "image" of label ids and predicts the true mask of the object at
/// the FOV centre: logits of 4 inside (falling by 0.01 per squared voxel of distance from the
/// centre, so that face-max movement goes straight along the axes) and -4 outside. Segmenting
/// such an image recovers its objects exactly, which lets tests check tiling, scheduling and
/// reconciliation without a trained network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LabelOracle {
    /// The field of view `[z, y, x]` (odd sizes).
    pub fov: [usize; 3],
}

impl Predictor for LabelOracle {
    fn fov(&self) -> [usize; 3] {
        self.fov
    }
    fn predict(&mut self, image: &[f32], _seed: &[f32], out: &mut [f32]) {
        let c = image[image.len() / 2];
        let f = self.fov;
        for (i, (o, &v)) in out.iter_mut().zip(image).enumerate() {
            let p = [i / (f[1] * f[2]), i / f[2] % f[1], i % f[2]];
            let d2: usize = (0..3).map(|a| p[a].abs_diff(f[a] / 2).pow(2)).sum();
            *o = if v == c { 4.0 - 0.01 * d2 as f32 } else { -4.0 };
        }
    }
}

impl LabelOracle {
    /// Options under which the oracle recovers every object that has room for one FOV centre:
    /// moves of one voxel, a seed at every voxel, seeds allowed next to other segments, every
    /// segment kept.
    pub fn exhaustive_options() -> SegmentOptions {
        SegmentOptions {
            deltas: [1, 1, 1],
            seeds: SeedPolicy::Grid { step: 1 },
            inference: InferenceOptions {
                min_segment_size: 1,
                min_boundary_dist: [0; 3],
                ..Default::default()
            },
            agglomerate: None,
        }
    }
}
