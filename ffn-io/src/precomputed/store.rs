//! A precomputed scale opened for reading boxes, or being written box by box.

use std::path::{Path, PathBuf};

use ndarray::{Array3, s};

use super::chunk::{encode, read_chunk};
use super::{DataType, LayerType, PrecomputedInfo};
use crate::error::IoError;
use crate::volume::{Element, Sample, VolumeSpec};

/// One scale of a precomputed volume in the folder `dir`.
#[derive(Clone, Debug)]
pub struct PrecomputedVolume {
    dir: PathBuf,
    info: PrecomputedInfo,
}

impl PrecomputedVolume {
    /// Opens the scale `key` (the first for `None`) of the volume in `dir`.
    pub fn open(dir: &Path, key: Option<&str>) -> Result<Self, IoError> {
        Ok(Self {
            dir: dir.to_path_buf(),
            info: super::read_info(dir, key)?,
        })
    }

    /// Opens the volume of a `precomputed://` spec (its dataset is the scale key, empty for the
    /// first scale).
    pub(crate) fn open_spec(spec: &VolumeSpec) -> Result<Self, IoError> {
        let key = (!spec.dataset.is_empty()).then_some(spec.dataset.as_str());
        Self::open(&spec.path, key)
    }

    /// The scale's description.
    pub fn info(&self) -> &PrecomputedInfo {
        &self.info
    }

    /// The element type.
    pub(crate) fn element(&self) -> Element {
        self.info.data_type.element()
    }

    fn chunk_path(&self, lo: [usize; 3], hi: [usize; 3]) -> PathBuf {
        self.dir
            .join(&self.info.key)
            .join(self.info.chunk_name(lo, hi))
    }

    /// The grid positions of the chunks that intersect the box `offset .. offset + shape`.
    fn chunks_of(&self, offset: [usize; 3], shape: [usize; 3]) -> Vec<[usize; 3]> {
        let c = self.info.chunk_zyx;
        let first = [0, 1, 2].map(|a| offset[a] / c[a]);
        let end = [0, 1, 2].map(|a| (offset[a] + shape[a]).div_ceil(c[a]));
        let mut out = Vec::new();
        for z in first[0]..end[0] {
            for y in first[1]..end[1] {
                for x in first[2]..end[2] {
                    out.push([z, y, x]);
                }
            }
        }
        out
    }

    /// Reads the box `offset .. offset + shape` (`[z, y, x]`, inside the volume: checked by the
    /// caller) as `T`, the volume's element type; missing chunks read as zeros.
    pub(crate) fn read<T: Sample>(
        &self,
        offset: [usize; 3],
        shape: [usize; 3],
    ) -> Result<Array3<T>, IoError> {
        let mut out = Array3::<T>::default((shape[0], shape[1], shape[2]));
        if shape.contains(&0) {
            return Ok(out);
        }
        for c in self.chunks_of(offset, shape) {
            let (lo, hi) = self.info.chunk_box(c);
            let n = [0, 1, 2].map(|a| hi[a] - lo[a]);
            let Some(values) = read_chunk::<T>(&self.info, &self.chunk_path(lo, hi), n)? else {
                continue;
            };
            let chunk = Array3::from_shape_vec((n[0], n[1], n[2]), values).map_err(|e| {
                IoError::Config {
                    path: self.chunk_path(lo, hi),
                    reason: e.to_string(),
                }
            })?;
            let (a, b) = intersect(lo, hi, offset, shape);
            out.slice_mut(s![
                a[0] - offset[0]..b[0] - offset[0],
                a[1] - offset[1]..b[1] - offset[1],
                a[2] - offset[2]..b[2] - offset[2]
            ])
            .assign(&chunk.slice(s![
                a[0] - lo[0]..b[0] - lo[0],
                a[1] - lo[1]..b[1] - lo[1],
                a[2] - lo[2]..b[2] - lo[2]
            ]));
        }
        Ok(out)
    }

    /// Writes `v` at `offset` (`[z, y, x]`, inside the volume: checked by the caller); `T` must
    /// be the volume's element type. Chunks the box covers in part are read (zeros where they do
    /// not exist yet), updated and rewritten, so one writer at a time.
    pub(crate) fn write_region<T: Sample>(
        &self,
        offset: [usize; 3],
        v: &Array3<T>,
    ) -> Result<(), IoError> {
        let shape = [v.shape()[0], v.shape()[1], v.shape()[2]];
        if shape.contains(&0) {
            return Ok(());
        }
        for c in self.chunks_of(offset, shape) {
            let (lo, hi) = self.info.chunk_box(c);
            let n = [0, 1, 2].map(|a| hi[a] - lo[a]);
            let (a, b) = intersect(lo, hi, offset, shape);
            let part = v.slice(s![
                a[0] - offset[0]..b[0] - offset[0],
                a[1] - offset[1]..b[1] - offset[1],
                a[2] - offset[2]..b[2] - offset[2]
            ]);
            let chunk = if a == lo && b == hi {
                part.to_owned()
            } else {
                let mut chunk = self.read(lo, n)?;
                chunk
                    .slice_mut(s![
                        a[0] - lo[0]..b[0] - lo[0],
                        a[1] - lo[1]..b[1] - lo[1],
                        a[2] - lo[2]..b[2] - lo[2]
                    ])
                    .assign(&part);
                chunk
            };
            let values: Vec<T> = chunk.iter().copied().collect();
            let path = self.chunk_path(lo, hi);
            std::fs::write(&path, encode(&self.info, &values, n))
                .map_err(|e| IoError::os(&path, e))?;
        }
        Ok(())
    }
}

/// The intersection of the boxes `lo..hi` and `offset .. offset + shape` (they intersect).
fn intersect(
    lo: [usize; 3],
    hi: [usize; 3],
    offset: [usize; 3],
    shape: [usize; 3],
) -> ([usize; 3], [usize; 3]) {
    (
        [0, 1, 2].map(|a| lo[a].max(offset[a])),
        [0, 1, 2].map(|a| hi[a].min(offset[a] + shape[a])),
    )
}

/// Makes the precomputed volume of `spec` described by `info` (scale key: the spec's, if it names
/// one) in a temporary folder, lets `fill` write into it, and puts it in place of the folder only
/// when `fill` succeeded (a volume there before, all its scales, is replaced).
pub(crate) fn create_and_fill(
    spec: &VolumeSpec,
    mut info: PrecomputedInfo,
    fill: impl FnOnce(PrecomputedVolume) -> Result<(), IoError>,
) -> Result<(), IoError> {
    if !spec.dataset.is_empty() {
        info.key = spec.dataset.clone();
    }
    info.check(&spec.path.join("info"))?;
    let parent = crate::atomic::parent_dir(&spec.path);
    std::fs::create_dir_all(&parent).map_err(|e| IoError::os(&parent, e))?;
    crate::atomic::replace_dir(&spec.path, |tmp| {
        let scale = tmp.join(&info.key);
        std::fs::create_dir_all(&scale).map_err(|e| IoError::os(&scale, e))?;
        let text = serde_json::to_string_pretty(&info.to_json()).map_err(|e| IoError::Config {
            path: spec.path.join("info"),
            reason: e.to_string(),
        })?;
        let path = tmp.join("info");
        std::fs::write(&path, text).map_err(|e| IoError::os(&path, e))?;
        fill(PrecomputedVolume {
            dir: tmp.to_path_buf(),
            info,
        })
    })
}

/// Writes `v` as the precomputed volume of `spec`: a `layer` of `T`'s data type, chunked
/// ([`PrecomputedInfo::for_volume`]).
pub(crate) fn write<T: Sample>(
    spec: &VolumeSpec,
    v: &Array3<T>,
    layer: LayerType,
) -> Result<(), IoError> {
    let data_type = DataType::of_element(T::ELEMENT).ok_or_else(|| IoError::InvalidOption {
        field: format!("element type of {spec}"),
        expected: "uint8, uint16, uint32, uint64 or float32 (the precomputed data types)".into(),
        found: T::ELEMENT.name().into(),
    })?;
    let shape = [v.shape()[0], v.shape()[1], v.shape()[2]];
    let info = PrecomputedInfo::for_volume(layer, data_type, shape);
    create_and_fill(spec, info, |vol| vol.write_region([0; 3], v))
}
