//! Tiled flood filling with an oracle predictor against the untiled run.

use super::*;
use crate::inference::seeds::policy_grid;
use crate::inference::{Canvas, InferenceOptions, LabelOracle};
use crate::rng::Rng;
use alloc::vec;
use alloc::vec::Vec;

/// A volume of axis-aligned boxes (recursive random cuts, every side >= `min_side`), ids 1..=n.
pub(super) fn boxes(shape: [usize; 3], min_side: usize, seed: u64) -> Vec<u64> {
    let mut out = vec![0u64; prod(shape)];
    let mut rng = Rng::new(seed);
    let mut next = 0u64;
    let mut stack = vec![([0usize; 3], shape)];
    while let Some((lo, hi)) = stack.pop() {
        let splittable: Vec<usize> = (0..3).filter(|&a| hi[a] - lo[a] >= 2 * min_side).collect();
        if !splittable.is_empty() && rng.next_f64() < 0.9 {
            let axis = splittable[rng.below(splittable.len())];
            let len = hi[axis] - lo[axis];
            let cut = lo[axis] + min_side + rng.below(len - 2 * min_side + 1);
            let mut hi1 = hi;
            hi1[axis] = cut;
            let mut lo2 = lo;
            lo2[axis] = cut;
            stack.push((lo, hi1));
            stack.push((lo2, hi));
            continue;
        }
        next += 1;
        for z in lo[0]..hi[0] {
            for y in lo[1]..hi[1] {
                for x in lo[2]..hi[2] {
                    out[(z * shape[1] + y) * shape[2] + x] = next;
                }
            }
        }
    }
    out
}

fn flood(image: &[f32], shape: [usize; 3], fov: [usize; 3]) -> Vec<u64> {
    // Moves of one voxel and seeds everywhere, even next to other segments: every part of an
    // object with room for one FOV centre is found and filled completely.
    let opts = InferenceOptions {
        min_segment_size: 1,
        min_boundary_dist: [0; 3],
        ..Default::default()
    };
    let mut canvas = Canvas::new(image, shape, fov, [1, 1, 1], opts).unwrap();
    let seeds = policy_grid(shape, 1, &[0]);
    canvas
        .segment_all(&seeds, &mut LabelOracle { fov }, &|| 0.0, &mut |_| {})
        .unwrap();
    canvas.segmentation().into_iter().map(u64::from).collect()
}

fn cut(vol: &[f32], shape: [usize; 3], t: &Tile) -> Vec<f32> {
    let mut out = Vec::with_capacity(t.voxels());
    for z in t.origin[0]..t.end()[0] {
        for y in t.origin[1]..t.end()[1] {
            let row = (z * shape[1] + y) * shape[2];
            out.extend_from_slice(&vol[row + t.origin[2]..row + t.end()[2]]);
        }
    }
    out
}

#[test]
fn tiled_oracle_flood_fill_equals_the_untiled_run() {
    let shape = [36, 40, 32];
    let fov = [7, 7, 7];
    let truth = boxes(shape, 7, 21);
    let image: Vec<f32> = truth.iter().map(|&v| v as f32).collect();
    let mut untiled = flood(&image, shape, fov);
    let n = relabel_first_appearance(&mut untiled);
    let mut want = truth.clone();
    assert_eq!(relabel_first_appearance(&mut want), n);
    assert!(n >= 20, "only {n} boxes");
    assert!(
        untiled == want,
        "the untiled oracle run should recover the boxes"
    );
    for (size, overlap) in [
        ([20, 20, 20], [8, 8, 8]),
        ([18, 24, 16], [7, 9, 7]),
        ([36, 16, 32], [0, 7, 0]),
    ] {
        let plan = TilePlan::new(shape, size, overlap).unwrap();
        let tiles: Vec<Vec<u64>> = plan
            .tiles()
            .map(|t| flood(&cut(&image, shape, &t), t.shape, fov))
            .collect();
        let (got, summary) =
            reconcile::reconcile_in_memory(&plan, &tiles, MergeRule::default()).unwrap();
        assert!(plan.len() > 1);
        assert_eq!(summary.segments, n, "{size:?} {overlap:?}: {summary:?}");
        assert!(got == untiled, "{size:?} {overlap:?}");
    }
}
