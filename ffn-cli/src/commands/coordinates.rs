//! `ffn coordinates`: google/ffn's build_coordinates. Reads partition volumes, drops a margin,
//! oversamples every class to the size of the largest, shuffles with a seed and writes a `.coords`
//! file (format: `ffn_io::coords`).

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ffn_core::rng::Rng;
use ffn_core::training::coordinates::{CoordinateConfig, build_coordinates};
use ffn_io::coords::{CoordinateFile, write_coords};

use crate::args::parse_named_spec;
use crate::args::parse_xyz;

/// Arguments of `ffn coordinates`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Partition volume NAME:FILE:DATASET (repeat for several volumes; NAME matches `ffn train
    /// --image/--labels NAME:...`).
    #[arg(long = "partitions", required = true)]
    pub partitions: Vec<String>,
    /// Output coordinate file.
    #[arg(long)]
    pub out: PathBuf,
    /// Margin x,y,z dropped at every face (at least half the training patch: fov//2 + delta).
    #[arg(long, default_value = "24,24,24")]
    pub margin: String,
    /// Shuffle seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Subsample every class to at most this many voxels before balancing (bounds memory and file
    /// size on large volumes; google/ffn has no limit).
    #[arg(long)]
    pub max_per_class: Option<usize>,
}

/// Builds and writes the coordinates; returns how many were written.
pub fn build(args: &Args) -> Result<usize> {
    let margin = parse_xyz(&args.margin, "--margin")?;
    let mut names = Vec::new();
    let mut vols = Vec::new();
    for p in &args.partitions {
        let (name, spec) = parse_named_spec(p).context("--partitions")?;
        if names.contains(&name) {
            bail!("--partitions: volume name '{name}' given twice");
        }
        vols.push(ffn_io::read_image_u8(&spec)?);
        names.push(name);
    }
    let views: Vec<_> = vols.iter().map(|v| v.view()).collect();
    let cfg = CoordinateConfig {
        margin,
        max_per_class: args.max_per_class,
    };
    let coords = build_coordinates(&views, &cfg, &mut Rng::new(args.seed))?;
    if coords.is_empty() {
        bail!(
            "no coordinates: every voxel is excluded or within the margin {:?} (x,y,z)",
            args.margin
        );
    }
    let n = coords.len();
    write_coords(
        &args.out,
        &CoordinateFile {
            volumes: names,
            coords,
        },
    )?;
    Ok(n)
}

/// Runs `ffn coordinates`.
pub fn run(args: Args) -> Result<()> {
    let n = build(&args)?;
    println!("wrote {n} coordinates to {}", args.out.display());
    Ok(())
}
