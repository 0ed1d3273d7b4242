//! `ffn export --image raw.h5:raw --seg seg.h5:seg --out DIR`: Neuroglancer "precomputed" volumes
//! (`DIR/image`, `DIR/segmentation`) that any static file server can serve to Neuroglancer.
//!
//! The HDF5 volumes are read one chunk row (along z) at a time, so memory stays at one slab.
//! Sizes on the command line follow Neuroglancer's x,y,z order; see `ffn_io::precomputed`.

use anyhow::{Context, Result, bail};
use ffn_io::VolumeSpec;
use ffn_io::precomputed::{DataType, LayerType, PrecomputedInfo, PrecomputedWriter};
use std::path::{Path, PathBuf};

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

/// Exports a uint8 image (axes z,y,x) as a precomputed image volume in `dir`.
pub fn export_image(
    spec: &VolumeSpec,
    dir: &Path,
    resolution_zyx: [f64; 3],
    chunk_zyx: [usize; 3],
) -> Result<()> {
    let shape = ffn_io::dataset_shape(spec).with_context(|| format!("reading {spec}"))?;
    let info = PrecomputedInfo {
        layer: LayerType::Image,
        data_type: DataType::Uint8,
        shape_zyx: shape,
        chunk_zyx,
        resolution_zyx,
    };
    let mut w = PrecomputedWriter::create(dir, info)?;
    while w.next_z() < shape[0] {
        let z0 = w.next_z();
        let n = chunk_zyx[0].min(shape[0] - z0);
        let slab = ffn_io::read_image_u8_region(spec, [z0, 0, 0], [n, shape[1], shape[2]])?;
        w.write_slab(slab.mapv(u64::from).view())?;
    }
    w.finish()?;
    Ok(())
}

/// Exports a label volume as a precomputed segmentation in `dir` (uint32 when the ids fit).
pub fn export_segmentation(
    spec: &VolumeSpec,
    dir: &Path,
    resolution_zyx: [f64; 3],
    chunk_zyx: [usize; 3],
) -> Result<DataType> {
    let shape = ffn_io::dataset_shape(spec).with_context(|| format!("reading {spec}"))?;
    // First pass: the largest id decides the data type.
    let mut max = 0u64;
    for z0 in (0..shape[0]).step_by(chunk_zyx[0]) {
        let n = chunk_zyx[0].min(shape[0] - z0);
        let slab = ffn_io::read_labels_region(spec, [z0, 0, 0], [n, shape[1], shape[2]])?;
        max = max.max(slab.iter().copied().max().unwrap_or(0));
    }
    let data_type = if max <= u32::MAX as u64 {
        DataType::Uint32
    } else {
        DataType::Uint64
    };
    let info = PrecomputedInfo {
        layer: LayerType::Segmentation,
        data_type,
        shape_zyx: shape,
        chunk_zyx,
        resolution_zyx,
    };
    let mut w = PrecomputedWriter::create(dir, info)?;
    while w.next_z() < shape[0] {
        let z0 = w.next_z();
        let n = chunk_zyx[0].min(shape[0] - z0);
        let slab = ffn_io::read_labels_region(spec, [z0, 0, 0], [n, shape[1], shape[2]])?;
        w.write_slab(slab.view())?;
    }
    w.finish()?;
    Ok(data_type)
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
