//! `ffn view SEG --image RAW --z 120 --out slice.png`: one slice of a segmentation, each segment in
//! its own colour, blended over the grey image (see `ffn_core::segmentation::overlay`).
//!
//! Only the slice is read from the HDF5 files ([`ffn_io::slice_view::render_slice_png`]).

use anyhow::{Context, Result};
use ffn_io::VolumeSpec;
use ffn_io::slice_view::{Axis, render_slice_png};
use std::path::PathBuf;

/// Arguments of `ffn view`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The segmentation, FILE.h5:DATASET (any integer type, axes z,y,x).
    pub seg: String,
    /// The grey image under it, FILE.h5:DATASET (uint8, or float scaled to the slice's range).
    #[arg(long)]
    pub image: Option<String>,
    /// Draw the z slice with this index (the default, at the middle of the volume).
    #[arg(long, conflicts_with_all = ["y", "x"])]
    pub z: Option<usize>,
    /// Draw the y slice with this index (rows are z, columns x).
    #[arg(long, conflicts_with = "x")]
    pub y: Option<usize>,
    /// Draw the x slice with this index (rows are z, columns y).
    #[arg(long)]
    pub x: Option<usize>,
    /// Output PNG file.
    #[arg(long)]
    pub out: PathBuf,
    /// Opacity of the segment colours inside segments (boundaries are always opaque).
    #[arg(long, default_value_t = 0.45)]
    pub alpha: f32,
    /// Scale the picture up by this integer factor (nearest neighbour).
    #[arg(long, default_value_t = 1)]
    pub zoom: usize,
}

/// Runs `ffn view`.
pub fn run(args: Args) -> Result<()> {
    let seg: VolumeSpec = args
        .seg
        .parse()
        .context("ffn view: segmentation argument")?;
    let image: Option<VolumeSpec> = args
        .image
        .as_deref()
        .map(str::parse)
        .transpose()
        .context("ffn view: --image")?;
    let (axis, index) = match (args.z, args.y, args.x) {
        (Some(z), _, _) => (Axis::Z, Some(z)),
        (_, Some(y), _) => (Axis::Y, Some(y)),
        (_, _, Some(x)) => (Axis::X, Some(x)),
        _ => (Axis::Z, None),
    };
    let index = match index {
        Some(i) => i,
        None => {
            ffn_io::dataset_shape(&seg).with_context(|| format!("ffn view: reading {seg}"))?[0] / 2
        }
    };
    let s = render_slice_png(
        &seg,
        image.as_ref(),
        axis,
        index,
        args.alpha,
        args.zoom,
        &args.out,
    )?;
    println!(
        "ffn view: wrote {} ({} x {} pixels, {} slice {index}, {} segments)",
        args.out.display(),
        s.width,
        s.height,
        axis.name(),
        s.segments
    );
    Ok(())
}
