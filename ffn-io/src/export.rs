//! HDF5 volumes written as Neuroglancer "precomputed" volumes, slab by slab (`ffn export`).

use std::path::Path;

use anyhow::{Context, Result};

use crate::VolumeSpec;
use crate::precomputed::{DataType, LayerType, PrecomputedInfo, PrecomputedWriter};

/// Exports a uint8 image (axes z,y,x) as a precomputed image volume in `dir`.
pub fn export_image(
    spec: &VolumeSpec,
    dir: &Path,
    resolution_zyx: [f64; 3],
    chunk_zyx: [usize; 3],
) -> Result<()> {
    let shape = crate::dataset_shape(spec).with_context(|| format!("reading {spec}"))?;
    let info = PrecomputedInfo {
        layer: LayerType::Image,
        data_type: DataType::Uint8,
        shape_zyx: shape,
        chunk_zyx,
        resolution_zyx,
    };
    write_slabs(dir, info, |z0, n| {
        let slab = crate::read_image_u8_region(spec, [z0, 0, 0], [n, shape[1], shape[2]])?;
        Ok(slab.mapv(u64::from))
    })
}

/// Exports a label volume as a precomputed segmentation in `dir` (uint32 when the ids fit).
pub fn export_segmentation(
    spec: &VolumeSpec,
    dir: &Path,
    resolution_zyx: [f64; 3],
    chunk_zyx: [usize; 3],
) -> Result<DataType> {
    let shape = crate::dataset_shape(spec).with_context(|| format!("reading {spec}"))?;
    // First pass: the largest id decides the data type.
    let mut max = 0u64;
    for z0 in (0..shape[0]).step_by(chunk_zyx[0]) {
        let n = chunk_zyx[0].min(shape[0] - z0);
        let slab = crate::read_labels_region(spec, [z0, 0, 0], [n, shape[1], shape[2]])?;
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
    write_slabs(dir, info, |z0, n| {
        Ok(crate::read_labels_region(
            spec,
            [z0, 0, 0],
            [n, shape[1], shape[2]],
        )?)
    })?;
    Ok(data_type)
}

/// Writes the volume `info` describes in `dir`, one chunk-high slab at a time: `read(z0, n)` gives
/// the `n` planes from `z0`.
fn write_slabs(
    dir: &Path,
    info: PrecomputedInfo,
    mut read: impl FnMut(usize, usize) -> Result<ndarray::Array3<u64>>,
) -> Result<()> {
    let (depth, chunk) = (info.shape_zyx[0], info.chunk_zyx[0]);
    let mut w = PrecomputedWriter::create(dir, info)?;
    while w.next_z() < depth {
        let z0 = w.next_z();
        let slab = read(z0, chunk.min(depth - z0))?;
        w.write_slab(slab.view())?;
    }
    w.finish()?;
    Ok(())
}
