//! Image stacks and label maps into HDF5 volumes (`ffn import`), whole or a box of them (for
//! example the training part of a volume whose rest is held out for evaluation).
//!
//! - [`import_stack`]: a folder (or `*` pattern) of 8-bit grayscale PNG slices, sorted by the
//!   number in their names, into a `uint8` volume;
//! - [`import_labels`]: a label volume from an HDF5 (or `.h5.gz`) file, by default FlyEM-style:
//!   supervoxels in `stack` mapped to bodies through `transforms`.

use std::path::PathBuf;

use anyhow::Result;
use ndarray::Array3;

use crate::VolumeSpec;

/// A box `(offset, size)`, z,y,x.
pub type Region = ([usize; 3], [usize; 3]);

/// What an import wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    /// Shape of the written volume, z,y,x.
    pub shape: [usize; 3],
    /// Shape of the whole input, z,y,x.
    pub full: [usize; 3],
    /// The imported box of the input (the whole input without a region).
    pub region: Region,
}

/// What [`import_stack`] wrote: the volume and the slices it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct StackImported {
    /// The volume.
    pub volume: Imported,
    /// The slice files, in z order (a TIFF file may hold several slices).
    pub slices: Vec<PathBuf>,
}

/// Slices buffered per write of [`import_stack`].
const SLAB_SLICES: usize = 16;

/// Imports the PNG or TIFF slices of `source` (a folder, a pattern such as `maps/iso.*.png`, or one
/// multi-page TIFF; see [`crate::stack`]) into `output` as `uint8`, only the box `region` when
/// given. The slices are streamed: at most [`SLAB_SLICES`] of them are in memory, whatever the
/// stack's size.
pub fn import_stack(
    source: &str,
    output: &VolumeSpec,
    region: Option<Region>,
) -> Result<StackImported> {
    let slices = crate::stack::find_slices(source)?;
    let full = crate::stack::stack_shape(&slices)?;
    let (o, s) = region.unwrap_or(([0; 3], full));
    crate::xyz::check_box(o, s, full, &source)?;
    crate::region_writer::write_image_u8_by_region(output, s, |volume| {
        let mut slab: Vec<u8> = Vec::with_capacity(SLAB_SLICES * s[1] * s[2]);
        let mut slab_z = 0;
        let mut flush = |slab: &mut Vec<u8>, slab_z: &mut usize| {
            let planes = slab.len() / (s[1] * s[2]).max(1);
            let block = Array3::from_shape_vec((planes, s[1], s[2]), std::mem::take(slab))
                .map_err(|e| crate::IoError::Stack {
                    source_desc: source.into(),
                    reason: e.to_string(),
                })?;
            volume.write([*slab_z, 0, 0], &block)?;
            *slab_z += planes;
            Ok::<(), crate::IoError>(())
        };
        crate::stack::for_each_stack_slice(&slices, &mut |z, w, _, pixels| {
            if z < o[0] || z >= o[0] + s[0] {
                return Ok(());
            }
            for row in pixels.chunks_exact(w as usize).skip(o[1]).take(s[1]) {
                slab.extend_from_slice(&row[o[2]..o[2] + s[2]]);
            }
            if slab.len() >= SLAB_SLICES * s[1] * s[2] {
                flush(&mut slab, &mut slab_z)?;
            }
            Ok(())
        })?;
        if !slab.is_empty() {
            flush(&mut slab, &mut slab_z)?;
        }
        Ok(())
    })?;
    Ok(StackImported {
        volume: Imported {
            shape: s,
            full,
            region: (o, s),
        },
        slices,
    })
}

/// Settings of [`import_labels`].
#[derive(Clone, Debug, PartialEq)]
pub struct LabelsImport {
    /// HDF5 file with the labels, plain or gzip-compressed (`.h5.gz`).
    pub input: PathBuf,
    /// Dataset of the input that holds the (supervoxel) labels (`stack` in FlyEM files).
    pub stack_dataset: String,
    /// Dataset with the (supervoxel, body) table (`transforms`); `None` copies the labels as is.
    pub transforms: Option<String>,
    /// Output volume, written as the smallest unsigned type that fits.
    pub output: VolumeSpec,
    /// Import only this box of the input.
    pub region: Option<Region>,
}

/// What [`import_labels`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelsImported {
    /// The volume.
    pub volume: Imported,
    /// The written element type (`uint8` ... `uint64`).
    pub dtype: String,
    /// Distinct non-zero ids.
    pub objects: usize,
    /// Voxels with id 0.
    pub zeros: usize,
}

/// Imports a label volume as [`LabelsImport`] describes.
pub fn import_labels(opts: &LabelsImport) -> Result<LabelsImported> {
    let labels = crate::labels::read_flyem_labels(
        &opts.input,
        &opts.stack_dataset,
        opts.transforms.as_deref(),
    )?;
    let (labels, volume) = crop(labels, opts.region, &opts.input.display())?;
    crate::write_labels(&opts.output, &labels)?;
    Ok(LabelsImported {
        volume,
        dtype: crate::dataset_dtype(&opts.output)?,
        objects: crate::labels::count_objects(&labels),
        zeros: labels.iter().filter(|&&x| x == 0).count(),
    })
}

/// The box `region` of `v` (all of it without one), checked against its shape and copied;
/// `input` names the volume in errors.
fn crop<T: Clone>(
    v: Array3<T>,
    region: Option<Region>,
    input: &dyn std::fmt::Display,
) -> Result<(Array3<T>, Imported)> {
    let (z, y, x) = v.dim();
    let full = [z, y, x];
    let Some((o, s)) = region.filter(|&r| r != ([0; 3], full)) else {
        let region = ([0; 3], full);
        return Ok((
            v,
            Imported {
                shape: full,
                full,
                region,
            },
        ));
    };
    crate::xyz::check_box(o, s, full, input)?;
    let boxed = v
        .slice(ndarray::s![
            o[0]..o[0] + s[0],
            o[1]..o[1] + s[1],
            o[2]..o[2] + s[2]
        ])
        .to_owned();
    let region = (o, s);
    Ok((
        boxed,
        Imported {
            shape: s,
            full,
            region,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_import_whole_or_a_checked_box() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.h5");
        let mut v = Array3::<u64>::zeros((4, 5, 6));
        v[[1, 2, 3]] = 7;
        v[[3, 4, 5]] = 9;
        crate::write_labels(&VolumeSpec::new(&input, "stack"), &v).unwrap();
        let mut opts = LabelsImport {
            input: input.clone(),
            stack_dataset: "stack".into(),
            transforms: None,
            output: VolumeSpec::new(dir.path().join("out.h5"), "labels"),
            region: None,
        };
        let whole = import_labels(&opts).unwrap();
        assert_eq!(
            (whole.volume.shape, whole.objects, whole.dtype.as_str()),
            ([4, 5, 6], 2, "uint8")
        );
        assert_eq!(whole.zeros, 4 * 5 * 6 - 2);
        opts.region = Some(([1, 1, 1], [2, 2, 3]));
        let part = import_labels(&opts).unwrap();
        assert_eq!(
            (part.volume.shape, part.volume.full, part.objects),
            ([2, 2, 3], [4, 5, 6], 1)
        );
        let got = crate::read_labels(&opts.output).unwrap();
        assert_eq!(got[[0, 1, 2]], 7);
        opts.region = Some(([3, 0, 0], [2, 1, 1]));
        let e = import_labels(&opts).unwrap_err().to_string();
        assert!(e.contains("does not fit in") && e.contains("in.h5"), "{e}");
    }
}
