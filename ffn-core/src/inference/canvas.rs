//! The inference canvas: the state of flood-filling one image volume, object after object.
//!
//! - The seed canvas holds the current object's mask as logits, NaN where never visited; it is reset
//!   (only where it was written) before every new object.
//! - A FOV position is valid when the seed there is at least the move threshold (not checked at the
//!   start point), the FOV lies fully inside the image (margin `fov / 2`), and no segment claims it.
//! - Each prediction sees the image patch and the seed patch (NaN replaced by the pad value); its
//!   logits replace the seed canvas over the FOV, subject to the disco rule.
//! - After an object is flooded, the seed point must still be at least the move threshold; voxels at
//!   or above the segment threshold that no segment claims yet form the new segment, kept only with
//!   at least `min_segment_size` voxels. Failed seed points are marked and never retried.

use alloc::vec;
use alloc::vec::Vec;

use super::movement::{FaceMaxPolicy, Pos};
use super::options::{InferenceOptions, Logits, sigmoid};
use super::{CanvasImage, InferenceError, Predictor};

/// Marker of a failed seed point in the segmentation (reported as 0).
const FAILED: u32 = u32::MAX;

/// How a segment was created.
#[derive(Clone, Debug, PartialEq)]
pub struct Origin {
    /// Segment id.
    pub id: u64,
    /// Seed point `[z, y, x]` (canvas coordinates).
    pub seed: [usize; 3],
    /// Predictions made while flooding it.
    pub iterations: u64,
    /// Seconds spent (from the caller's clock; 0 without one).
    pub time_s: f64,
    /// Voxels assigned to it.
    pub voxels: u64,
    /// Existing segments its mask overlapped (and were not overwritten): `(id, voxels)`.
    pub overlaps: Vec<(u64, u64)>,
}

/// Counters of one run; names follow google/ffn's counters where they exist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Network evaluations.
    pub predict_calls: u64,
    /// Seed points offered.
    pub seeds_total: u64,
    /// Seed points processed so far.
    pub seeds_done: u64,
    /// Seeds rejected as invalid starts (too close to the border, or already segmented).
    pub seeds_invalid: u64,
    /// Seeds at a point marked failed earlier.
    pub seeds_marked_failed: u64,
    /// Seeds within `min_boundary_dist` of an existing segment.
    pub seeds_near_segment: u64,
    /// Flooded objects whose seed ended below the move threshold.
    pub seeds_weak: u64,
    /// Flooded objects below `min_segment_size`.
    pub seeds_too_small: u64,
    /// Seeds where no prediction could be made.
    pub seeds_no_iterations: u64,
    /// Segments created.
    pub segments: u64,
    /// Voxels assigned to segments.
    pub voxels_segmented: u64,
    /// Mask voxels of new segments that were already claimed by older ones.
    pub voxels_overlapping: u64,
    /// Movement candidates below the move threshold.
    pub skip_threshold: u64,
    /// Movement candidates outside the margin or inside a segment.
    pub skip_invalid_pos: u64,
    /// Floods stopped because the seed point fell below the move threshold.
    pub seed_got_too_weak: u64,
}

/// What happened to one seed point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeedOutcome {
    /// Not a valid start (border margin or already segmented).
    Invalid,
    /// Marked failed by an earlier attempt.
    MarkedFailed,
    /// Within `min_boundary_dist` of a segment.
    NearSegment,
    /// No prediction was made.
    NoIterations,
    /// The seed point ended below the move threshold.
    WeakSeed,
    /// Too few voxels.
    TooSmall {
        /// Voxels the segment would have had.
        voxels: u64,
    },
    /// A new segment.
    Segment {
        /// Its id.
        id: u64,
        /// Its voxels.
        voxels: u64,
    },
}

/// Flood-fill inference state over one image volume. See the module docs.
pub struct Canvas<'a> {
    image: CanvasImage<'a>,
    shape: [usize; 3],
    fov: [usize; 3],
    margin: [usize; 3],
    opts: InferenceOptions,
    lg: Logits,
    seed: Vec<f32>,
    seg: Vec<u32>,
    prob: Option<Vec<u8>>,
    /// Box `[lo, hi)` of the seed canvas written since the last reset.
    touched: Option<([usize; 3], [usize; 3])>,
    policy: FaceMaxPolicy,
    min_pos: [usize; 3],
    max_pos: [usize; 3],
    max_id: u32,
    origins: Vec<Origin>,
    counters: Counters,
    img_patch: Vec<f32>,
    seed_patch: Vec<f32>,
    out_patch: Vec<f32>,
}

fn prod(s: [usize; 3]) -> usize {
    s[0] * s[1] * s[2]
}

/// google/ffn's probability quantisation: bucket of `p` among 255 equal steps of [0, 1], 1..=255.
pub fn quantize_probability(p: f32) -> u8 {
    if p.is_nan() {
        return 0;
    }
    let q = libm::floor(p as f64 * 254.0) as i64 + 1;
    q.clamp(1, 255) as u8
}

impl<'a> Canvas<'a> {
    /// A canvas over `image` (normalised voxels, or raw ones with their normalisation: a
    /// [`CanvasImage`]; `[z][y][x]` of `shape`), for a network with field of view `fov` moving by
    /// `deltas` (both `[z, y, x]`).
    pub fn new(
        image: impl Into<CanvasImage<'a>>,
        shape: [usize; 3],
        fov: [usize; 3],
        deltas: [usize; 3],
        opts: InferenceOptions,
    ) -> Result<Self, InferenceError> {
        let image = image.into();
        if image.len() != prod(shape) {
            return Err(InferenceError::Shape {
                what: "image",
                expected: prod(shape),
                actual: image.len(),
            });
        }
        for a in 0..3 {
            if fov[a].is_multiple_of(2) {
                return Err(InferenceError::Geometry(alloc::format!(
                    "fov: expected odd sizes, found {fov:?} (z, y, x)"
                )));
            }
            if deltas[a] > fov[a] / 2 {
                return Err(InferenceError::Geometry(alloc::format!(
                    "deltas: expected at most half the FOV ({:?}), found {deltas:?} (z, y, x)",
                    [fov[0] / 2, fov[1] / 2, fov[2] / 2]
                )));
            }
        }
        opts.validate().map_err(InferenceError::Options)?;
        if u32::try_from(prod(shape)).is_err() {
            return Err(InferenceError::Geometry(alloc::format!(
                "volume of {shape:?} voxels is too large for one canvas (at most 2^32 - 1 voxels)"
            )));
        }
        let lg = opts.logits();
        let n = prod(shape);
        let f = prod(fov);
        Ok(Self {
            image,
            shape,
            fov,
            margin: [fov[0] / 2, fov[1] / 2, fov[2] / 2],
            prob: opts.keep_probability_map.then(|| vec![0u8; n]),
            opts,
            lg,
            seed: vec![f32::NAN; n],
            seg: vec![0; n],
            touched: None,
            policy: FaceMaxPolicy::new(deltas, lg.move_score_threshold),
            min_pos: [0; 3],
            max_pos: [0; 3],
            max_id: 0,
            origins: Vec::new(),
            counters: Counters::default(),
            img_patch: vec![0.0; f],
            seed_patch: vec![0.0; f],
            out_patch: vec![0.0; f],
        })
    }

    /// Volume shape `[z, y, x]`.
    pub fn shape(&self) -> [usize; 3] {
        self.shape
    }

    /// The options in force.
    pub fn options(&self) -> &InferenceOptions {
        &self.opts
    }

    /// The counters so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Origins of the segments created so far, in id order.
    pub fn origins(&self) -> &[Origin] {
        &self.origins
    }

    /// The seed canvas (logits, NaN = not visited) of the object flooded last.
    pub fn seed_logits(&self) -> &[f32] {
        &self.seed
    }

    /// The segmentation, `[z][y][x]` flattened: segment ids, 0 = unassigned (failed seed marks
    /// included).
    pub fn segmentation(&self) -> Vec<u32> {
        self.seg.iter().map(|&s| public_id(s)).collect()
    }

    /// [`Canvas::segmentation`] without a copy: the canvas's id buffer itself, its failed seed
    /// marks set to 0, and the canvas's other buffers freed.
    pub fn into_segmentation(mut self) -> Vec<u32> {
        let mut seg = core::mem::take(&mut self.seg);
        drop(self);
        for s in &mut seg {
            *s = public_id(*s);
        }
        seg
    }

    /// The quantised object probability of every assigned voxel (0 elsewhere), when
    /// `keep_probability_map` is on.
    pub fn probability_map(&self) -> Option<&[u8]> {
        self.prob.as_deref()
    }

    fn idx(&self, p: [usize; 3]) -> usize {
        (p[0] * self.shape[1] + p[1]) * self.shape[2] + p[2]
    }

    fn claimed(&self, i: usize) -> bool {
        let s = self.seg[i];
        s != 0 && s != FAILED
    }

    /// The position as an in-volume index triple, or None outside.
    fn inside(&self, pos: Pos) -> Option<[usize; 3]> {
        let mut p = [0usize; 3];
        for a in 0..3 {
            if pos[a] < 0 || pos[a] as usize >= self.shape[a] {
                return None;
            }
            p[a] = pos[a] as usize;
        }
        Some(p)
    }

    /// True when the FOV centred at `pos` lies inside the image (margin `fov / 2`).
    pub fn within_margin(&self, pos: Pos) -> bool {
        (0..3).all(|a| {
            pos[a] >= self.margin[a] as i64
                && pos[a] + (self.margin[a] as i64) < self.shape[a] as i64
        })
    }

    /// The validity rule for a FOV position (see the module docs); counts rejections.
    pub fn is_valid_pos(&mut self, pos: Pos, ignore_move_threshold: bool) -> bool {
        let Some(p) = self.inside(pos) else {
            self.counters.skip_invalid_pos += 1;
            return false;
        };
        let i = self.idx(p);
        // NaN compares false, as in numpy: an unvisited voxel is not rejected here.
        if !ignore_move_threshold && self.seed[i] < self.lg.move_threshold {
            self.counters.skip_threshold += 1;
            return false;
        }
        if !self.within_margin(pos) || self.claimed(i) {
            self.counters.skip_invalid_pos += 1;
            return false;
        }
        true
    }

    fn reset_seed(&mut self) {
        if let Some((lo, hi)) = self.touched.take() {
            for z in lo[0]..hi[0] {
                for y in lo[1]..hi[1] {
                    let row = self.idx([z, y, lo[2]]);
                    self.seed[row..row + hi[2] - lo[2]].fill(f32::NAN);
                }
            }
        }
    }

    fn touch(&mut self, lo: [usize; 3], hi: [usize; 3]) {
        self.touched = Some(match self.touched {
            None => (lo, hi),
            Some((a, b)) => (
                [a[0].min(lo[0]), a[1].min(lo[1]), a[2].min(lo[2])],
                [b[0].max(hi[0]), b[1].max(hi[1]), b[2].max(hi[2])],
            ),
        });
    }

    /// One prediction at `p` (a valid position): updates the seed canvas and returns nothing; the
    /// new logits are left in `out_patch`.
    fn update_at<P: Predictor + ?Sized>(&mut self, p: [usize; 3], predictor: &mut P) {
        let f = self.fov;
        let lo = [
            p[0] - self.margin[0],
            p[1] - self.margin[1],
            p[2] - self.margin[2],
        ];
        let pad = self.lg.pad_value;
        for dz in 0..f[0] {
            for dy in 0..f[1] {
                let src = self.idx([lo[0] + dz, lo[1] + dy, lo[2]]);
                let dst = (dz * f[1] + dy) * f[2];
                self.image
                    .copy_normalised(src, &mut self.img_patch[dst..dst + f[2]]);
                for (d, &s) in self.seed_patch[dst..dst + f[2]]
                    .iter_mut()
                    .zip(&self.seed[src..src + f[2]])
                {
                    *d = if s.is_nan() { pad } else { s };
                }
            }
        }
        predictor.predict(&self.img_patch, &self.seed_patch, &mut self.out_patch);
        self.counters.predict_calls += 1;

        // The disco rule: never raise voxels the network had declared outside (< logit(0.5)).
        if self.opts.disco_seed_threshold >= 0.0 {
            let above = self
                .out_patch
                .iter()
                .filter(|&&l| l >= self.lg.move_threshold)
                .count();
            if (above as f64 / self.out_patch.len() as f64) > self.opts.disco_seed_threshold as f64
            {
                let level = self.lg.disco_level;
                for dz in 0..f[0] {
                    for dy in 0..f[1] {
                        let src = self.idx([lo[0] + dz, lo[1] + dy, lo[2]]);
                        let dst = (dz * f[1] + dy) * f[2];
                        let old = &self.seed[src..src + f[2]];
                        for (new, &o) in self.out_patch[dst..dst + f[2]].iter_mut().zip(old) {
                            // NaN (never visited) compares false on both tests.
                            if o < level && *new > o {
                                *new = o;
                            }
                        }
                    }
                }
            }
        }
        for dz in 0..f[0] {
            for dy in 0..f[1] {
                let dst = self.idx([lo[0] + dz, lo[1] + dy, lo[2]]);
                let src = (dz * f[1] + dy) * f[2];
                self.seed[dst..dst + f[2]].copy_from_slice(&self.out_patch[src..src + f[2]]);
            }
        }
        self.touch(lo, [lo[0] + f[0], lo[1] + f[1], lo[2] + f[2]]);
    }

    /// Floods one object from `start` (the seed canvas is reset first) and returns the number of
    /// predictions. `on_predict` is called after each prediction.
    pub fn segment_at<P: Predictor + ?Sized>(
        &mut self,
        start: [usize; 3],
        predictor: &mut P,
        on_predict: &mut dyn FnMut(&Counters),
    ) -> u64 {
        self.reset_seed();
        let si = self.idx(start);
        self.seed[si] = self.lg.init_activation;
        self.touch(start, [start[0] + 1, start[1] + 1, start[2] + 1]);
        let start_pos = start.map(|v| v as i64);
        self.policy.reset(start_pos);
        self.policy
            .push((2.0 * self.lg.move_score_threshold) as f32, start_pos);
        self.min_pos = start;
        self.max_pos = start;
        let mut iters = 0u64;
        loop {
            let mut policy = core::mem::replace(&mut self.policy, FaceMaxPolicy::new([0; 3], 0.0));
            let next = policy.next_valid(|q| self.is_valid_pos(q, false));
            self.policy = policy;
            let Some(pos) = next else { break };
            if self.seed[si] < self.lg.move_threshold {
                self.counters.seed_got_too_weak += 1;
                break;
            }
            let p = pos.map(|v| v as usize);
            self.update_at(p, predictor);
            for (a, &pa) in p.iter().enumerate() {
                self.min_pos[a] = self.min_pos[a].min(pa);
                self.max_pos[a] = self.max_pos[a].max(pa);
            }
            iters += 1;
            self.policy.update(&self.out_patch, self.fov, pos);
            on_predict(&self.counters);
        }
        iters
    }

    fn mark_failed(&mut self, i: usize) {
        if self.seg[i] == 0 {
            self.seg[i] = FAILED;
        }
    }

    /// Tries to create a segment from seed point `pos`. `clock` returns seconds (any origin) and
    /// times the attempt; `on_predict` is called after each prediction.
    pub fn try_seed<P: Predictor + ?Sized>(
        &mut self,
        pos: [usize; 3],
        predictor: &mut P,
        clock: &dyn Fn() -> f64,
        on_predict: &mut dyn FnMut(&Counters),
    ) -> Result<SeedOutcome, InferenceError> {
        let sp = pos.map(|v| v as i64);
        if self.inside(sp).is_none() || !self.within_margin(sp) {
            self.counters.seeds_invalid += 1;
            return Ok(SeedOutcome::Invalid);
        }
        let i = self.idx(pos);
        if self.seg[i] == FAILED {
            self.counters.seeds_marked_failed += 1;
            return Ok(SeedOutcome::MarkedFailed);
        }
        if self.claimed(i) {
            self.counters.seeds_invalid += 1;
            return Ok(SeedOutcome::Invalid);
        }
        // Too close to an existing segment?
        let mbd = self.opts.min_boundary_dist;
        let lo = [0, 1, 2].map(|a| pos[a].saturating_sub(mbd[a]));
        let hi = [0, 1, 2].map(|a| (pos[a] + mbd[a] + 1).min(self.shape[a]));
        for z in lo[0]..hi[0] {
            for y in lo[1]..hi[1] {
                for x in lo[2]..hi[2] {
                    if self.claimed(self.idx([z, y, x])) {
                        self.mark_failed(i);
                        self.counters.seeds_near_segment += 1;
                        return Ok(SeedOutcome::NearSegment);
                    }
                }
            }
        }

        let t0 = clock();
        let iters = self.segment_at(pos, predictor, on_predict);
        let elapsed = clock() - t0;
        if iters == 0 {
            self.counters.seeds_no_iterations += 1;
            return Ok(SeedOutcome::NoIterations);
        }
        if self.seed[i] < self.lg.move_threshold {
            self.mark_failed(i);
            self.counters.seeds_weak += 1;
            return Ok(SeedOutcome::WeakSeed);
        }

        // Only the box the FOV visited can hold the new object.
        let lo = [0, 1, 2].map(|a| self.min_pos[a].saturating_sub(self.fov[a] / 2));
        let hi = [0, 1, 2].map(|a| (self.max_pos[a] + self.fov[a] / 2 + 1).min(self.shape[a]));
        let th = self.lg.segment_threshold;
        let mut overlaps: alloc::collections::BTreeMap<u32, u64> =
            alloc::collections::BTreeMap::new();
        let mut raw = 0u64;
        let mut actual = 0u64;
        for z in lo[0]..hi[0] {
            for y in lo[1]..hi[1] {
                let row = self.idx([z, y, 0]);
                for x in lo[2]..hi[2] {
                    let j = row + x;
                    if self.seed[j] >= th {
                        raw += 1;
                        if self.claimed(j) {
                            *overlaps.entry(self.seg[j]).or_insert(0) += 1;
                        } else {
                            actual += 1;
                        }
                    }
                }
            }
        }
        if actual < self.opts.min_segment_size as u64 {
            self.mark_failed(i);
            self.counters.seeds_too_small += 1;
            return Ok(SeedOutcome::TooSmall { voxels: actual });
        }
        if self.max_id >= FAILED - 1 {
            return Err(InferenceError::TooManySegments);
        }
        self.max_id += 1;
        let id = self.max_id;
        for z in lo[0]..hi[0] {
            for y in lo[1]..hi[1] {
                let row = self.idx([z, y, 0]);
                for x in lo[2]..hi[2] {
                    let j = row + x;
                    if self.seed[j] >= th && !self.claimed(j) {
                        self.seg[j] = id;
                        if let Some(prob) = &mut self.prob {
                            prob[j] = quantize_probability(sigmoid(self.seed[j]));
                        }
                    }
                }
            }
        }
        self.counters.segments += 1;
        self.counters.voxels_segmented += actual;
        self.counters.voxels_overlapping += raw - actual;
        self.origins.push(Origin {
            id: id as u64,
            seed: pos,
            iterations: iters,
            time_s: elapsed,
            voxels: actual,
            overlaps: overlaps.into_iter().map(|(k, v)| (k as u64, v)).collect(),
        });
        Ok(SeedOutcome::Segment {
            id: id as u64,
            voxels: actual,
        })
    }

    /// Runs [`Canvas::try_seed`] over `seeds` in order. `on_progress` is called after every
    /// prediction and every seed.
    pub fn segment_all<P: Predictor + ?Sized>(
        &mut self,
        seeds: &[[usize; 3]],
        predictor: &mut P,
        clock: &dyn Fn() -> f64,
        on_progress: &mut dyn FnMut(&Counters),
    ) -> Result<(), InferenceError> {
        self.counters.seeds_total += seeds.len() as u64;
        for &s in seeds {
            self.try_seed(s, predictor, clock, on_progress)?;
            self.counters.seeds_done += 1;
            on_progress(&self.counters);
        }
        Ok(())
    }
}

/// The id a canvas label reports: 0 for failed-seed marks.
fn public_id(s: u32) -> u32 {
    if s == FAILED { 0 } else { s }
}
