//! Zarr arrays in a folder store through the `zarrs` crate: Zarr v3 and v2 arrays are read (any
//! codec zarrs has: blosc, gzip, zstd, sharding, ...), arrays are written as Zarr v3 with
//! `[z, y, x]` dimension names, 64^3 chunks (capped by the shape) and zstd. Writes are whole or
//! nothing ([`crate::atomic::replace_dir`]); the groups above a new array get group metadata when
//! they have none, so that other Zarr clients see the hierarchy.
//!
//! A spec names the store folder (ending in `.zarr`) and the array inside it
//! (`out.zarr/labels`, or `out.zarr` for an array at the store's root); see
//! [`crate::volume::VolumeSpec`].

use std::path::Path;
use std::sync::Arc;

use ndarray::{Array3, Ix3};
use zarrs::array::codec::ZstdCodec;
use zarrs::array::{Array, ArrayBuilder, DataType, data_type};
use zarrs::filesystem::FilesystemStore;
use zarrs::group::{Group, GroupBuilder};
use zarrs::metadata::FillValueMetadata;

use crate::error::IoError;
use crate::volume::{Element, Sample, VolumeSpec};

/// Edge of the chunks of written arrays (per axis, capped by the axis length).
pub const ZARR_CHUNK_EDGE: u64 = 64;
/// zstd level of written arrays.
pub const ZSTD_LEVEL: i32 = 3;

/// An open Zarr array.
pub(crate) struct ZarrArray {
    array: Array<FilesystemStore>,
}

fn zarr_err(spec: &VolumeSpec, detail: impl std::fmt::Display) -> IoError {
    IoError::Zarr {
        spec: spec.to_string(),
        detail: crate::error::one_line(&detail.to_string()),
    }
}

/// The node path of `dataset` inside the store (`/` for the root).
fn node_path(dataset: &str) -> String {
    format!("/{}", dataset.trim_matches('/'))
}

fn store(spec: &VolumeSpec, root: &Path) -> Result<Arc<FilesystemStore>, IoError> {
    FilesystemStore::new(root)
        .map(Arc::new)
        .map_err(|e| zarr_err(spec, e))
}

/// Opens the array of `spec` (a missing store is "file not found").
/// A group with OME multiscales metadata opens as its first, full-resolution level
/// ([`crate::ome_zarr`]).
pub(crate) fn open(spec: &VolumeSpec) -> Result<ZarrArray, IoError> {
    std::fs::metadata(&spec.path).map_err(|e| IoError::os(&spec.path, e))?;
    let st = store(spec, &spec.path)?;
    let node = node_path(&spec.dataset);
    let e = match Array::open(st.clone(), &node) {
        Ok(array) => return Ok(ZarrArray { array }),
        Err(e) => e,
    };
    let Ok(group) = Group::open(st.clone(), &node) else {
        return Err(zarr_err(spec, format!("not a readable Zarr array: {e}")));
    };
    let level = crate::ome_zarr::first_level(group.attributes()).ok_or_else(|| {
        zarr_err(
            spec,
            "a Zarr group, not an array (and no OME multiscales metadata names its levels)",
        )
    })?;
    let path = node_path(&format!("{}/{level}", spec.dataset.trim_matches('/')));
    let array = Array::open(st, &path).map_err(|e| {
        zarr_err(
            spec,
            format!("the OME multiscales level {level:?} is not a readable Zarr array: {e}"),
        )
    })?;
    Ok(ZarrArray { array })
}

/// Records a numbered level written into a `.ome.zarr` store (`out.ome.zarr/0`) in its group's
/// OME multiscales metadata ([`crate::ome_zarr::record_level`]).
fn record_ome_level(spec: &VolumeSpec, shape: [usize; 3]) -> Result<(), IoError> {
    let store_name = spec.path.to_string_lossy();
    let (group, leaf) = match spec.dataset.trim_matches('/').rsplit_once('/') {
        Some((g, l)) => (g.to_string(), l.to_string()),
        None => (String::new(), spec.dataset.trim_matches('/').to_string()),
    };
    if !crate::ome_zarr::is_ome_store(&store_name) || !leaf.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(());
    }
    let st = store(spec, &spec.path)?;
    let level0 = Array::open(st.clone(), &node_path(&format!("{group}/0")))
        .ok()
        .filter(|_| leaf != "0")
        .and_then(|a| match a.shape() {
            &[z, y, x] => Some([z as usize, y as usize, x as usize]),
            _ => None,
        });
    let node = node_path(&group);
    let mut g = Group::open(st, &node).map_err(|e| zarr_err(spec, e))?;
    crate::ome_zarr::record_level(g.attributes_mut(), &leaf, shape, level0);
    g.store_metadata()
        .map_err(|e| zarr_err(spec, format!("writing the OME metadata of {node}: {e}")))
}

/// The Zarr data type of an element type.
fn zarr_type(e: Element) -> DataType {
    match e {
        Element::U8 => data_type::uint8(),
        Element::U16 => data_type::uint16(),
        Element::U32 => data_type::uint32(),
        Element::U64 => data_type::uint64(),
        Element::I8 => data_type::int8(),
        Element::I16 => data_type::int16(),
        Element::I32 => data_type::int32(),
        Element::I64 => data_type::int64(),
        Element::F32 => data_type::float32(),
        Element::F64 => data_type::float64(),
    }
}

const ELEMENTS: [Element; 10] = [
    Element::U8,
    Element::U16,
    Element::U32,
    Element::U64,
    Element::I8,
    Element::I16,
    Element::I32,
    Element::I64,
    Element::F32,
    Element::F64,
];

impl ZarrArray {
    /// The array's shape.
    pub(crate) fn shape(&self) -> Vec<usize> {
        self.array.shape().iter().map(|&n| n as usize).collect()
    }

    /// The element type, or the Zarr name of one ffn-rs does not read.
    pub(crate) fn element(&self) -> Result<Element, String> {
        let dt = self.array.data_type();
        ELEMENTS
            .into_iter()
            .find(|e| zarr_type(*e) == *dt)
            .ok_or_else(|| dt.to_string())
    }

    /// Reads the box `offset .. offset + shape` (z,y,x; checked by the caller) as `T`, which must be
    /// the array's element type.
    pub(crate) fn read<T: Sample>(
        &self,
        spec: &VolumeSpec,
        offset: [usize; 3],
        shape: [usize; 3],
    ) -> Result<Array3<T>, IoError> {
        let range = |i: usize| offset[i] as u64..(offset[i] + shape[i]) as u64;
        let subset = [range(0), range(1), range(2)];
        let data: ndarray::ArrayD<T> = self
            .array
            .retrieve_array_subset(&subset)
            .map_err(|e| zarr_err(spec, e))?;
        data.into_dimensionality::<Ix3>()
            .map_err(|e| zarr_err(spec, e))
    }
}

/// Gives the store root and every group on the way to the array of `spec` group metadata where
/// they have none (a new store becomes a Zarr v3 hierarchy).
fn ensure_groups(spec: &VolumeSpec) -> Result<(), IoError> {
    std::fs::create_dir_all(&spec.path).map_err(|e| IoError::os(&spec.path, e))?;
    let parts: Vec<&str> = spec.dataset.split('/').filter(|p| !p.is_empty()).collect();
    let Some((_, groups)) = parts.split_last() else {
        return Ok(());
    };
    let st = store(spec, &spec.path)?;
    let mut path = spec.path.clone();
    let mut node = String::new();
    for g in std::iter::once(&"").chain(groups) {
        if !g.is_empty() {
            path.push(g);
            node.push('/');
            node.push_str(g);
        }
        let has_metadata = ["zarr.json", ".zgroup"]
            .iter()
            .any(|m| path.join(m).exists());
        if !has_metadata {
            let node = if node.is_empty() { "/" } else { &node };
            GroupBuilder::new()
                .build(st.clone(), node)
                .and_then(|group| group.store_metadata().map_err(Into::into))
                .map_err(|e| {
                    zarr_err(spec, format!("writing the group metadata of {node}: {e}"))
                })?;
        }
    }
    Ok(())
}

/// The folder of the array of `spec` (a root array is the store folder itself).
fn array_dir(spec: &VolumeSpec) -> std::path::PathBuf {
    // Path::join of "" would add a trailing '/'.
    let leaf = spec.dataset.trim_matches('/');
    if leaf.is_empty() {
        spec.path.clone()
    } else {
        spec.path.join(leaf)
    }
}

/// A new, empty Zarr v3 array of `shape` and `element` in the folder `dir` (which must not exist):
/// `[z, y, x]` dimension names, chunks of [`ZARR_CHUNK_EDGE`] (capped by the shape), zstd.
pub(crate) fn create(
    spec: &VolumeSpec,
    dir: &Path,
    shape: [usize; 3],
    element: Element,
) -> Result<ZarrArray, IoError> {
    std::fs::create_dir(dir).map_err(|e| IoError::os(dir, e))?;
    let shape: Vec<u64> = shape.iter().map(|&n| n as u64).collect();
    let chunks: Vec<u64> = shape.iter().map(|&n| n.clamp(1, ZARR_CHUNK_EDGE)).collect();
    let fill = if matches!(element, Element::F32 | Element::F64) {
        FillValueMetadata::from(0.0f64)
    } else {
        FillValueMetadata::from(0u64)
    };
    let array = ArrayBuilder::new(shape, chunks, zarr_type(element), fill)
        .bytes_to_bytes_codecs(vec![Arc::new(ZstdCodec::new(ZSTD_LEVEL, false))])
        .dimension_names(Some(["z", "y", "x"]))
        .build(store(spec, dir)?, "/")
        .map_err(|e| zarr_err(spec, e))?;
    array.store_metadata().map_err(|e| zarr_err(spec, e))?;
    Ok(ZarrArray { array })
}

impl ZarrArray {
    /// Writes `v` at `offset` (z,y,x; checked by the caller); chunks it covers in part are read,
    /// updated and rewritten.
    pub(crate) fn write_region<T: Sample>(
        &self,
        spec: &VolumeSpec,
        offset: [usize; 3],
        v: &Array3<T>,
    ) -> Result<(), IoError> {
        if v.is_empty() {
            return Ok(());
        }
        let range = |i: usize| offset[i] as u64..(offset[i] + v.shape()[i]) as u64;
        self.array
            .store_array_subset(&[range(0), range(1), range(2)], &v.as_standard_layout())
            .map_err(|e| zarr_err(spec, e))
    }
}

/// Makes the array of `spec` (its groups first, [`ensure_groups`]) in a temporary folder, lets
/// `fill` write into it, and puts it in place only when `fill` succeeded
/// ([`crate::atomic::replace_dir`]): an array of that name is replaced, other arrays of the store
/// are kept.
pub(crate) fn create_and_fill(
    spec: &VolumeSpec,
    shape: [usize; 3],
    element: Element,
    fill: impl FnOnce(ZarrArray) -> Result<(), IoError>,
) -> Result<(), IoError> {
    ensure_groups(spec)?;
    crate::atomic::replace_dir(&array_dir(spec), |tmp| {
        fill(create(spec, tmp, shape, element)?)
    })?;
    record_ome_level(spec, shape)
}

/// Writes `v` as the array of `spec` (Zarr v3, element type `T`), replacing an array of that name;
/// other arrays of the store are kept.
pub(crate) fn write<T: Sample>(spec: &VolumeSpec, v: &Array3<T>) -> Result<(), IoError> {
    let shape = [v.shape()[0], v.shape()[1], v.shape()[2]];
    create_and_fill(spec, shape, T::ELEMENT, |array| {
        array.write_region(spec, [0; 3], v)
    })
}

#[cfg(test)]
mod tests {
    use crate::volume::*;
    use ndarray::{Array3, s};

    fn ramp<T>(shape: (usize, usize, usize), f: impl Fn(usize) -> T) -> Array3<T> {
        let n = shape.0 * shape.1 * shape.2;
        Array3::from_shape_vec(shape, (0..n).map(f).collect()).unwrap()
    }

    #[test]
    fn specs_name_the_store_and_the_array() {
        let s: VolumeSpec = "/d/seg.zarr/labels/v1".parse().unwrap();
        assert_eq!(s.format, VolumeFormat::Zarr);
        assert_eq!(
            (s.path.to_str().unwrap(), s.dataset.as_str()),
            ("/d/seg.zarr", "labels/v1")
        );
        assert_eq!(s.to_string(), "/d/seg.zarr/labels/v1");
        let root: VolumeSpec = "img.ome.zarr".parse().unwrap();
        assert_eq!(
            (root.format, root.dataset.as_str()),
            (VolumeFormat::Zarr, "")
        );
        assert_eq!(
            VolumeSpec::new("a/b.zarr", "raw"),
            "a/b.zarr/raw".parse().unwrap()
        );
        let h5: VolumeSpec = "a.zarr.h5:raw".parse().unwrap();
        assert_eq!(h5.format, VolumeFormat::Hdf5);
    }

    #[test]
    fn images_labels_and_regions_round_trip_and_other_arrays_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let raw = VolumeSpec::new(dir.path().join("v.zarr"), "raw");
        let seg = VolumeSpec::new(dir.path().join("v.zarr"), "seg/ids");
        let v = ramp((5, 70, 37), |i| (i % 251) as u8);
        write_image_u8(&raw, &v).unwrap();
        let ids = ramp((5, 70, 37), |i| (i as u64 % 7) * 1_000_000_007);
        write_labels(&seg, &ids).unwrap();
        assert_eq!(read_image_u8(&raw).unwrap(), v);
        assert_eq!(read_image_f32(&raw).unwrap(), v.mapv(f32::from));
        assert_eq!(read_labels(&seg).unwrap(), ids);
        assert_eq!(dataset_dtype(&seg).unwrap(), "uint64");
        assert_eq!(dataset_shape(&raw).unwrap(), [5, 70, 37]);
        let r = read_image_u8_region(&raw, [1, 60, 30], [3, 10, 7]).unwrap();
        assert_eq!(r, v.slice(s![1..4, 60..70, 30..37]));
        let e = read_labels_region(&seg, [4, 0, 0], [2, 1, 1])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("outside the dataset") && e.contains("[5, 70, 37]"),
            "{e}"
        );
        // Replacing one array keeps the other; the store's groups have metadata.
        let v2 = v.mapv(|x| x / 2);
        write_image_u8(&raw, &v2).unwrap();
        assert_eq!(read_image_u8(&raw).unwrap(), v2);
        assert_eq!(read_labels(&seg).unwrap(), ids);
        for group in ["zarr.json", "seg/zarr.json"] {
            let meta = std::fs::read_to_string(dir.path().join("v.zarr").join(group)).unwrap();
            assert!(meta.contains("\"node_type\": \"group\""), "{group}: {meta}");
        }
        let meta = std::fs::read_to_string(dir.path().join("v.zarr/raw/zarr.json")).unwrap();
        assert!(meta.contains("zstd") && meta.contains("\"z\""), "{meta}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("v.zarr"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        // f32 images and signed labels.
        let f = VolumeSpec::new(dir.path().join("v.zarr"), "prob");
        let p = ramp((2, 3, 4), |i| i as f32 / 3.0);
        write_image_f32(&f, &p).unwrap();
        assert_eq!(read_image_f32(&f).unwrap(), p);
        let e = read_image_u8(&f).unwrap_err().to_string();
        assert!(e.contains("v.zarr/prob") && e.contains("float32"), "{e}");
    }

    #[test]
    fn missing_stores_and_arrays_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_labels(&VolumeSpec::new(dir.path().join("no.zarr"), "seg"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no.zarr") && e.contains("not found"), "{e}");
        let raw = VolumeSpec::new(dir.path().join("v.zarr"), "raw");
        write_image_u8(&raw, &Array3::zeros((2, 2, 2))).unwrap();
        let e = read_labels(&VolumeSpec::new(dir.path().join("v.zarr"), "seg"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("v.zarr/seg") && e.contains("not a readable Zarr array"),
            "{e}"
        );
        // A root array: the store is the array.
        let root = VolumeSpec::new(dir.path().join("r.zarr"), "");
        let v = ramp((3, 3, 3), |i| i as u8);
        write_image_u8(&root, &v).unwrap();
        assert_eq!(
            read_image_u8(
                &"r.zarr"
                    .parse::<VolumeSpec>()
                    .map(|mut s| {
                        s.path = dir.path().join("r.zarr");
                        s
                    })
                    .unwrap()
            )
            .unwrap(),
            v
        );
    }
}
