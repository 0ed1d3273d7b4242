//! `ffn export --image raw.h5:raw --seg seg.h5:seg --out DIR`: Neuroglancer "precomputed" volumes
//! (`DIR/image`, `DIR/segmentation`) that any static file server can serve to Neuroglancer.
//!
//! The HDF5 volumes are read one chunk row (along z) at a time, so memory stays at one slab.
//! Sizes on the command line follow Neuroglancer's x,y,z order; see `ffn_io::precomputed`.

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

/// Parses `a,b,c` (Neuroglancer's x,y,z) and returns it as `[z, y, x]`.
fn parse_xyz<T: std::str::FromStr>(flag: &str, text: &str) -> Result<[T; 3]> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let err = || anyhow::anyhow!("--{flag} {text:?}: expected three numbers x,y,z, e.g. 8,8,8");
    if parts.len() != 3 {
        return Err(err());
    }
    let v: Vec<T> = parts
        .iter()
        .map(|p| p.parse::<T>())
        .collect::<Result<_, _>>()
        .map_err(|_| err())?;
    let mut it = v.into_iter();
    let (x, y, z) = (
        it.next().ok_or_else(err)?,
        it.next().ok_or_else(err)?,
        it.next().ok_or_else(err)?,
    );
    Ok([z, y, x])
}

/// Runs `ffn export`.
pub fn run(args: Args) -> Result<()> {
    if args.image.is_none() && args.seg.is_none() {
        bail!("ffn export: nothing to export: give --image and/or --seg");
    }
    let resolution: [f64; 3] = parse_xyz("resolution", &args.resolution)?;
    if !resolution.iter().all(|r| r.is_finite() && *r > 0.0) {
        bail!(
            "--resolution {:?}: expected positive nanometres",
            args.resolution
        );
    }
    let chunk: [usize; 3] = parse_xyz("chunk", &args.chunk)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triples_are_read_as_xyz() {
        assert_eq!(
            parse_xyz::<usize>("chunk", "64, 32,16").unwrap(),
            [16, 32, 64]
        );
        let e = parse_xyz::<usize>("chunk", "64,32")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--chunk \"64,32\": expected three numbers"),
            "{e}"
        );
        assert!(parse_xyz::<f64>("resolution", "8,8,x").is_err());
    }
}
