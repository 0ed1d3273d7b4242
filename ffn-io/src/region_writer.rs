//! Label volumes and uint8 images written region by region, for outputs larger than memory: the
//! volume is created empty (HDF5, Zarr or precomputed, chunked and compressed; labels as the
//! smallest unsigned type that holds the largest id), the caller writes boxes into it one at a
//! time, and the volume is put in place only when every box was written (a temporary file or
//! folder renamed over the destination, as every write of ffn-io: a failure leaves the old volume,
//! if any, untouched).
//!
//! Memory is that of the boxes being written plus the format's chunk cache, whatever the volume's
//! size. Boxes need not be aligned to the chunks: chunks written in part are read back, updated
//! and rewritten (so one writer at a time).
//!
//! ```no_run
//! use ffn_io::region_writer::write_labels_by_region;
//!
//! let out: ffn_io::VolumeSpec = "seg.zarr/labels".parse()?;
//! write_labels_by_region(&out, [64, 1024, 1024], 7, |w| {
//!     for z in 0..64 {
//!         let slab = vec![7u64; 1024 * 1024];
//!         w.write([z, 0, 0], [1, 1024, 1024], &slab)?;
//!     }
//!     Ok(())
//! })?;
//! # Ok::<(), ffn_io::IoError>(())
//! ```

use hdf5::Dataset;
use ndarray::{Array3, s};

use crate::error::IoError;
use crate::precomputed::{self, DataType, LayerType, PrecomputedInfo, PrecomputedVolume};
use crate::volume::{
    Element, Sample, VolumeFormat, VolumeSpec, check_inside, create_hdf5_dataset, hdf5_err,
    label_element,
};
use crate::zarr_store::{self, ZarrArray};

/// Where the boxes go.
enum Target {
    Hdf5(Dataset),
    Zarr(Box<ZarrArray>),
    Precomputed(Box<PrecomputedVolume>),
}

impl Target {
    /// Writes `block` (of the volume's element type) at `offset`, inside the volume.
    fn write<T: Sample>(
        &self,
        spec: &VolumeSpec,
        offset: [usize; 3],
        block: &Array3<T>,
    ) -> Result<(), IoError> {
        if block.is_empty() {
            return Ok(());
        }
        match self {
            Target::Hdf5(ds) => {
                let (o, n) = (offset, block.shape());
                ds.write_slice(
                    block,
                    s![o[0]..o[0] + n[0], o[1]..o[1] + n[1], o[2]..o[2] + n[2]],
                )
                .map_err(|e| hdf5_err(spec, e))
            }
            Target::Zarr(array) => array.write_region(spec, offset, block),
            Target::Precomputed(volume) => volume.write_region(offset, block),
        }
    }
}

/// Creates the volume `spec` of `shape` and `element` (a precomputed volume as a `layer`) under a
/// temporary name, lets `fill` write into it, and puts it in place when `fill` succeeded.
fn with_new_volume(
    spec: &VolumeSpec,
    shape: [usize; 3],
    element: Element,
    layer: LayerType,
    fill: impl FnOnce(Target) -> Result<(), IoError>,
) -> Result<(), IoError> {
    match spec.format {
        VolumeFormat::Zarr => zarr_store::create_and_fill(spec, shape, element, |array| {
            fill(Target::Zarr(Box::new(array)))
        }),
        VolumeFormat::Precomputed => {
            let data_type =
                DataType::of_element(element).ok_or_else(|| IoError::InvalidOption {
                    field: format!("element type of {spec}"),
                    expected: "a precomputed data type".into(),
                    found: element.name().into(),
                })?;
            let info = PrecomputedInfo::for_volume(layer, data_type, shape);
            precomputed::create_and_fill(spec, info, |volume| {
                fill(Target::Precomputed(Box::new(volume)))
            })
        }
        VolumeFormat::Hdf5 => crate::atomic::replace_file(&spec.path, |tmp| {
            let into = |ds: &Dataset| fill(Target::Hdf5(ds.clone()));
            match element {
                Element::U8 => create_hdf5_dataset::<u8>(spec, tmp, shape, into),
                Element::U16 => create_hdf5_dataset::<u16>(spec, tmp, shape, into),
                Element::U32 => create_hdf5_dataset::<u32>(spec, tmp, shape, into),
                Element::U64 => create_hdf5_dataset::<u64>(spec, tmp, shape, into),
                other => Err(IoError::InvalidOption {
                    field: format!("element type of {spec}"),
                    expected: "uint8, uint16, uint32 or uint64".into(),
                    found: other.name().into(),
                }),
            }
        }),
    }
}

/// A label volume being written; see [`write_labels_by_region`].
pub struct LabelRegionWriter<'a> {
    spec: &'a VolumeSpec,
    shape: [usize; 3],
    max_id: u64,
    element: Element,
    target: Target,
}

impl LabelRegionWriter<'_> {
    /// The volume's shape `[z, y, x]`.
    pub fn shape(&self) -> [usize; 3] {
        self.shape
    }

    /// The element type of the volume (`uint8`, `uint16`, `uint32` or `uint64`).
    pub fn dtype(&self) -> &'static str {
        self.element.name()
    }

    /// Writes `ids` (`[z][y][x]` of `shape`) at `offset` (`[z, y, x]`). A box outside the volume,
    /// a wrong number of ids, or an id above the volume's declared largest id is an error naming
    /// the volume.
    pub fn write(
        &mut self,
        offset: [usize; 3],
        shape: [usize; 3],
        ids: &[u64],
    ) -> Result<(), IoError> {
        check_inside(self.spec, self.shape, offset, shape)?;
        let voxels = shape.iter().product::<usize>();
        if ids.len() != voxels {
            return Err(IoError::InvalidOption {
                field: format!("ids of the box at {offset:?} (z,y,x) of {}", self.spec),
                expected: format!("{voxels} ids for its shape {shape:?}"),
                found: format!("{} ids", ids.len()),
            });
        }
        if let Some(&id) = ids.iter().find(|&&id| id > self.max_id) {
            return Err(IoError::InvalidOption {
                field: format!("ids of the box at {offset:?} (z,y,x) of {}", self.spec),
                expected: format!(
                    "ids up to {} (the volume was created as {})",
                    self.max_id,
                    self.element.name()
                ),
                found: format!("id {id}"),
            });
        }
        match self.element {
            Element::U8 => self.write_as::<u8>(offset, shape, ids),
            Element::U16 => self.write_as::<u16>(offset, shape, ids),
            Element::U32 => self.write_as::<u32>(offset, shape, ids),
            _ => self.write_as::<u64>(offset, shape, ids),
        }
    }

    /// Writes the box as `T`, into which every id fits (checked by [`Self::write`]).
    fn write_as<T: Sample + TryFrom<u64>>(
        &self,
        offset: [usize; 3],
        shape: [usize; 3],
        ids: &[u64],
    ) -> Result<(), IoError> {
        let narrow: Vec<T> = ids
            .iter()
            .map(|&id| T::try_from(id).unwrap_or_default())
            .collect();
        let block =
            Array3::from_shape_vec((shape[0], shape[1], shape[2]), narrow).map_err(|e| {
                IoError::InvalidOption {
                    field: format!("box at {offset:?} of {}", self.spec),
                    expected: format!("shape {shape:?}"),
                    found: e.to_string(),
                }
            })?;
        self.target.write(self.spec, offset, &block)
    }
}

/// Creates the label volume `spec` of `shape` (`[z, y, x]`) for ids up to `max_id` (stored as the
/// smallest unsigned type that holds them, uint32 at least for precomputed's
/// `compressed_segmentation`; voxels never written are 0), lets `fill` write its boxes
/// ([`LabelRegionWriter::write`]), and puts the volume in place only when `fill` returns `Ok`. An
/// existing dataset of that name is replaced; the file's or store's other datasets are kept.
pub fn write_labels_by_region(
    spec: &VolumeSpec,
    shape: [usize; 3],
    max_id: u64,
    fill: impl FnOnce(&mut LabelRegionWriter<'_>) -> Result<(), IoError>,
) -> Result<(), IoError> {
    let element = match (spec.format, label_element(max_id)) {
        (VolumeFormat::Precomputed, Element::U8 | Element::U16) => Element::U32,
        (_, e) => e,
    };
    with_new_volume(spec, shape, element, LayerType::Segmentation, |target| {
        fill(&mut LabelRegionWriter {
            spec,
            shape,
            max_id,
            element,
            target,
        })
    })
}

/// A uint8 image being written; see [`write_image_u8_by_region`].
pub struct ImageRegionWriter<'a> {
    spec: &'a VolumeSpec,
    shape: [usize; 3],
    target: Target,
}

impl ImageRegionWriter<'_> {
    /// The volume's shape `[z, y, x]`.
    pub fn shape(&self) -> [usize; 3] {
        self.shape
    }

    /// Writes `block` at `offset` (`[z, y, x]`); a box outside the volume is an error naming it.
    pub fn write(&mut self, offset: [usize; 3], block: &Array3<u8>) -> Result<(), IoError> {
        let (z, y, x) = block.dim();
        check_inside(self.spec, self.shape, offset, [z, y, x])?;
        self.target.write(self.spec, offset, block)
    }
}

/// Creates the uint8 image `spec` of `shape` (`[z, y, x]`; voxels never written are 0), lets
/// `fill` write its boxes ([`ImageRegionWriter::write`]), and puts it in place only when `fill`
/// returns `Ok`, as [`write_labels_by_region`].
pub fn write_image_u8_by_region(
    spec: &VolumeSpec,
    shape: [usize; 3],
    fill: impl FnOnce(&mut ImageRegionWriter<'_>) -> Result<(), IoError>,
) -> Result<(), IoError> {
    with_new_volume(spec, shape, Element::U8, LayerType::Image, |target| {
        fill(&mut ImageRegionWriter {
            spec,
            shape,
            target,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::{dataset_dtype, read_labels, write_image_u8};

    /// A volume of ids that change every few voxels, the largest `max`.
    fn ids(shape: [usize; 3], max: u64) -> Array3<u64> {
        Array3::from_shape_fn((shape[0], shape[1], shape[2]), |(z, y, x)| {
            ((z / 3 * 31 + y / 4 * 7 + x / 5) as u64 * 2_654_435_761) % (max + 1)
        })
    }

    /// Writes `v` in boxes of `step` (not aligned to the chunks) in reverse order.
    fn write_in_boxes(spec: &VolumeSpec, v: &Array3<u64>, max: u64, step: [usize; 3]) {
        let sh = [v.shape()[0], v.shape()[1], v.shape()[2]];
        write_labels_by_region(spec, sh, max, |w| {
            let mut boxes = Vec::new();
            for z in (0..sh[0]).step_by(step[0]) {
                for y in (0..sh[1]).step_by(step[1]) {
                    for x in (0..sh[2]).step_by(step[2]) {
                        boxes.push([z, y, x]);
                    }
                }
            }
            for o in boxes.into_iter().rev() {
                let n: [usize; 3] = [0, 1, 2].map(|a| step[a].min(sh[a] - o[a]));
                let part = v.slice(s![o[0]..o[0] + n[0], o[1]..o[1] + n[1], o[2]..o[2] + n[2]]);
                w.write(o, n, &part.iter().copied().collect::<Vec<_>>())?;
            }
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn boxes_written_in_any_order_give_the_volume_in_every_format_and_type() {
        let dir = tempfile::tempdir().unwrap();
        for (max, dtype) in [
            (200, "uint8"),
            (60_000, "uint16"),
            (4_000_000_000, "uint32"),
            (u64::MAX - 1, "uint64"),
        ] {
            let v = ids([37, 70, 45], max);
            for spec in [
                VolumeSpec::new(dir.path().join("a.h5"), format!("seg/{dtype}")),
                VolumeSpec::new(dir.path().join("a.zarr"), format!("seg/{dtype}")),
                VolumeSpec::precomputed(dir.path().join(format!("seg_{dtype}")), ""),
            ] {
                write_in_boxes(&spec, &v, max, [13, 17, 40]);
                assert_eq!(read_labels(&spec).unwrap(), v, "{spec}");
                let want = match (spec.format, dtype) {
                    (VolumeFormat::Precomputed, "uint8" | "uint16") => "uint32",
                    _ => dtype,
                };
                assert_eq!(dataset_dtype(&spec).unwrap(), want, "{spec}");
            }
        }
    }

    #[test]
    fn a_failed_fill_leaves_the_old_volume_and_other_datasets() {
        let dir = tempfile::tempdir().unwrap();
        for store in ["b.h5", "b.zarr"] {
            let raw = VolumeSpec::new(dir.path().join(store), "raw");
            let seg = VolumeSpec::new(dir.path().join(store), "seg");
            write_image_u8(&raw, &Array3::from_elem((2, 3, 4), 9)).unwrap();
            let old = ids([4, 5, 6], 100);
            write_in_boxes(&seg, &old, 100, [4, 5, 6]);
            let e = write_labels_by_region(&seg, [4, 5, 6], 100, |w| {
                w.write([0, 0, 0], [1, 1, 2], &[1, 2])?;
                w.write([3, 0, 0], [2, 1, 1], &[1, 2])
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains("outside") && e.contains(store), "{e}");
            let e = write_labels_by_region(&seg, [4, 5, 6], 100, |w| {
                w.write([0, 0, 0], [1, 1, 3], &[1, 2])
            })
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("3 ids for its shape") && e.contains("found 2"),
                "{e}"
            );
            let e = write_labels_by_region(&seg, [4, 5, 6], 100, |w| {
                w.write([0, 0, 0], [1, 1, 2], &[1, 101])
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains("ids up to 100") && e.contains("id 101"), "{e}");
            assert_eq!(read_labels(&seg).unwrap(), old, "{store}");
            assert_eq!(
                crate::volume::read_image_u8(&raw).unwrap(),
                Array3::from_elem((2, 3, 4), 9)
            );
            let leftovers: Vec<_> = [dir.path().to_path_buf(), dir.path().join("b.zarr")]
                .iter()
                .filter_map(|d| std::fs::read_dir(d).ok())
                .flatten()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".tmp-"))
                .collect();
            assert!(leftovers.is_empty(), "{leftovers:?}");
        }
    }
}
