//! `ffn eval`: scores a segmentation against ground truth (variation of information and adapted
//! Rand error, connectomics conventions; see `ffn_core::metrics`).

use crate::args::parse_xyz;
use anyhow::{Context, Result, bail};
use ffn_core::metrics::{
    Contingency, ErrorObject, MetricOptions, Scores, scores, worst_merges, worst_splits,
};
use ffn_io::VolumeSpec;
use ndarray::{Array3, s};
use serde_json::{Value, json};

/// Arguments of `ffn eval`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Ground-truth labels, FILE.h5:DATASET (any unsigned integer type). Import FlyEM label maps
    /// with `ffn import labels` first.
    #[arg(long)]
    truth: String,
    /// The segmentation to score, FILE.h5:DATASET.
    #[arg(long)]
    test: String,
    /// Where the test volume starts inside the truth, x,y,z: the truth is cropped to the test's
    /// shape at this offset (for a segmentation of a crop).
    #[arg(long, value_name = "X,Y,Z")]
    truth_offset: Option<String>,
    /// Conventions: `ffn` (truth 0 ignored, self-pairs counted; the default) or `skimage`
    /// (nothing ignored, self-pairs not counted, as scikit-image computes them).
    #[arg(long, default_value = "ffn")]
    convention: String,
    /// Count every test voxel labelled 0 as its own singleton segment.
    #[arg(long)]
    test_zero_singletons: bool,
    /// How many worst merges and splits to list.
    #[arg(long, default_value_t = 5)]
    worst: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
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

fn parts_text(parts: &[(u64, u64)]) -> String {
    let shown: Vec<String> = parts
        .iter()
        .take(6)
        .map(|&(l, n)| {
            if l == u64::MAX {
                format!("singletons:{n}")
            } else {
                format!("{l}:{n}")
            }
        })
        .collect();
    let more = if parts.len() > 6 {
        format!(" (+{} more)", parts.len() - 6)
    } else {
        String::new()
    };
    format!("{}{more}", shown.join(" "))
}

/// Runs `ffn eval`.
pub fn run(args: Args) -> Result<()> {
    let mut opts = match args.convention.as_str() {
        "ffn" => MetricOptions::default(),
        "skimage" => MetricOptions::skimage(),
        other => bail!("--convention: expected ffn or skimage, found {other:?}"),
    };
    opts.test_zero_singletons = args.test_zero_singletons;
    let truth_spec: VolumeSpec = args.truth.parse().context("--truth")?;
    let test_spec: VolumeSpec = args.test.parse().context("--test")?;
    let truth = ffn_io::read_labels(&truth_spec)
        .with_context(|| format!("reading the truth {truth_spec}"))?;
    let test =
        ffn_io::read_labels(&test_spec).with_context(|| format!("reading the test {test_spec}"))?;
    let truth = match &args.truth_offset {
        Some(o) => {
            let o = parse_xyz(o, "--truth-offset")?;
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
    let c = Contingency::new(&t, &g, &opts)
        .map_err(|e| anyhow::anyhow!("{truth_spec} vs {test_spec}: {e}"))?;
    let sc = scores(&c, &opts);
    let merges = worst_merges(&c, args.worst);
    let splits = worst_splits(&c, args.worst);
    if args.json {
        println!("{}", report_json(&sc, &merges, &splits, &opts));
        return Ok(());
    }
    println!(
        "{test_spec} vs truth {truth_spec}: {} voxels scored",
        sc.voxels
    );
    println!(
        "  VI split {:.4}  merge {:.4}  total {:.4} bits",
        sc.voi_split,
        sc.voi_merge,
        sc.voi_split + sc.voi_merge
    );
    println!(
        "  Rand split {:.4}  merge {:.4}  adapted Rand error {:.4}",
        sc.rand_split, sc.rand_merge, sc.adapted_rand_error
    );
    if !merges.is_empty() {
        println!("  worst merges (test id, voxels, VI bits: truth id:voxels ...):");
        for m in &merges {
            println!(
                "    {} {} {:.4}: {}",
                m.id,
                m.voxels,
                m.vi_bits,
                parts_text(&m.parts)
            );
        }
    }
    if !splits.is_empty() {
        println!("  worst splits (truth id, voxels, VI bits: test id:voxels ...):");
        for m in &splits {
            println!(
                "    {} {} {:.4}: {}",
                m.id,
                m.voxels,
                m.vi_bits,
                parts_text(&m.parts)
            );
        }
    }
    Ok(())
}

/// The labels in standard (z, y, x) order as one flat vector.
fn standard(v: Array3<u64>) -> Vec<u64> {
    v.iter().copied().collect()
}
