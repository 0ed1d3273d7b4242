//! `ffn export --image raw.h5:raw --seg seg.h5:seg --out DIR`: Neuroglancer "precomputed" volumes
//! (`DIR/image`, `DIR/segmentation`) that any static file server can serve to Neuroglancer.
//!
//! The HDF5 volumes are read one chunk row (along z) at a time, so memory stays at one slab.
//! Sizes on the command line follow Neuroglancer's x,y,z order; see `ffn_io::precomputed`.

use crate::args::{parse_triple, parse_xyz};
use anyhow::{Context, Result, bail};
use ffn_io::VolumeSpec;
use ffn_io::export::{export_image, export_segmentation};
use std::path::PathBuf;

/// Arguments of `ffn export`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The grey image, FILE.h5:DATASET (uint8, axes z,y,x); written to OUT/image.
    #[arg(long)]
    pub image: Option<String>,
    /// The segmentation, FILE.h5:DATASET (any integer type); written to OUT/segmentation as
    /// uint32 when its ids fit, else uint64.
    #[arg(long)]
    pub seg: Option<String>,
    /// Output folder.
    #[arg(long)]
    pub out: PathBuf,
    /// Voxel size in nanometres, x,y,z.
    #[arg(long, default_value = "8,8,8")]
    pub resolution: String,
    /// Chunk size in voxels, x,y,z.
    #[arg(long, default_value = "64,64,64")]
    pub chunk: String,
}

/// Runs `ffn export`.
pub fn run(args: Args) -> Result<()> {
    if args.image.is_none() && args.seg.is_none() {
        bail!("ffn export: nothing to export: give --image and/or --seg");
    }
    let resolution: [f64; 3] = parse_triple(&args.resolution, "--resolution")?;
    if !resolution.iter().all(|r| r.is_finite() && *r > 0.0) {
        bail!(
            "--resolution {:?}: expected positive nanometres",
            args.resolution
        );
    }
    let chunk: [usize; 3] = parse_xyz(&args.chunk, "--chunk")?;
    if chunk.contains(&0) {
        bail!("--chunk {:?}: expected every size >= 1", args.chunk);
    }
    if let Some(image) = &args.image {
        let spec: VolumeSpec = image.parse().context("ffn export: --image")?;
        let dir = args.out.join("image");
        export_image(&spec, &dir, resolution, chunk)?;
        println!(
            "ffn export: wrote {} (precomputed image from {spec})",
            dir.display()
        );
    }
    if let Some(seg) = &args.seg {
        let spec: VolumeSpec = seg.parse().context("ffn export: --seg")?;
        let dir = args.out.join("segmentation");
        let dt = export_segmentation(&spec, &dir, resolution, chunk)?;
        println!(
            "ffn export: wrote {} (precomputed {} segmentation from {spec})",
            dir.display(),
            dt.name()
        );
    }
    println!(
        "ffn export: serve {} with any static file server (e.g. `python3 -m http.server` there, with CORS allowed) \
         and open precomputed://http://HOST:PORT/image and .../segmentation in Neuroglancer",
        args.out.display()
    );
    Ok(())
}
