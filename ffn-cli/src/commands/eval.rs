//! `ffn eval`: scores a segmentation against ground truth (variation of information and adapted
//! Rand error, connectomics conventions; see `ffn_core::metrics`).

use crate::args::parse_xyz;
use anyhow::{Context, Result, bail};
use ffn_core::metrics::MetricOptions;
use ffn_io::VolumeSpec;
use ffn_io::evaluation::{Evaluation, evaluate_volumes, report_json};

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
    let truth_offset = args
        .truth_offset
        .as_deref()
        .map(|o| parse_xyz(o, "--truth-offset"))
        .transpose()?;
    let Evaluation {
        scores: sc,
        merges,
        splits,
    } = evaluate_volumes(&truth_spec, &test_spec, truth_offset, &opts, args.worst)?;
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
