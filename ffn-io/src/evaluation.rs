//! A segmentation scored against ground truth from files (`ffn eval`): variation of information,
//! adapted Rand error and the worst merges and splits ([`ffn_core::metrics`]).

use anyhow::{Context, Result, bail};
use ffn_core::metrics::{
    Contingency, ErrorObject, MetricOptions, MetricsError, Scores, scores, worst_merges,
    worst_splits,
};
use ndarray::Array3;
use serde_json::{Value, json};

use crate::VolumeSpec;

/// Scores and the worst errors of a segmentation.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// VI and Rand scores.
    pub scores: Scores,
    /// The worst merges (test segments spanning several true objects), worst first.
    pub merges: Vec<ErrorObject>,
    /// The worst splits (true objects cut into several test segments), worst first.
    pub splits: Vec<ErrorObject>,
}

/// Voxels read per block when scoring (two uint64 blocks of this many voxels in memory).
pub const EVAL_BLOCK_VOXELS: usize = 1 << 23;

/// Scores the labels `test` against `truth` (the box of `truth` at `truth_offset`, `[z, y, x]`,
/// when the test is a crop), with the `worst` largest merges and splits. The volumes are read in
/// slabs of z planes of at most [`EVAL_BLOCK_VOXELS`] voxels and counted into one contingency
/// table, so memory holds two slabs and the table, whatever the volume's size.
pub fn evaluate_volumes(
    truth_spec: &VolumeSpec,
    test_spec: &VolumeSpec,
    truth_offset: Option<[usize; 3]>,
    opts: &MetricOptions,
    worst: usize,
) -> Result<Evaluation> {
    let volumes = (truth_spec, test_spec, truth_offset);
    evaluate_in_blocks(volumes, opts, worst, EVAL_BLOCK_VOXELS)
}

/// [`evaluate_volumes`] with blocks of at most `block_voxels` voxels (at least one plane).
fn evaluate_in_blocks(
    (truth_spec, test_spec, truth_offset): (&VolumeSpec, &VolumeSpec, Option<[usize; 3]>),
    opts: &MetricOptions,
    worst: usize,
    block_voxels: usize,
) -> Result<Evaluation> {
    let t = crate::dataset_shape(truth_spec)
        .with_context(|| format!("reading the truth {truth_spec}"))?;
    let ts =
        crate::dataset_shape(test_spec).with_context(|| format!("reading the test {test_spec}"))?;
    let o = match truth_offset {
        Some(o) => {
            if (0..3).any(|a| o[a] + ts[a] > t[a]) {
                bail!(
                    "--truth-offset: the test ({} x {} x {} z,y,x) at offset {:?} (z,y,x) does not fit in the truth {truth_spec} ({} x {} x {})",
                    ts[0],
                    ts[1],
                    ts[2],
                    o,
                    t[0],
                    t[1],
                    t[2]
                );
            }
            o
        }
        None if t != ts => bail!(
            "shapes differ: truth {truth_spec} is {:?} and test {test_spec} is {:?} (z,y,x); use --truth-offset for a crop",
            t,
            ts
        ),
        None => [0; 3],
    };
    let planes = (block_voxels / (ts[1] * ts[2]).max(1)).max(1);
    let mut c = Contingency::default();
    for z0 in (0..ts[0]).step_by(planes) {
        let n = [planes.min(ts[0] - z0), ts[1], ts[2]];
        let truth = crate::read_labels_region(truth_spec, [o[0] + z0, o[1], o[2]], n)
            .with_context(|| format!("reading the truth {truth_spec}"))?;
        let test = crate::read_labels_region(test_spec, [z0, 0, 0], n)
            .with_context(|| format!("reading the test {test_spec}"))?;
        c.add(&standard(truth), &standard(test), opts)
            .map_err(|e| anyhow::anyhow!("{truth_spec} vs {test_spec}: {e}"))?;
    }
    if c.total() == 0 {
        bail!("{truth_spec} vs {test_spec}: {}", MetricsError::NoVoxels);
    }
    let merges = worst_merges(&c, worst);
    let splits = worst_splits(&c, worst);
    Ok(Evaluation {
        scores: scores(&c, opts),
        merges,
        splits,
    })
}

fn error_json(e: &ErrorObject) -> Value {
    json!({
        "id": e.id,
        "voxels": e.voxels,
        "vi_bits": e.vi_bits,
        "parts": e.parts.iter().map(|&(l, n)| json!([l, n])).collect::<Vec<_>>(),
    })
}

/// Scores plus the worst merges and splits, as `ffn eval --json` prints them.
pub fn report_json(
    s: &Scores,
    merges: &[ErrorObject],
    splits: &[ErrorObject],
    opts: &MetricOptions,
) -> Value {
    json!({
        "voi_split": s.voi_split,
        "voi_merge": s.voi_merge,
        "voi_total": s.voi_split + s.voi_merge,
        "rand_split": s.rand_split,
        "rand_merge": s.rand_merge,
        "adapted_rand_error": s.adapted_rand_error,
        "voxels": s.voxels,
        "conventions": {
            "ignore_truth_zero": opts.ignore_truth_zero,
            "test_zero_singletons": opts.test_zero_singletons,
            "count_self_pairs": opts.count_self_pairs,
        },
        "worst_merges": merges.iter().map(error_json).collect::<Vec<_>>(),
        "worst_splits": splits.iter().map(error_json).collect::<Vec<_>>(),
    })
}

/// The labels in standard (z, y, x) order as one flat vector.
fn standard(v: Array3<u64>) -> Vec<u64> {
    v.iter().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slabs of one or a few planes give the scores and worst errors of the whole volume in one
    /// block, for a crop of the truth too.
    #[test]
    fn block_by_block_equals_the_whole_volume() {
        let dir = tempfile::tempdir().unwrap();
        let truth = Array3::from_shape_fn((13, 17, 11), |(z, y, x)| {
            (z / 4 * 9 + y / 5 * 3 + x / 4) as u64
        });
        let test = truth.mapv(|v| if v % 5 == 0 { v + 1 } else { v / 2 });
        let (t, g) = (
            VolumeSpec::new(dir.path().join("v.h5"), "truth"),
            VolumeSpec::new(dir.path().join("v.h5"), "test"),
        );
        crate::write_labels(&t, &truth).unwrap();
        crate::write_labels(&g, &test).unwrap();
        let crop = VolumeSpec::new(dir.path().join("v.h5"), "crop");
        crate::write_labels(
            &crop,
            &test.slice(ndarray::s![2..9, 3..17, 0..10]).to_owned(),
        )
        .unwrap();
        for opts in [MetricOptions::default(), MetricOptions::skimage()] {
            for (test_spec, offset) in [(&g, None), (&crop, Some([2, 3, 0]))] {
                let whole =
                    evaluate_in_blocks((&t, test_spec, offset), &opts, 3, usize::MAX).unwrap();
                for block in [1, 17 * 11, 3 * 17 * 11 + 5] {
                    let parts =
                        evaluate_in_blocks((&t, test_spec, offset), &opts, 3, block).unwrap();
                    assert_eq!(parts, whole, "blocks of {block} voxels");
                }
                assert!(whole.scores.adapted_rand_error > 0.0);
            }
        }
    }
}
