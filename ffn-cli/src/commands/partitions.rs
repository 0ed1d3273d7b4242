//! `ffn partitions`: google/ffn's compute_partitions. Removes objects smaller than `--min-size`,
//! computes for every labelled voxel the fraction of the `--lom-radius` cube sharing its label, and
//! writes the quantised classes (255 = margin) as a uint8 HDF5 volume.

use std::time::Instant;

use crate::args::{parse_f32_list, parse_xyz};
use anyhow::{Context, Result};
use ffn_core::training::partitions::{
    DEFAULT_MIN_SIZE, DEFAULT_THRESHOLDS, EXCLUDED, PartitionConfig, class_histogram,
    compute_partitions,
};
use ffn_io::VolumeSpec;

/// Arguments of `ffn partitions`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Label volume FILE:DATASET.
    #[arg(long)]
    pub labels: VolumeSpec,
    /// Output FILE:DATASET (uint8).
    #[arg(long)]
    pub out: VolumeSpec,
    /// Cube radius x,y,z (google/ffn: fov // 2 + delta).
    #[arg(long, default_value = "24,24,24")]
    pub lom_radius: String,
    /// Objects smaller than this (voxels) are treated as background.
    #[arg(long, default_value_t = DEFAULT_MIN_SIZE)]
    pub min_size: usize,
    /// Increasing fraction thresholds, comma separated (default: google/ffn's).
    #[arg(long)]
    pub thresholds: Option<String>,
}

/// Computes and writes the partitions; returns the class histogram.
pub fn compute(args: &Args) -> Result<Vec<usize>> {
    let cfg = PartitionConfig {
        thresholds: match &args.thresholds {
            Some(t) => parse_f32_list(t, "--thresholds")?,
            None => DEFAULT_THRESHOLDS.to_vec(),
        },
        lom_radius: parse_xyz(&args.lom_radius, "--lom-radius")?,
        min_size: args.min_size,
    };
    ffn_io::VolumeSpec::check_not_input(&args.out, "--out", &args.labels, "--labels")?;
    let labels = ffn_io::read_labels(&args.labels)?;
    let parts = compute_partitions(labels.view(), &cfg)
        .with_context(|| format!("partitions of {}", args.labels))?;
    ffn_io::write_image_u8(&args.out, &parts)?;
    Ok(class_histogram(parts.view()))
}

/// Runs `ffn partitions`.
pub fn run(args: Args) -> Result<()> {
    let t = Instant::now();
    let hist = compute(&args)?;
    println!(
        "wrote {} in {:.1} s; voxels per class:",
        args.out,
        t.elapsed().as_secs_f64()
    );
    for (class, &n) in hist.iter().enumerate() {
        if n > 0 {
            let what = match class as u8 {
                0 => " (background / dust)".to_string(),
                EXCLUDED => " (margin, excluded)".to_string(),
                _ => String::new(),
            };
            println!("  {class:>3}{what}: {n}");
        }
    }
    Ok(())
}
