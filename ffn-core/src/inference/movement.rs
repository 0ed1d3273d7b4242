//! The face-max movement policy: where the field of view goes next while one object is flooded.
//!
//! After every prediction, each of the 6 faces of the cube of half-size `deltas` around the FOV centre
//! is scanned for its maximum logit; a face whose maximum reaches the move threshold proposes a move
//! to that voxel. The proposals of one update are sorted by score (highest first) and appended to a
//! FIFO queue. Positions are de-duplicated on a grid quantised by `deltas` and centred on the
//! object's seed: once a grid cell was visited, later proposals falling into it are dropped.

use alloc::collections::{BTreeSet, VecDeque};
use alloc::vec::Vec;

/// A voxel position `[z, y, x]`; signed because proposals may lie outside the volume.
pub type Pos = [i64; 3];

/// Scans the faces of the cube `centre +- deltas` of a predicted FOV (`logits`, `[z][y][x]` of
/// shape `fov`) and returns `(score, offset from the FOV centre)` for every face whose maximum is at
/// least `threshold`. Faces are visited z-, z+, y-, y+, x-, x+; the first maximum in `[z][y][x]`
/// order wins ties within a face. Axes with delta 0 propose nothing.
///
/// # Panics
/// If `logits.len()` is not the product of `fov` or a delta exceeds `fov / 2` (the canvas checks
/// both when it is built).
pub fn scored_move_offsets(
    logits: &[f32],
    fov: [usize; 3],
    deltas: [usize; 3],
    threshold: f64,
) -> Vec<(f32, Pos)> {
    assert_eq!(
        logits.len(),
        fov[0] * fov[1] * fov[2],
        "logits must hold one FOV"
    );
    let c = [fov[0] / 2, fov[1] / 2, fov[2] / 2];
    for a in 0..3 {
        assert!(
            deltas[a] <= c[a],
            "delta {} exceeds half the FOV {}",
            deltas[a],
            c[a]
        );
    }
    let idx = |p: [usize; 3]| (p[0] * fov[1] + p[1]) * fov[2] + p[2];
    let mut out: Vec<(f32, Pos)> = Vec::new();
    for axis in 0..3 {
        let d = deltas[axis];
        if d == 0 {
            continue;
        }
        let others: Vec<usize> = (0..3).filter(|&a| a != axis).collect();
        let (u, v) = (others[0], others[1]);
        for off in [-(d as i64), d as i64] {
            let mut best: Option<(f32, usize, usize)> = None;
            for iu in 0..=2 * deltas[u] {
                for iv in 0..=2 * deltas[v] {
                    let mut p = [0usize; 3];
                    p[axis] = (c[axis] as i64 + off) as usize;
                    p[u] = c[u] - deltas[u] + iu;
                    p[v] = c[v] - deltas[v] + iv;
                    let val = logits[idx(p)];
                    // Strictly greater keeps the first maximum, like numpy's argmax.
                    if best.is_none_or(|(b, _, _)| val > b) {
                        best = Some((val, iu, iv));
                    }
                }
            }
            let Some((score, iu, iv)) = best else {
                continue;
            };
            if (score as f64) < threshold || score.is_nan() {
                continue;
            }
            let mut rel = [0i64; 3];
            rel[axis] = off;
            rel[u] = iu as i64 - deltas[u] as i64;
            rel[v] = iv as i64 - deltas[v] as i64;
            if !out.contains(&(score, rel)) {
                out.push((score, rel));
            }
        }
    }
    out
}

/// The face-max movement policy with its FIFO queue and delta-grid de-duplication.
#[derive(Clone, Debug)]
pub struct FaceMaxPolicy {
    deltas: [usize; 3],
    threshold: f64,
    queue: VecDeque<(f32, Pos)>,
    done: BTreeSet<Pos>,
    start: Pos,
}

impl FaceMaxPolicy {
    /// A policy moving by `deltas` (`[z, y, x]`) when a face maximum reaches `threshold` (a logit).
    pub fn new(deltas: [usize; 3], threshold: f64) -> Self {
        Self {
            deltas,
            threshold,
            queue: VecDeque::new(),
            done: BTreeSet::new(),
            start: [0; 3],
        }
    }

    /// Forgets everything and centres the de-duplication grid on a new object's seed.
    pub fn reset(&mut self, start: Pos) {
        self.queue.clear();
        self.done.clear();
        self.start = start;
    }

    /// Appends a candidate position to the queue.
    pub fn push(&mut self, score: f32, pos: Pos) {
        self.queue.push_back((score, pos));
    }

    /// Candidates waiting in the queue.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when no candidate is waiting.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The grid cell of `pos`: offsets from the seed, shifted by half a delta so that the seed lies
    /// in the middle of its cell, divided (rounding down) by the deltas.
    pub fn quantize(&self, pos: Pos) -> Pos {
        let mut q = [0i64; 3];
        for a in 0..3 {
            let d = self.deltas[a] as i64;
            q[a] = (pos[a] - self.start[a] + d / 2).div_euclid(d.max(1));
        }
        q
    }

    /// True when the grid cell of `pos` was visited already.
    pub fn is_done(&self, pos: Pos) -> bool {
        self.done.contains(&self.quantize(pos))
    }

    /// Pops candidates until one is in an unvisited cell and accepted by `valid`; `None` when the
    /// queue runs dry.
    pub fn next_valid(&mut self, mut valid: impl FnMut(Pos) -> bool) -> Option<Pos> {
        while let Some((_, pos)) = self.queue.pop_front() {
            if self.is_done(pos) {
                continue;
            }
            if valid(pos) {
                return Some(pos);
            }
        }
        None
    }

    /// Records a prediction made at `pos`: marks its cell visited and queues the face maxima of
    /// `logits` (one FOV of shape `fov`), best first.
    pub fn update(&mut self, logits: &[f32], fov: [usize; 3], pos: Pos) {
        let q = self.quantize(pos);
        self.done.insert(q);
        let mut moves = scored_move_offsets(logits, fov, self.deltas, self.threshold);
        // Descending by (score, offset), as google/ffn sorts its (score, offset) tuples.
        moves.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
        for (score, rel) in moves {
            self.push(score, [pos[0] + rel[0], pos[1] + rel[1], pos[2] + rel[2]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const FOV: [usize; 3] = [9, 9, 9];

    fn at(p: [usize; 3]) -> usize {
        (p[0] * 9 + p[1]) * 9 + p[2]
    }

    #[test]
    fn face_maxima_above_threshold_only() {
        let mut l = vec![-5.0f32; 729];
        // centre 4; deltas 2: faces at index 2 and 6 on each axis, spanning 2..=6 on the others.
        l[at([6, 3, 5])] = 3.0; // z+ face, offset (2, -1, 1)
        l[at([6, 4, 4])] = 2.5; // z+ face, lower
        l[at([4, 2, 4])] = 1.0; // y- face, below threshold 2
        l[at([4, 4, 7])] = 9.0; // outside the +-2 cube: ignored
        let m = scored_move_offsets(&l, FOV, [2, 2, 2], 2.0);
        assert_eq!(m, vec![(3.0, [2, -1, 1])]);
        // The x+ face at x=6 sees only -5s: nothing. Lower threshold: every face proposes.
        let m = scored_move_offsets(&l, FOV, [2, 2, 2], -10.0);
        // First maximum wins ties: the z- face is all -5, its first voxel is (2, 2, 2) -> (-2,-2,-2);
        // the x- face proposes the same (score, offset) and is dropped as a duplicate.
        assert_eq!(
            m,
            vec![
                (-5.0, [-2, -2, -2]),
                (3.0, [2, -1, 1]),
                (1.0, [0, -2, 0]),
                (-5.0, [-2, 2, -2]),
                (-5.0, [-2, -2, 2]),
            ]
        );
    }

    #[test]
    fn zero_delta_axis_is_skipped() {
        let l = vec![1.0f32; 729];
        let m = scored_move_offsets(&l, FOV, [0, 2, 2], 0.0);
        // y-: (0,-2,-2); y+: (0,2,-2); x-: (0,-2,-2) again (dropped); x+: (0,-2,2).
        assert_eq!(
            m,
            vec![(1.0, [0, -2, -2]), (1.0, [0, 2, -2]), (1.0, [0, -2, 2])]
        );
    }

    #[test]
    fn quantisation_is_centred_on_the_seed() {
        let mut p = FaceMaxPolicy::new([8, 8, 4], 0.0);
        p.reset([100, 100, 100]);
        assert_eq!(p.quantize([100, 100, 100]), [0, 0, 0]);
        assert_eq!(p.quantize([103, 96, 101]), [0, 0, 0]);
        assert_eq!(p.quantize([104, 95, 102]), [1, -1, 1]);
        assert_eq!(p.quantize([92, 100, 98]), [-1, 0, 0]);
        assert_eq!(p.quantize([91, 100, 97]), [-1, 0, -1]);
    }

    #[test]
    fn fifo_with_sorted_batches_and_dedup() {
        let mut p = FaceMaxPolicy::new([2, 2, 2], 0.0);
        let start = [10, 10, 10];
        p.reset(start);
        let mut l = vec![-1.0f32; 729];
        l[at([6, 4, 4])] = 4.0; // z+ -> (12,10,10)
        l[at([4, 4, 2])] = 5.0; // x- -> (10,10,8)
        l[at([4, 6, 4])] = 4.0; // y+ -> (10,12,10), ties with z+: larger offset first
        p.update(&l, FOV, start);
        let order: Vec<Pos> = p.queue.iter().map(|x| x.1).collect();
        assert_eq!(order, vec![[10, 10, 8], [12, 10, 10], [10, 12, 10]]);
        // The start's cell is done: a proposal back into it is skipped.
        p.push(9.0, [10, 10, 9]);
        let mut seen = Vec::new();
        while let Some(q) = p.next_valid(|q| q != [12, 10, 10]) {
            seen.push(q);
        }
        assert_eq!(seen, vec![[10, 10, 8], [10, 12, 10]]);
        assert!(p.is_empty());
    }
}
