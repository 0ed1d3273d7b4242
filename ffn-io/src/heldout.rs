//! A held-out box of a labelled volume, segmented by a model and scored against its ground truth:
//! what `ffn bench learn` does for every checkpoint and `ffn demo` for the shipped model.
//!
//! Flood filling needs context: objects seeded outside a box-only run are lost, and its faces cut
//! objects. So inference runs on a context region around the box (the box grown by a margin,
//! clamped to an allowed region such as the held-out part of the volume), and only the box is
//! scored.

use std::time::Instant;

use crate::{TrainingNormalisation, VolumeSpec};
use anyhow::Result;
use ffn_core::inference::{
    AgglomerateOptions, InferenceOptions, SeedPolicy, SegmentOptions, normalize_image, segment,
};
use ffn_core::metrics::{MetricOptions, Scores, evaluate};
use ffn_core::network::ConvStack3d;

/// The context region's raw image and the box's labels, `[z][y][x]`.
pub struct HeldOut {
    /// Raw image values of the context region.
    pub raw: Vec<f32>,
    /// Context region shape `[z, y, x]`.
    pub context_shape: [usize; 3],
    /// Where the box starts inside the context region `[z, y, x]`.
    pub box_in_context: [usize; 3],
    /// Ground-truth ids of the box (0 = unlabelled, ignored in scores).
    pub truth: Vec<u64>,
    /// Box shape `[z, y, x]`.
    pub shape: [usize; 3],
}

/// The box `(offset, shape)` grown by `margin` voxels on every side and clamped to the region
/// `(lo, hi)` (z,y,x, `hi` exclusive), which must contain the box.
pub fn context_region(
    offset: [usize; 3],
    shape: [usize; 3],
    margin: usize,
    lo: [usize; 3],
    hi: [usize; 3],
) -> ([usize; 3], [usize; 3]) {
    let start = [0, 1, 2].map(|a| offset[a].saturating_sub(margin).max(lo[a]));
    let end = [0, 1, 2].map(|a| (offset[a] + shape[a] + margin).min(hi[a]));
    (start, [0, 1, 2].map(|a| end[a] - start[a]))
}

/// A segmentation of the box and its scores.
pub struct Scored {
    /// Segment ids, `[z][y][x]`, 0 = unsegmented.
    pub segmentation: Vec<u64>,
    /// Segments kept.
    pub segments: usize,
    /// Fraction of the box's voxels left unsegmented.
    pub unsegmented: f64,
    /// VI and adapted Rand against the truth (truth 0 ignored, unsegmented = one segment).
    pub scores: Scores,
    /// Wall-clock seconds of seeding and flood filling.
    pub seconds: f64,
}

impl HeldOut {
    /// Reads the box `(offset, shape)` (z,y,x) of the labels and the context region
    /// `(c_offset, c_shape)` (containing the box) of the image; same volume shapes checked.
    pub fn read(
        image: &VolumeSpec,
        labels: &VolumeSpec,
        (offset, shape): ([usize; 3], [usize; 3]),
        (c_offset, c_shape): ([usize; 3], [usize; 3]),
    ) -> Result<Self> {
        anyhow::ensure!(
            (0..3)
                .all(|a| c_offset[a] <= offset[a]
                    && offset[a] + shape[a] <= c_offset[a] + c_shape[a]),
            "the context region {c_offset:?} + {c_shape:?} does not contain the box {offset:?} + {shape:?} (z,y,x)"
        );
        crate::check_same_shape(
            image,
            &crate::dataset_shape(image)?,
            labels,
            &crate::dataset_shape(labels)?,
        )?;
        Ok(Self {
            raw: crate::read_image_f32_region(image, c_offset, c_shape)?
                .iter()
                .copied()
                .collect(),
            context_shape: c_shape,
            box_in_context: [0, 1, 2].map(|a| offset[a] - c_offset[a]),
            truth: crate::read_labels_region(labels, offset, shape)?
                .iter()
                .copied()
                .collect(),
            shape,
        })
    }

    /// Segments the context region with `net` (PolicyPeaks seeds, the flood-filling options
    /// `inference`, e.g. google/ffn's defaults, then `agglomerate` if given) on the image
    /// normalised as the model was trained (`trained`, else 128 / 33), and scores the box.
    pub fn segment(
        &self,
        mut net: ConvStack3d,
        trained: Option<TrainingNormalisation>,
        inference: &InferenceOptions,
        agglomerate: Option<&AgglomerateOptions>,
    ) -> Result<Scored> {
        let norm = crate::NormalisationChoice {
            trained,
            ..Default::default()
        }
        .resolve(|| Ok(ffn_core::inference::mean_stddev(self.raw.iter().copied())))?;
        let mut image = vec![0f32; self.raw.len()];
        normalize_image(&self.raw, norm.mean, norm.stddev, &mut image);
        let options = SegmentOptions {
            deltas: net.config().deltas,
            seeds: SeedPolicy::default(),
            inference: inference.clone(),
            agglomerate: agglomerate.cloned(),
        };
        let t = Instant::now();
        let clock = move || t.elapsed().as_secs_f64();
        let seg = segment(
            &image,
            self.context_shape,
            &mut net,
            &options,
            &clock,
            &mut |_| {},
        )
        .map_err(|e| anyhow::anyhow!("inference: {e}"))?;
        let segmentation = self.crop_to_box(&seg.labels);
        let mut s = self.score(segmentation)?;
        s.seconds = t.elapsed().as_secs_f64();
        Ok(s)
    }

    /// Scores a segmentation of the box (e.g. a published one, cropped); `seconds` is 0.
    pub fn score(&self, segmentation: Vec<u64>) -> Result<Scored> {
        anyhow::ensure!(
            segmentation.len() == self.truth.len(),
            "segmentation of {} voxels for a box of {}",
            segmentation.len(),
            self.truth.len()
        );
        let scores = evaluate(&self.truth, &segmentation, &MetricOptions::default())
            .map_err(|e| anyhow::anyhow!("evaluation: {e}"))?;
        let unsegmented = segmentation.iter().filter(|&&v| v == 0).count() as f64
            / segmentation.len().max(1) as f64;
        let mut ids: Vec<u64> = segmentation.iter().copied().filter(|&v| v != 0).collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(Scored {
            segments: ids.len(),
            segmentation,
            unsegmented,
            scores,
            seconds: 0.0,
        })
    }

    /// The raw image of the box's slice `z` (z within the box), as 8-bit grey values, `[y][x]`.
    pub fn box_slice(&self, z: usize) -> Vec<u8> {
        let [_, cy, cx] = self.context_shape;
        let [oz, oy, ox] = self.box_in_context;
        let [_, by, bx] = self.shape;
        let mut out = Vec::with_capacity(by * bx);
        for y in oy..oy + by {
            let row = ((oz + z) * cy + y) * cx;
            out.extend(self.raw[row + ox..row + ox + bx].iter().map(|&v| v as u8));
        }
        out
    }

    /// The box's voxels of a context-region volume.
    fn crop_to_box(&self, context: &[u32]) -> Vec<u64> {
        let [cz, cy, cx] = self.context_shape;
        debug_assert_eq!(context.len(), cz * cy * cx);
        let [oz, oy, ox] = self.box_in_context;
        let [bz, by, bx] = self.shape;
        let mut out = Vec::with_capacity(bz * by * bx);
        for z in oz..oz + bz {
            for y in oy..oy + by {
                let row = (z * cy + y) * cx;
                out.extend(
                    context[row + ox..row + ox + bx]
                        .iter()
                        .map(|&v| u64::from(v)),
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_grows_the_box_within_the_allowed_region() {
        let (o, s) = context_region(
            [160, 30, 140],
            [80, 80, 80],
            24,
            [150, 0, 0],
            [250, 250, 250],
        );
        assert_eq!(o, [150, 6, 116]);
        assert_eq!(s, [100, 128, 128]);
    }

    #[test]
    fn crop_takes_the_box_out_of_the_context() {
        let h = HeldOut {
            raw: vec![0.0; 4 * 5 * 6],
            context_shape: [4, 5, 6],
            box_in_context: [1, 2, 3],
            truth: vec![1; 2 * 2 * 2],
            shape: [2, 2, 2],
        };
        let ctx: Vec<u32> = (0..120).collect();
        let idx = |z: u64, y: u64, x: u64| (z * 5 + y) * 6 + x;
        assert_eq!(
            h.crop_to_box(&ctx),
            vec![
                idx(1, 2, 3),
                idx(1, 2, 4),
                idx(1, 3, 3),
                idx(1, 3, 4),
                idx(2, 2, 3),
                idx(2, 2, 4),
                idx(2, 3, 3),
                idx(2, 3, 4)
            ]
        );
        // The grey slice comes from the box too (raw values 0..120 as u8).
        let h = HeldOut {
            raw: (0..120).map(|v| v as f32).collect(),
            ..h
        };
        assert_eq!(
            h.box_slice(1),
            [idx(2, 2, 3), idx(2, 2, 4), idx(2, 3, 3), idx(2, 3, 4)].map(|v| v as u8)
        );
        let s = h.score(vec![1, 1, 2, 2, 0, 0, 0, 0]).unwrap();
        assert_eq!(s.segments, 2);
        assert_eq!(s.unsegmented, 0.5);
    }
}
