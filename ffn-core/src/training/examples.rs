//! FFN training examples: one example is a training patch around a coordinate, its soft labels, and a
//! seed canvas on which the network is applied at a sequence of FOV positions ("moves"), each
//! prediction being written back into the canvas so later moves see the network's own output.
//!
//! - Patch edge: `fov + 2 * delta * fov_moves` per axis (49^3 for FOV 33, delta 8, one move).
//! - Soft labels: `label_on` (0.95) where the voxel carries the (non-zero) label of the patch centre,
//!   `label_off` (0.05) elsewhere; a centre on background gives an all-`label_off` target.
//! - Seed canvas: `logit(seed_pad)` everywhere, `logit(seed_init)` at the centre voxel.
//! - [`FovPolicy::Fixed`]: the centre, then the 26 shifts by `+-delta` (shuffled per example), each
//!   taken only if the canvas at its centre is >= `logit(move_threshold)` when its turn comes.
//! - [`FovPolicy::MaxPredMoves`]: start at the centre; after every prediction, each of the 6 faces of
//!   the predicted FOV at `+-delta` offers the position of its maximum when that maximum reaches
//!   `logit(move_threshold)` (best first); positions are visited once per `delta` grid cell and
//!   only while the FOV stays inside the patch.

use alloc::collections::VecDeque;
use alloc::vec;
use alloc::vec::Vec;

use ndarray::ArrayView3;

use super::augmentation::{AugmentConfig, Augmentation};
use super::coordinates::Coordinate;
use super::{TrainingError, invalid, logit};
use crate::rng::Rng;

/// How the FOV moves within a training example.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FovPolicy {
    /// Centre, then the 26 `+-delta` shifts in random order (google/ffn's default).
    #[default]
    Fixed,
    /// Follow the predicted mask as inference does (face maxima).
    MaxPredMoves,
}

/// Parameters of training examples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExampleConfig {
    /// Network FOV `[z, y, x]` (odd).
    pub fov: [usize; 3],
    /// FOV movement step `[z, y, x]`.
    pub deltas: [usize; 3],
    /// Movement policy.
    pub policy: FovPolicy,
    /// Moves the patch leaves room for on each side (google/ffn's `fov_moves`, 1).
    pub fov_moves: usize,
    /// Probability a position's seed must reach to be visited (0.9).
    pub move_threshold: f32,
    /// Initial canvas probability away from the centre (0.05).
    pub seed_pad: f32,
    /// Initial canvas probability at the centre voxel (0.95).
    pub seed_init: f32,
    /// Soft label of voxels outside the centre object (0.05).
    pub label_off: f32,
    /// Soft label of voxels of the centre object (0.95).
    pub label_on: f32,
    /// Shuffle the 26 fixed shifts per example.
    pub shuffle_moves: bool,
    /// Augmentations drawn per example.
    pub augment: AugmentConfig,
}

impl ExampleConfig {
    /// google/ffn's defaults for a FOV and deltas.
    pub fn new(fov: [usize; 3], deltas: [usize; 3]) -> Self {
        Self {
            fov,
            deltas,
            policy: FovPolicy::Fixed,
            fov_moves: 1,
            move_threshold: 0.9,
            seed_pad: 0.05,
            seed_init: 0.95,
            label_off: 0.05,
            label_on: 0.95,
            shuffle_moves: true,
            augment: AugmentConfig::default(),
        }
    }

    /// Training patch shape: `fov + 2 * delta * fov_moves`.
    pub fn patch_shape(&self) -> [usize; 3] {
        [0, 1, 2].map(|d| self.fov[d] + 2 * self.deltas[d] * self.fov_moves)
    }

    /// Region scored by the tracker at the end of an example: `fov + 2 * delta`, within the patch.
    pub fn eval_shape(&self) -> [usize; 3] {
        let p = self.patch_shape();
        [0, 1, 2].map(|d| (self.fov[d] + 2 * self.deltas[d]).min(p[d]))
    }

    /// Voxels in one FOV.
    pub fn fov_len(&self) -> usize {
        self.fov.iter().product()
    }

    /// Checks the fields.
    pub fn validate(&self) -> Result<(), TrainingError> {
        if self.fov.iter().any(|&f| f % 2 == 0) {
            return Err(invalid("fov", "odd sizes", self.fov));
        }
        let prob = |p: f32| p > 0.0 && p < 1.0;
        for (field, v) in [
            ("move_threshold", self.move_threshold),
            ("seed_pad", self.seed_pad),
            ("seed_init", self.seed_init),
            ("label_off", self.label_off),
            ("label_on", self.label_on),
        ] {
            if !prob(v) {
                return Err(invalid(field, "a probability in (0, 1)", v));
            }
        }
        let p = self.patch_shape();
        if p.iter().product::<usize>() > 1 << 28 {
            return Err(invalid(
                "fov_moves",
                "a training patch below 2^28 voxels",
                p,
            ));
        }
        self.augment.validate(p)
    }
}

/// Movement state of one example.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Moves {
    /// Fixed policy: all offsets in visiting order and the index of the next one to try.
    Fixed {
        /// Offsets `[z, y, x]`, the centre first.
        order: Vec<[i32; 3]>,
        /// Next index into `order`.
        next: usize,
    },
    /// Max-prediction policy.
    MaxPred {
        /// Offsets waiting to be visited.
        queue: VecDeque<[i32; 3]>,
        /// Visited cells of the `delta` grid.
        done: Vec<[i32; 3]>,
        /// Offset whose prediction has not been scanned for new moves yet.
        pending: Option<[i32; 3]>,
    },
}

/// One training example: patch, labels, canvas and movement state.
#[derive(Clone, Debug, PartialEq)]
pub struct Example {
    /// Where it comes from.
    pub coord: Coordinate,
    /// The augmentation applied to its patch.
    pub aug: Augmentation,
    shape: [usize; 3],
    image: Vec<f32>,
    labels: Vec<f32>,
    canvas: Vec<f32>,
    moves: Moves,
}

fn idx(shape: [usize; 3], z: usize, y: usize, x: usize) -> usize {
    (z * shape[1] + y) * shape[2] + x
}

/// Checks that a training patch of `cfg` centred on `c` lies inside a volume of shape `dims`.
pub fn patch_fits(cfg: &ExampleConfig, dims: [usize; 3], c: [u32; 3]) -> bool {
    let p = cfg.patch_shape();
    (0..3).all(|d| {
        let (c, r) = (c[d] as usize, p[d] / 2);
        c >= r && c + (p[d] - r) <= dims[d]
    })
}

/// The first voxel `[z, y, x]` of the training patch centred on `coord` (which must satisfy
/// [`patch_fits`]).
pub fn patch_start(cfg: &ExampleConfig, coord: Coordinate) -> [usize; 3] {
    let p = cfg.patch_shape();
    [0, 1, 2].map(|d| coord.zyx[d] as usize - p[d] / 2)
}

/// The 26 shifts by `+-delta` (axes with delta 0 contribute only 0; duplicates removed).
pub fn fixed_shifts(deltas: [usize; 3]) -> Vec<[i32; 3]> {
    let mut out = Vec::new();
    for dz in -1..=1i32 {
        for dy in -1..=1i32 {
            for dx in -1..=1i32 {
                let s = [
                    dz * deltas[0] as i32,
                    dy * deltas[1] as i32,
                    dx * deltas[2] as i32,
                ];
                if s != [0, 0, 0] && !out.contains(&s) {
                    out.push(s);
                }
            }
        }
    }
    out
}

impl Example {
    /// Cuts the example at `coord` from `image` (normalised) and `labels`, applies `aug`, builds the
    /// canvas and draws the move order with `rng`. `coord` must satisfy [`patch_fits`].
    pub fn new(
        cfg: &ExampleConfig,
        image: ArrayView3<f32>,
        labels: ArrayView3<u64>,
        coord: Coordinate,
        aug: Augmentation,
        rng: &mut Rng,
    ) -> Self {
        let (mut img, mut ids) = (Vec::new(), Vec::new());
        let start = patch_start(cfg, coord);
        super::source::cut(image, labels, start, cfg.patch_shape(), &mut img, &mut ids);
        Self::from_patch(cfg, &img, &ids, coord, aug, rng)
    }

    /// The example at `coord` from its training patch already cut (`image` normalised and `labels`,
    /// [`ExampleConfig::patch_shape`] voxels from [`patch_start`], row-major): applies `aug`,
    /// builds the canvas and draws the move order with `rng`.
    pub fn from_patch(
        cfg: &ExampleConfig,
        img: &[f32],
        ids: &[u64],
        coord: Coordinate,
        aug: Augmentation,
        rng: &mut Rng,
    ) -> Self {
        let p = cfg.patch_shape();
        let n = p.iter().product();
        let img = aug.apply(img, p);
        let ids = aug.apply(ids, p);
        let shape = aug.output_shape(p);
        let centre_id = ids[idx(shape, shape[0] / 2, shape[1] / 2, shape[2] / 2)];
        let soft = ids
            .iter()
            .map(|&l| {
                if l != 0 && l == centre_id {
                    cfg.label_on
                } else {
                    cfg.label_off
                }
            })
            .collect();
        let mut canvas = vec![logit(cfg.seed_pad); n];
        canvas[idx(shape, shape[0] / 2, shape[1] / 2, shape[2] / 2)] = logit(cfg.seed_init);
        let moves = match cfg.policy {
            FovPolicy::Fixed => {
                let mut shifts = fixed_shifts(cfg.deltas);
                if cfg.shuffle_moves {
                    rng.shuffle(&mut shifts);
                }
                let mut order = vec![[0, 0, 0]];
                order.extend(shifts);
                Moves::Fixed { order, next: 0 }
            }
            FovPolicy::MaxPredMoves => Moves::MaxPred {
                queue: VecDeque::from(vec![[0, 0, 0]]),
                done: Vec::new(),
                pending: None,
            },
        };
        Self {
            coord,
            aug,
            shape,
            image: img,
            labels: soft,
            canvas,
            moves,
        }
    }

    /// Patch shape `[z, y, x]`.
    pub fn shape(&self) -> [usize; 3] {
        self.shape
    }

    /// Soft labels of the whole patch.
    pub fn labels(&self) -> &[f32] {
        &self.labels
    }

    /// Normalised image of the whole patch.
    pub fn image(&self) -> &[f32] {
        &self.image
    }

    /// The seed canvas (logits) of the whole patch.
    pub fn canvas(&self) -> &[f32] {
        &self.canvas
    }

    /// Movement state.
    pub fn moves(&self) -> &Moves {
        &self.moves
    }

    /// Replaces canvas and movement state (restoring a saved example).
    pub fn restore(&mut self, canvas: Vec<f32>, moves: Moves) -> Result<(), TrainingError> {
        if canvas.len() != self.canvas.len() {
            return Err(TrainingError::BadState {
                reason: alloc::format!(
                    "example canvas: expected {} values, found {}",
                    self.canvas.len(),
                    canvas.len()
                ),
            });
        }
        let same_kind = matches!(
            (&self.moves, &moves),
            (Moves::Fixed { .. }, Moves::Fixed { .. })
                | (Moves::MaxPred { .. }, Moves::MaxPred { .. })
        );
        if !same_kind {
            return Err(TrainingError::BadState {
                reason: "FOV policy differs from the saved one".into(),
            });
        }
        self.canvas = canvas;
        self.moves = moves;
        Ok(())
    }

    /// Whether a FOV at `off` from the centre lies inside the patch.
    fn fov_fits(&self, cfg: &ExampleConfig, off: [i32; 3]) -> bool {
        (0..3).all(|d| {
            let c = (self.shape[d] / 2) as i64 + off[d] as i64;
            let r = (cfg.fov[d] / 2) as i64;
            c - r >= 0 && c + r < self.shape[d] as i64
        })
    }

    fn canvas_at_offset(&self, off: [i32; 3]) -> f32 {
        let c = [0, 1, 2].map(|d| ((self.shape[d] / 2) as i64 + off[d] as i64) as usize);
        self.canvas[idx(self.shape, c[0], c[1], c[2])]
    }

    /// The next FOV offset `[z, y, x]` from the patch centre, or `None` when the example is done.
    /// Validity is judged on the canvas as it is now, i.e. after earlier predictions were written back.
    pub fn next_offset(&mut self, cfg: &ExampleConfig) -> Option<[i32; 3]> {
        let threshold = logit(cfg.move_threshold);
        if let Moves::MaxPred {
            pending: Some(off), ..
        } = self.moves
        {
            let found = self.face_max_moves(cfg, off, threshold);
            if let Moves::MaxPred { queue, pending, .. } = &mut self.moves {
                queue.extend(found);
                *pending = None;
            }
        }
        loop {
            let off = match &mut self.moves {
                Moves::Fixed { order, next } => {
                    let off = *order.get(*next)?;
                    *next += 1;
                    // The centre is always visited (its seed is the initial activation).
                    let valid = off == [0, 0, 0]
                        || (self.fov_fits(cfg, off) && self.canvas_at_offset(off) >= threshold);
                    if !valid {
                        continue;
                    }
                    off
                }
                Moves::MaxPred { queue, .. } => queue.pop_front()?,
            };
            if let Moves::MaxPred { done, pending, .. } = &mut self.moves {
                let fits = (0..3).all(|d| {
                    let c = (self.shape[d] / 2) as i64 + off[d] as i64;
                    let r = (cfg.fov[d] / 2) as i64;
                    c - r >= 0 && c + r < self.shape[d] as i64
                });
                let cell = [0, 1, 2].map(|d| off[d].div_euclid(cfg.deltas[d].max(1) as i32));
                if !fits || done.contains(&cell) {
                    continue;
                }
                done.push(cell);
                *pending = Some(off);
            }
            return Some(off);
        }
    }

    /// Face-max candidates around the prediction at `off`, best first.
    fn face_max_moves(&self, cfg: &ExampleConfig, off: [i32; 3], threshold: f32) -> Vec<[i32; 3]> {
        let f = cfg.fov;
        let start =
            [0, 1, 2].map(|d| (self.shape[d] / 2) as i64 + off[d] as i64 - (f[d] / 2) as i64);
        let mut found: Vec<(f32, [i32; 3])> = Vec::new();
        for axis in 0..3 {
            let delta = cfg.deltas[axis];
            if delta == 0 || delta > f[axis] / 2 {
                continue;
            }
            for sign in [-1i64, 1] {
                let plane = (f[axis] / 2) as i64 + sign * delta as i64;
                let (a, b) = match axis {
                    0 => (1, 2),
                    1 => (0, 2),
                    _ => (0, 1),
                };
                let mut best: Option<(f32, [i64; 3])> = None;
                for i in 0..f[a] as i64 {
                    for j in 0..f[b] as i64 {
                        let mut p = [0i64; 3];
                        p[axis] = plane;
                        p[a] = i;
                        p[b] = j;
                        let g = [0, 1, 2].map(|d| (start[d] + p[d]) as usize);
                        let v = self.canvas[idx(self.shape, g[0], g[1], g[2])];
                        if best.is_none_or(|(bv, _)| v > bv) {
                            best = Some((v, p));
                        }
                    }
                }
                if let Some((v, p)) = best
                    && v >= threshold
                {
                    let mut o = [0, 1, 2].map(|d| off[d] + (p[d] - (f[d] / 2) as i64) as i32);
                    o[axis] = off[axis] + (sign * delta as i64) as i32;
                    found.push((v, o));
                }
            }
        }
        found.sort_by(|x, y| y.0.total_cmp(&x.0));
        found.into_iter().map(|(_, o)| o).collect()
    }

    /// Copies the FOV at `off` into the network inputs: image, seed (canvas) and labels, each
    /// `fov_len` values.
    pub fn fill_inputs(
        &self,
        cfg: &ExampleConfig,
        off: [i32; 3],
        image: &mut [f32],
        seed: &mut [f32],
        labels: &mut [f32],
    ) {
        let mut k = 0;
        self.for_fov(cfg, off, |i| {
            image[k] = self.image[i];
            seed[k] = self.canvas[i];
            labels[k] = self.labels[i];
            k += 1;
        });
    }

    /// Writes the predicted logits of the FOV at `off` back into the canvas.
    pub fn write_back(&mut self, cfg: &ExampleConfig, off: [i32; 3], logits: &[f32]) {
        let mut positions = Vec::with_capacity(logits.len());
        self.for_fov(cfg, off, |i| positions.push(i));
        for (&i, &l) in positions.iter().zip(logits) {
            self.canvas[i] = l;
        }
    }

    /// Calls `f` with the patch index of every FOV voxel at `off`, in `[z][y][x]` order.
    fn for_fov(&self, cfg: &ExampleConfig, off: [i32; 3], mut f: impl FnMut(usize)) {
        let fv = cfg.fov;
        let s = [0, 1, 2]
            .map(|d| ((self.shape[d] / 2) as i64 + off[d] as i64 - (fv[d] / 2) as i64) as usize);
        for z in 0..fv[0] {
            for y in 0..fv[1] {
                let row = idx(self.shape, s[0] + z, s[1] + y, s[2]);
                for x in 0..fv[2] {
                    f(row + x);
                }
            }
        }
    }

    /// Canvas and labels of the central `eval_shape` region, for the tracker.
    pub fn eval_region(&self, cfg: &ExampleConfig) -> (Vec<f32>, Vec<f32>) {
        let e = cfg.eval_shape();
        let s = [0, 1, 2].map(|d| self.shape[d] / 2 - e[d] / 2);
        let n = e.iter().product();
        let (mut logits, mut labels) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for z in 0..e[0] {
            for y in 0..e[1] {
                for x in 0..e[2] {
                    let i = idx(self.shape, s[0] + z, s[1] + y, s[2] + x);
                    logits.push(self.canvas[i]);
                    labels.push(self.labels[i]);
                }
            }
        }
        (logits, labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array3;

    fn cfg() -> ExampleConfig {
        ExampleConfig {
            augment: AugmentConfig::NONE,
            ..ExampleConfig::new([5, 5, 5], [2, 2, 2])
        }
    }

    /// A 13^3 volume: label 7 in the slab x < 6, label 3 elsewhere; image = x.
    fn volume() -> (Array3<f32>, Array3<u64>) {
        let image = Array3::from_shape_fn((13, 13, 13), |(_, _, x)| x as f32);
        let labels = Array3::from_shape_fn((13, 13, 13), |(_, _, x)| if x < 6 { 7 } else { 3 });
        (image, labels)
    }

    /// The example of [`volume`] at `zyx`, unaugmented, with moves drawn by `Rng::new(seed)`.
    fn example_at(c: &ExampleConfig, zyx: [u32; 3], seed: u64) -> Example {
        let (image, labels) = volume();
        Example::new(
            c,
            image.view(),
            labels.view(),
            Coordinate { volume: 0, zyx },
            Augmentation::IDENTITY,
            &mut Rng::new(seed),
        )
    }

    #[test]
    fn patch_soft_labels_and_seed() {
        let c = cfg();
        assert_eq!(c.patch_shape(), [9, 9, 9]);
        let ex = example_at(&c, [6, 6, 4], 1);
        let s = ex.shape();
        // Patch x runs 0..9 over volume x 0..9; centre x = 4 has label 7 (x < 6): patch x < 6 is on.
        for x in 0..9 {
            let i = idx(s, 2, 3, x);
            assert_eq!(ex.image()[i], x as f32);
            assert_eq!(ex.labels()[i], if x < 6 { 0.95 } else { 0.05 });
        }
        let centre = idx(s, 4, 4, 4);
        assert!((ex.canvas()[centre] - logit(0.95)).abs() < 1e-6);
        assert!(
            ex.canvas()
                .iter()
                .enumerate()
                .all(|(i, &v)| i == centre || (v - logit(0.05)).abs() < 1e-6)
        );
        // Background centre: no object at all.
        let bg = Array3::<u64>::zeros((13, 13, 13));
        let ex = Example::new(
            &c,
            volume().0.view(),
            bg.view(),
            Coordinate {
                volume: 0,
                zyx: [6, 6, 4],
            },
            Augmentation::IDENTITY,
            &mut Rng::new(1),
        );
        assert!(ex.labels().iter().all(|&l| l == 0.05));
        assert!(patch_fits(&c, [13, 13, 13], [4, 4, 8]));
        assert!(!patch_fits(&c, [13, 13, 13], [4, 4, 9]));
        assert!(!patch_fits(&c, [13, 13, 13], [3, 4, 8]));
    }

    #[test]
    fn fixed_policy_visits_valid_shifts_in_shuffled_order() {
        let c = cfg();
        let mut ex = example_at(&c, [6, 6, 6], 4);
        // First the centre, whatever the canvas.
        assert_eq!(ex.next_offset(&c), Some([0, 0, 0]));
        // Prediction: object (logit 3) where patch x <= 4, else -3. Valid shifts: those with dx <= 0
        // (centre x 4 + dx), i.e. 17 of the 26 (9 with dx = -2, 8 with dx = 0).
        let fov = c.fov_len();
        let logits: Vec<f32> = (0..fov)
            .map(|i| if i % 5 <= 2 { 3.0 } else { -3.0 })
            .collect();
        ex.write_back(&c, [0, 0, 0], &logits);
        let mut visited = Vec::new();
        while let Some(off) = ex.next_offset(&c) {
            // Each move writes a prediction that keeps the canvas as it was.
            visited.push(off);
        }
        assert_eq!(visited.len(), 17, "{visited:?}");
        assert!(
            visited
                .iter()
                .all(|o| o[2] <= 0 && o.iter().all(|v| [-2, 0, 2].contains(v)))
        );
        let mut sorted = visited.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 17);
        // Another seed gives another order.
        let mut ex2 = example_at(&c, [6, 6, 6], 5);
        ex2.next_offset(&c);
        ex2.write_back(&c, [0, 0, 0], &logits);
        let v2: Vec<_> = core::iter::from_fn(|| ex2.next_offset(&c)).collect();
        assert_ne!(v2, visited);
        assert_eq!(fixed_shifts([2, 2, 2]).len(), 26);
        assert_eq!(fixed_shifts([0, 2, 2]).len(), 8);
    }

    #[test]
    fn fixed_policy_sees_write_backs_between_moves() {
        // With an all-negative first prediction no shift is valid; the example ends after the centre.
        let c = cfg();
        let mut ex = example_at(&c, [6, 6, 6], 4);
        assert_eq!(ex.next_offset(&c), Some([0, 0, 0]));
        ex.write_back(&c, [0, 0, 0], &vec![-1.0; c.fov_len()]);
        assert_eq!(ex.next_offset(&c), None);
        // The write-back landed in the canvas FOV and nowhere else.
        let s = ex.shape();
        assert_eq!(ex.canvas()[idx(s, 2, 2, 2)], -1.0);
        assert_eq!(ex.canvas()[idx(s, 6, 6, 6)], -1.0);
        assert!((ex.canvas()[idx(s, 1, 4, 4)] - logit(0.05)).abs() < 1e-6);
        // The inputs of a move are its window of the canvas.
        let n = c.fov_len();
        let (mut i, mut sd, mut l) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        ex.fill_inputs(&c, [2, 0, -2], &mut i, &mut sd, &mut l);
        // Window z 4..9, y 2..7, x 0..5 of the patch; the written FOV is 2..7 on every axis.
        assert!((sd[0] - logit(0.05)).abs() < 1e-6);
        assert_eq!(sd[2], -1.0);
        // Patch x 3 is volume x 2 + 3.
        assert_eq!(i[3], 5.0);
        // The centre (volume x 6) has label 3 (x >= 6): volume x 2 is off.
        assert_eq!(l[0], 0.05);
    }

    #[test]
    fn max_pred_policy_follows_the_mask() {
        let c = ExampleConfig {
            policy: FovPolicy::MaxPredMoves,
            ..cfg()
        };
        let mut ex = example_at(&c, [6, 6, 6], 4);
        assert_eq!(ex.next_offset(&c), Some([0, 0, 0]));
        // Prediction: one confident voxel on the FOV's x-face at -delta (fov index z 2, y 1, x 0),
        // one below threshold on the y+ face.
        let mut logits = vec![-3.0f32; c.fov_len()];
        logits[(2 * 5 + 1) * 5] = 5.0;
        logits[(2 * 5 + 4) * 5 + 2] = 2.0;
        ex.write_back(&c, [0, 0, 0], &logits);
        // Only the x- face qualifies: move to (z 0, y -1, x -2).
        assert_eq!(ex.next_offset(&c), Some([0, -1, -2]));
        ex.write_back(&c, [0, -1, -2], &vec![-3.0; c.fov_len()]);
        assert_eq!(ex.next_offset(&c), None);
    }
}
