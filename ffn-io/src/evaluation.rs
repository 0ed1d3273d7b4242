//! A segmentation scored against ground truth from files (`ffn eval`): variation of information,
//! adapted Rand error and the worst merges and splits ([`ffn_core::metrics`]).

use anyhow::{Context, Result, bail};
use ffn_core::metrics::{
    Contingency, ErrorObject, MetricOptions, Scores, scores, worst_merges, worst_splits,
};
use ndarray::{Array3, s};
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

/// Scores the labels `test` against `truth` (the box of `truth` at `truth_offset`, `[z, y, x]`,
/// when the test is a crop), with the `worst` largest merges and splits.
pub fn evaluate_volumes(
    truth_spec: &VolumeSpec,
    test_spec: &VolumeSpec,
    truth_offset: Option<[usize; 3]>,
    opts: &MetricOptions,
    worst: usize,
) -> Result<Evaluation> {
    let truth = crate::read_labels(truth_spec)
        .with_context(|| format!("reading the truth {truth_spec}"))?;
    let test =
        crate::read_labels(test_spec).with_context(|| format!("reading the test {test_spec}"))?;
    let truth = match truth_offset {
        Some(o) => {
            let ts = test.shape();
            let t = truth.shape();
            for a in 0..3 {
                if o[a] + ts[a] > t[a] {
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
            }
            truth
                .slice(s![
                    o[0]..o[0] + ts[0],
                    o[1]..o[1] + ts[1],
                    o[2]..o[2] + ts[2]
                ])
                .to_owned()
        }
        None => truth,
    };
    if truth.shape() != test.shape() {
        bail!(
            "shapes differ: truth {truth_spec} is {:?} and test {test_spec} is {:?} (z,y,x); use --truth-offset for a crop",
            truth.shape(),
            test.shape()
        );
    }
    let (t, g) = (standard(truth), standard(test));
    let c = Contingency::new(&t, &g, opts)
        .map_err(|e| anyhow::anyhow!("{truth_spec} vs {test_spec}: {e}"))?;

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
