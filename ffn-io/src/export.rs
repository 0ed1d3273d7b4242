//! Volumes of any format written as Neuroglancer "precomputed" volumes, one chunk-high slab at a
//! time (`ffn export`): images `raw`, segmentations `compressed_segmentation`.

use std::path::Path;

use anyhow::{Context, Result};

use crate::VolumeSpec;
use crate::precomputed::{DataType, LayerType, PrecomputedInfo, create_and_fill};

/// Exports a uint8 image (axes z,y,x) as a precomputed image volume in `dir`.
pub fn export_image(
    spec: &VolumeSpec,
    dir: &Path,
    resolution_zyx: [f64; 3],
    chunk_zyx: [usize; 3],
) -> Result<()> {
    let shape = crate::dataset_shape(spec).with_context(|| format!("reading {spec}"))?;
    let info = PrecomputedInfo::new(
        LayerType::Image,
        DataType::Uint8,
        shape,
        chunk_zyx,
        resolution_zyx,
    );
    create_and_fill(&VolumeSpec::precomputed(dir, ""), info, |volume| {
        for (z0, n) in slabs(shape[0], chunk_zyx[0]) {
            let slab = crate::read_image_u8_region(spec, [z0, 0, 0], [n, shape[1], shape[2]])?;
            volume.write_region([z0, 0, 0], &slab)?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Exports a label volume as a precomputed segmentation in `dir` (uint32 when the ids fit, else
/// uint64); returns the data type.
pub fn export_segmentation(
    spec: &VolumeSpec,
    dir: &Path,
    resolution_zyx: [f64; 3],
    chunk_zyx: [usize; 3],
) -> Result<DataType> {
    let shape = crate::dataset_shape(spec).with_context(|| format!("reading {spec}"))?;
    let read =
        |z0: usize, n: usize| crate::read_labels_region(spec, [z0, 0, 0], [n, shape[1], shape[2]]);
    // First pass: the largest id decides the data type.
    let mut max = 0u64;
    for (z0, n) in slabs(shape[0], chunk_zyx[0]) {
        max = max.max(read(z0, n)?.iter().copied().max().unwrap_or(0));
    }
    let data_type = if max <= u64::from(u32::MAX) {
        DataType::Uint32
    } else {
        DataType::Uint64
    };
    let info = PrecomputedInfo::new(
        LayerType::Segmentation,
        data_type,
        shape,
        chunk_zyx,
        resolution_zyx,
    );
    create_and_fill(&VolumeSpec::precomputed(dir, ""), info, |volume| {
        for (z0, n) in slabs(shape[0], chunk_zyx[0]) {
            let slab = read(z0, n)?;
            match data_type {
                DataType::Uint32 => volume.write_region([z0, 0, 0], &slab.mapv(|v| v as u32))?,
                _ => volume.write_region([z0, 0, 0], &slab)?,
            }
        }
        Ok(())
    })?;
    Ok(data_type)
}

/// `(first plane, planes)` of the slabs of `chunk` planes that cover `depth` planes.
fn slabs(depth: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..depth)
        .step_by(chunk.max(1))
        .map(move |z0| (z0, chunk.min(depth - z0)))
}
