//! `ffn partitions`: google/ffn's compute_partitions. Removes objects smaller than `--min-size`,
//! computes for every labelled voxel the fraction of the `--lom-radius` cube sharing its label, and
//! writes the quantised classes (255 = margin) as a uint8 volume, whole or block by block
//! ([`ffn_io::partitions`]).

use std::time::Instant;

use crate::args::{parse_f32_list, parse_xyz};
use anyhow::Result;
use ffn_core::training::partitions::{
    DEFAULT_MIN_SIZE, DEFAULT_THRESHOLDS, EXCLUDED, PartitionConfig,
};
use ffn_io::VolumeSpec;
use ffn_io::partitions::{PartitionOptions, write_partitions};

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
    /// Compute block by block (edge x,y,z or one number; same result, memory of one block and its
    /// halo). Default: the whole volume when it takes at most half the memory the process may use
    /// (about 20 bytes per voxel), else blocks of 256.
    #[arg(long, value_name = "N|X,Y,Z")]
    pub block_size: Option<String>,
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
    let block = args
        .block_size
        .as_deref()
        .map(|b| parse_xyz(b, "--block-size"))
        .transpose()?;
    write_partitions(&PartitionOptions {
        labels: args.labels.clone(),
        out: args.out.clone(),
        config: cfg,
        block,
    })
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
