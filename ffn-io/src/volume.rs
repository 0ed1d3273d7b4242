//! 3D volumes in HDF5 files, named `file.h5:dataset` as in google/ffn, in Zarr stores, named
//! `store.zarr/array` ([`crate::zarr_store`]), and Neuroglancer precomputed volumes, named
//! `precomputed://DIR[#SCALE]` or by a folder holding an `info` file ([`crate::precomputed`]).
//! Every function here takes any kind of [`VolumeSpec`], so every command reads and writes all
//! three.
//!
//! Axes are **z, y, x** on disk and in memory (`Array3` index `[z, y, x]`), the layout google/ffn and
//! the FlyEM data use. Images are `u8` or `f32`; labels may be stored as any signed or unsigned
//! integer type and are read as `u64` (a negative id is an error). Writes are chunked (32^3 or the
//! whole axis when smaller) and deflate-compressed; a dataset that already exists is replaced and the
//! other datasets of the file are kept. Sub-volumes are read as hyperslabs, without loading the rest
//! of the dataset.

use crate::error::{IoError, one_line};
use hdf5::types::{FloatSize, IntSize, TypeDescriptor};
use hdf5::{Dataset, File, H5Type};
use ndarray::{Array3, s};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Edge of the chunks of written datasets (per axis, capped by the axis length).
pub const CHUNK_EDGE: usize = 32;
/// Deflate level of written datasets.
pub const DEFLATE_LEVEL: u8 = 4;

/// How a volume is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VolumeFormat {
    /// A dataset of an HDF5 file: `file.h5:dataset`.
    Hdf5,
    /// An array of a Zarr (v3 or v2) folder store: `store.zarr/array`, or `store.zarr` for the
    /// array at the store's root.
    Zarr,
    /// A scale of a Neuroglancer precomputed volume: `precomputed://DIR` (its first scale),
    /// `precomputed://DIR#KEY`, or an existing folder with an `info` file
    /// ([`crate::precomputed`]).
    Precomputed,
}

/// A volume: a dataset inside an HDF5 file, written `file.h5:dataset` (the dataset may contain `/`
/// groups), or an array inside a Zarr store, written `store.zarr/array` (any path whose component
/// ends in `.zarr` names a store; what follows it is the array's path inside).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VolumeSpec {
    /// The HDF5 file, or the Zarr store's folder.
    pub path: PathBuf,
    /// The dataset inside it, e.g. `raw` or `volumes/labels` (empty: a Zarr store's root array);
    /// for a precomputed volume, the scale key (empty: the first scale).
    pub dataset: String,
    /// HDF5, Zarr or precomputed.
    pub format: VolumeFormat,
}

impl VolumeSpec {
    /// Whether both name the same dataset of the same file (paths compared after resolving
    /// links when the file exists, datasets without leading or trailing `/`).
    pub fn same_dataset(&self, other: &VolumeSpec) -> bool {
        let file = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        self.dataset.trim_matches('/') == other.dataset.trim_matches('/')
            && file(&self.path) == file(&other.path)
    }

    /// Fails unless the output `out` (of flag `out_flag`) is another dataset than the input
    /// `input` (of `in_flag`): writing the output would destroy the input.
    pub fn check_not_input(
        out: &VolumeSpec,
        out_flag: &str,
        input: &VolumeSpec,
        in_flag: &str,
    ) -> Result<(), IoError> {
        if out.same_dataset(input) {
            return Err(IoError::InvalidOption {
                field: out_flag.into(),
                expected: format!(
                    "another dataset than the input {in_flag} (writing it would replace the input)"
                ),
                found: out.to_string(),
            });
        }
        Ok(())
    }

    /// The scale `key` (empty: the first) of the precomputed volume in the folder `dir`.
    pub fn precomputed(dir: impl Into<PathBuf>, key: impl Into<String>) -> Self {
        Self {
            path: dir.into(),
            dataset: key.into().trim_matches('/').to_string(),
            format: VolumeFormat::Precomputed,
        }
    }

    /// A spec from its two parts: a Zarr array when `path` ends in `.zarr`, else an HDF5 dataset.
    pub fn new(path: impl Into<PathBuf>, dataset: impl Into<String>) -> Self {
        let path = path.into();
        let format = if is_zarr_store_name(&path.to_string_lossy()) {
            VolumeFormat::Zarr
        } else {
            VolumeFormat::Hdf5
        };
        Self {
            path,
            dataset: dataset.into().trim_matches('/').to_string(),
            format,
        }
    }
}

/// Whether a path component names a Zarr store (`name.zarr`, `name.ome.zarr`).
fn is_zarr_store_name(component: &str) -> bool {
    let c = component.trim_end_matches('/');
    c.len() > ".zarr".len() && c.to_ascii_lowercase().ends_with(".zarr")
}

impl fmt::Display for VolumeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.format {
            VolumeFormat::Hdf5 => write!(f, "{}:{}", self.path.display(), self.dataset),
            VolumeFormat::Zarr if self.dataset.is_empty() => write!(f, "{}", self.path.display()),
            VolumeFormat::Zarr => write!(f, "{}/{}", self.path.display(), self.dataset),
            VolumeFormat::Precomputed => {
                write!(
                    f,
                    "{}{}",
                    crate::precomputed::SPEC_PREFIX,
                    self.path.display()
                )?;
                if !self.dataset.is_empty() {
                    write!(f, "#{}", self.dataset)?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for VolumeSpec {
    type Err = IoError;

    /// Parses `precomputed://DIR[#KEY]`, `store.zarr/array` (the first path component ending in
    /// `.zarr` is the store), an existing folder holding a precomputed `info` file, or
    /// `file.h5:dataset` (the split is at the last `:`).
    fn from_str(s: &str) -> Result<Self, IoError> {
        let bad = |reason: &str| IoError::InvalidSpec {
            spec: s.to_string(),
            reason: reason.into(),
        };
        if let Some(rest) = s.strip_prefix(crate::precomputed::SPEC_PREFIX) {
            let (dir, key) = rest.split_once('#').unwrap_or((rest, ""));
            let dir = dir.strip_prefix("file://").unwrap_or(dir);
            if dir.is_empty() {
                return Err(bad("empty folder after precomputed://"));
            }
            return Ok(Self::precomputed(dir, key));
        }
        if Path::new(s).join("info").is_file() {
            return Ok(Self::precomputed(s, ""));
        }
        let mut store_end = 0;
        for part in s.split('/') {
            store_end += part.len();
            if is_zarr_store_name(part) {
                return Ok(Self::new(&s[..store_end], &s[store_end..]));
            }
            store_end += 1;
        }
        let (file, dataset) = s
            .rsplit_once(':')
            .ok_or_else(|| bad("no ':' between file and dataset"))?;
        let dataset = dataset.trim_matches('/');
        if file.is_empty() {
            return Err(bad("empty file name"));
        }
        if dataset.is_empty() {
            return Err(bad("empty dataset name"));
        }
        Ok(Self::new(file, dataset))
    }
}

/// The element type of a dataset, as a short name (`uint8`, `int32`, `float32`, ...).
fn dtype_name(d: &TypeDescriptor) -> String {
    let bits = |s: &IntSize| 8 * (*s as usize);
    match d {
        TypeDescriptor::Integer(s) => format!("int{}", bits(s)),
        TypeDescriptor::Unsigned(s) => format!("uint{}", bits(s)),
        TypeDescriptor::Float(FloatSize::U4) => "float32".into(),
        TypeDescriptor::Float(FloatSize::U8) => "float64".into(),
        other => format!("{other}"),
    }
}

/// The element types of volumes that ffn-rs reads and writes, whatever the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Element {
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F32,
    F64,
}

impl Element {
    /// The short name (`uint8`, `int64`, `float32`, ...).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Element::U8 => "uint8",
            Element::U16 => "uint16",
            Element::U32 => "uint32",
            Element::U64 => "uint64",
            Element::I8 => "int8",
            Element::I16 => "int16",
            Element::I32 => "int32",
            Element::I64 => "int64",
            Element::F32 => "float32",
            Element::F64 => "float64",
        }
    }

    /// The element type of an HDF5 type, or its name when ffn-rs does not read it.
    fn of_hdf5(d: &TypeDescriptor) -> Result<Element, String> {
        Ok(match d {
            TypeDescriptor::Unsigned(IntSize::U1) => Element::U8,
            TypeDescriptor::Unsigned(IntSize::U2) => Element::U16,
            TypeDescriptor::Unsigned(IntSize::U4) => Element::U32,
            TypeDescriptor::Unsigned(IntSize::U8) => Element::U64,
            TypeDescriptor::Integer(IntSize::U1) => Element::I8,
            TypeDescriptor::Integer(IntSize::U2) => Element::I16,
            TypeDescriptor::Integer(IntSize::U4) => Element::I32,
            TypeDescriptor::Integer(IntSize::U8) => Element::I64,
            TypeDescriptor::Float(FloatSize::U4) => Element::F32,
            TypeDescriptor::Float(FloatSize::U8) => Element::F64,
            other => return Err(dtype_name(other)),
        })
    }
}

/// A Rust type stored as one [`Element`] in every format.
pub(crate) trait Sample:
    H5Type + Clone + Copy + Default + zarrs::array::Element + zarrs::array::ElementOwned
{
    /// Its element type.
    const ELEMENT: Element;

    /// The value of its little-endian bytes (`size_of::<Self>()` of them).
    fn from_le_slice(bytes: &[u8]) -> Self;

    /// Appends its little-endian bytes.
    fn push_le(self, out: &mut Vec<u8>);
}

macro_rules! samples {
    ($($t:ty => $e:ident),*) => {
        $(impl Sample for $t {
            const ELEMENT: Element = Element::$e;

            fn from_le_slice(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().unwrap_or_default())
            }

            fn push_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        })*
    };
}
samples!(u8 => U8, u16 => U16, u32 => U32, u64 => U64, i8 => I8, i16 => I16, i32 => I32,
    i64 => I64, f32 => F32, f64 => F64);

/// An open volume of either format.
enum Opened {
    Hdf5(Dataset),
    Zarr(Box<crate::zarr_store::ZarrArray>),
    Precomputed(Box<crate::precomputed::PrecomputedVolume>),
}

impl Opened {
    /// Opens the volume of `spec`.
    fn open(spec: &VolumeSpec) -> Result<Self, IoError> {
        Ok(match spec.format {
            VolumeFormat::Hdf5 => Opened::Hdf5(open_dataset(spec)?),
            VolumeFormat::Zarr => Opened::Zarr(Box::new(crate::zarr_store::open(spec)?)),
            VolumeFormat::Precomputed => Opened::Precomputed(Box::new(
                crate::precomputed::PrecomputedVolume::open_spec(spec)?,
            )),
        })
    }

    /// The shape, z,y,x; another rank is an error.
    fn shape(&self, spec: &VolumeSpec) -> Result<[usize; 3], IoError> {
        match self {
            Opened::Hdf5(ds) => check_rank3(spec, &ds.shape()),
            Opened::Zarr(a) => check_rank3(spec, &a.shape()),
            Opened::Precomputed(v) => Ok(v.info().shape_zyx),
        }
    }

    /// The element type, or the name of a type ffn-rs does not read.
    fn element(&self, spec: &VolumeSpec) -> Result<Result<Element, String>, IoError> {
        Ok(match self {
            Opened::Hdf5(ds) => Element::of_hdf5(&element_type(spec, ds)?),
            Opened::Zarr(a) => a.element(),
            Opened::Precomputed(v) => Ok(v.element()),
        })
    }

    /// Reads the whole volume or a region of it as `T` (the volume's own element type), checking
    /// the region's bounds and the memory it needs first.
    fn read<T: Sample>(&self, spec: &VolumeSpec, region: Region) -> Result<Array3<T>, IoError> {
        let full = self.shape(spec)?;
        let (o, n) = region.unwrap_or(([0; 3], full));
        check_inside(spec, full, o, n)?;
        let bytes = crate::memory::bytes_of(&n, std::mem::size_of::<T>());
        crate::memory::check_allocation(&format!("reading {n:?} (z,y,x) voxels"), bytes).map_err(
            |reason| IoError::TooLarge {
                spec: spec.to_string(),
                reason,
            },
        )?;
        if n.contains(&0) {
            return Ok(Array3::default((n[0], n[1], n[2])));
        }
        match self {
            Opened::Hdf5(ds) => ds
                .read_slice::<T, _, ndarray::Ix3>(s![
                    o[0]..o[0] + n[0],
                    o[1]..o[1] + n[1],
                    o[2]..o[2] + n[2]
                ])
                .map_err(|e| hdf5_err(spec, e)),
            Opened::Zarr(a) => a.read::<T>(spec, o, n),
            Opened::Precomputed(v) => v.read::<T>(o, n),
        }
    }
}

pub(crate) fn hdf5_err(spec: &dyn fmt::Display, e: hdf5::Error) -> IoError {
    IoError::Hdf5 {
        spec: spec.to_string(),
        detail: one_line(&e.to_string()),
    }
}

/// Opens an HDF5 file for reading, with a clear error for a missing or non-HDF5 file.
pub fn open_file(path: &Path) -> Result<File, IoError> {
    std::fs::metadata(path).map_err(|e| IoError::os(path, e))?;
    File::open(path).map_err(|e| IoError::NotHdf5 {
        path: path.into(),
        detail: one_line(&e.to_string()),
    })
}

/// Names of every dataset in the file (recursively, `group/name`), sorted.
pub fn list_datasets(path: &Path) -> Result<Vec<String>, IoError> {
    let file = open_file(path)?;
    let mut out = Vec::new();
    collect_datasets(&file, "", &mut out, path)?;
    out.sort();
    Ok(out)
}

fn collect_datasets(
    group: &hdf5::Group,
    prefix: &str,
    out: &mut Vec<String>,
    path: &Path,
) -> Result<(), IoError> {
    let names = group
        .member_names()
        .map_err(|e| hdf5_err(&path.display(), e))?;
    for name in names {
        let full = format!("{prefix}{name}");
        if group.dataset(&name).is_ok() {
            out.push(full);
        } else if let Ok(sub) = group.group(&name) {
            collect_datasets(&sub, &format!("{full}/"), out, path)?;
        }
    }
    Ok(())
}

/// Opens the dataset of `spec`; a missing one is reported with the list of datasets that exist.
pub fn open_dataset(spec: &VolumeSpec) -> Result<Dataset, IoError> {
    let file = open_file(&spec.path)?;
    match file.dataset(&spec.dataset) {
        Ok(ds) => Ok(ds),
        Err(_) => {
            let mut names = Vec::new();
            collect_datasets(&file, "", &mut names, &spec.path)?;
            names.sort();
            let available = if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            };
            Err(IoError::MissingDataset {
                path: spec.path.clone(),
                dataset: spec.dataset.clone(),
                available,
            })
        }
    }
}

fn element_type(spec: &VolumeSpec, ds: &Dataset) -> Result<TypeDescriptor, IoError> {
    ds.dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| hdf5_err(spec, e))
}

fn check_rank3(spec: &VolumeSpec, shape: &[usize]) -> Result<[usize; 3], IoError> {
    match *shape {
        [z, y, x] => Ok([z, y, x]),
        _ => Err(IoError::WrongRank {
            spec: spec.to_string(),
            expected: 3,
            axes: "z,y,x".into(),
            found: shape.len(),
            shape: shape.to_vec(),
        }),
    }
}

/// The z slabs `(first slice, slices)` that cover a volume of `shape`, each of at most
/// `max_voxels` voxels (at least one slice): for reading a volume piece by piece.
pub fn z_slabs(shape: [usize; 3], max_voxels: usize) -> impl Iterator<Item = (usize, usize)> {
    let plane = (shape[1] * shape[2]).max(1);
    let slab = (max_voxels / plane).clamp(1, shape[0].max(1));
    (0..shape[0])
        .step_by(slab)
        .map(move |z| (z, slab.min(shape[0] - z)))
}

/// Shape `[z, y, x]` of a 3D volume, without reading it.
pub fn dataset_shape(spec: &VolumeSpec) -> Result<[usize; 3], IoError> {
    Opened::open(spec)?.shape(spec)
}

/// Element type of a volume as a short name (`uint8`, `int64`, `float32`, ...).
pub fn dataset_dtype(spec: &VolumeSpec) -> Result<String, IoError> {
    Ok(match Opened::open(spec)?.element(spec)? {
        Ok(e) => e.name().to_string(),
        Err(other) => other,
    })
}

/// Fails with [`IoError::ShapeMismatch`] unless the two volumes have one shape (e.g. image and labels).
pub fn check_same_shape(
    a: &VolumeSpec,
    a_shape: &[usize],
    b: &VolumeSpec,
    b_shape: &[usize],
) -> Result<(), IoError> {
    if a_shape == b_shape {
        Ok(())
    } else {
        Err(IoError::ShapeMismatch {
            a: a.to_string(),
            a_shape: a_shape.to_vec(),
            b: b.to_string(),
            b_shape: b_shape.to_vec(),
        })
    }
}

/// Fails with [`IoError::RegionOutOfBounds`] unless the box `offset .. offset + shape` lies inside
/// a volume of shape `volume` (all `[z, y, x]`): the one bounds check of region reads and writes.
pub(crate) fn check_inside(
    spec: &VolumeSpec,
    volume: [usize; 3],
    offset: [usize; 3],
    shape: [usize; 3],
) -> Result<(), IoError> {
    let fits = (0..3).all(|a| {
        offset[a]
            .checked_add(shape[a])
            .is_some_and(|end| end <= volume[a])
    });
    if fits {
        Ok(())
    } else {
        Err(IoError::RegionOutOfBounds {
            spec: spec.to_string(),
            offset,
            shape,
            dataset_shape: volume.to_vec(),
        })
    }
}

/// A sub-volume request: `None` means the whole dataset.
type Region = Option<([usize; 3], [usize; 3])>;

fn check_finite<T: Copy + Into<f64>>(spec: &VolumeSpec, v: &Array3<T>) -> Result<(), IoError> {
    for ((z, y, x), &value) in v.indexed_iter() {
        let value: f64 = value.into();
        if !value.is_finite() {
            return Err(IoError::NonFinite {
                spec: spec.to_string(),
                index: [z, y, x],
                value,
            });
        }
    }
    Ok(())
}

fn wrong_type(spec: &VolumeSpec, expected: &str, found: Result<Element, String>) -> IoError {
    IoError::WrongDtype {
        spec: spec.to_string(),
        expected: expected.into(),
        found: match found {
            Ok(e) => e.name().to_string(),
            Err(name) => name,
        },
    }
}

fn read_image_f32_impl(spec: &VolumeSpec, region: Region) -> Result<Array3<f32>, IoError> {
    let v = Opened::open(spec)?;
    v.shape(spec)?;
    match v.element(spec)? {
        Ok(Element::U8) => Ok(v.read::<u8>(spec, region)?.mapv(f32::from)),
        Ok(Element::U16) => Ok(v.read::<u16>(spec, region)?.mapv(f32::from)),
        Ok(Element::F32) => {
            let a = v.read::<f32>(spec, region)?;
            check_finite(spec, &a)?;
            Ok(a)
        }
        Ok(Element::F64) => {
            let a = v.read::<f64>(spec, region)?;
            check_finite(spec, &a)?;
            Ok(a.mapv(|x| x as f32))
        }
        other => Err(wrong_type(
            spec,
            "an image of uint8, uint16, float32 or float64",
            other,
        )),
    }
}

/// Reads a 3D image (`uint8`, `float32` or `float64` on disk) as `f32`, axes z,y,x. Values are not
/// rescaled (a `uint8` 200 becomes 200.0). NaN or infinity is an error.
pub fn read_image_f32(spec: &VolumeSpec) -> Result<Array3<f32>, IoError> {
    read_image_f32_impl(spec, None)
}

/// Reads the sub-volume `offset_zyx .. offset_zyx + shape_zyx` of a 3D image as `f32` (a hyperslab:
/// only that part is read from disk). Same types and checks as [`read_image_f32`].
pub fn read_image_f32_region(
    spec: &VolumeSpec,
    offset_zyx: [usize; 3],
    shape_zyx: [usize; 3],
) -> Result<Array3<f32>, IoError> {
    read_image_f32_impl(spec, Some((offset_zyx, shape_zyx)))
}

fn read_image_u8_impl(spec: &VolumeSpec, region: Region) -> Result<Array3<u8>, IoError> {
    let v = Opened::open(spec)?;
    v.shape(spec)?;
    match v.element(spec)? {
        Ok(Element::U8) => v.read::<u8>(spec, region),
        other => Err(wrong_type(spec, "an image of uint8", other)),
    }
}

/// Reads a 3D `uint8` image, axes z,y,x.
pub fn read_image_u8(spec: &VolumeSpec) -> Result<Array3<u8>, IoError> {
    read_image_u8_impl(spec, None)
}

/// Reads a sub-volume of a 3D `uint8` image (hyperslab).
pub fn read_image_u8_region(
    spec: &VolumeSpec,
    offset_zyx: [usize; 3],
    shape_zyx: [usize; 3],
) -> Result<Array3<u8>, IoError> {
    read_image_u8_impl(spec, Some((offset_zyx, shape_zyx)))
}

fn unsigned_to_u64<T: Sample + Into<u64>>(
    spec: &VolumeSpec,
    v: &Opened,
    region: Region,
) -> Result<Array3<u64>, IoError> {
    Ok(v.read::<T>(spec, region)?.mapv(Into::into))
}

fn signed_to_u64<T: Sample + Into<i64>>(
    spec: &VolumeSpec,
    v: &Opened,
    region: Region,
) -> Result<Array3<u64>, IoError> {
    let a = v.read::<T>(spec, region)?;
    if let Some(((z, y, x), &value)) = a.indexed_iter().find(|(_, value)| (**value).into() < 0) {
        return Err(IoError::NegativeLabel {
            spec: spec.to_string(),
            index: vec![z, y, x],
            value: value.into(),
        });
    }
    Ok(a.mapv(|value| value.into() as u64))
}

fn read_labels_impl(spec: &VolumeSpec, region: Region) -> Result<Array3<u64>, IoError> {
    let v = Opened::open(spec)?;
    v.shape(spec)?;
    match v.element(spec)? {
        Ok(Element::U8) => unsigned_to_u64::<u8>(spec, &v, region),
        Ok(Element::U16) => unsigned_to_u64::<u16>(spec, &v, region),
        Ok(Element::U32) => unsigned_to_u64::<u32>(spec, &v, region),
        Ok(Element::U64) => unsigned_to_u64::<u64>(spec, &v, region),
        Ok(Element::I8) => signed_to_u64::<i8>(spec, &v, region),
        Ok(Element::I16) => signed_to_u64::<i16>(spec, &v, region),
        Ok(Element::I32) => signed_to_u64::<i32>(spec, &v, region),
        Ok(Element::I64) => signed_to_u64::<i64>(spec, &v, region),
        other => Err(wrong_type(
            spec,
            "labels of an integer type (uint8..uint64, int8..int64)",
            other,
        )),
    }
}

/// Reads a 3D label volume of any integer type as `u64`, axes z,y,x. Negative ids are an error.
pub fn read_labels(spec: &VolumeSpec) -> Result<Array3<u64>, IoError> {
    read_labels_impl(spec, None)
}

/// Reads a sub-volume of a 3D label volume (hyperslab); same types and checks as [`read_labels`].
pub fn read_labels_region(
    spec: &VolumeSpec,
    offset_zyx: [usize; 3],
    shape_zyx: [usize; 3],
) -> Result<Array3<u64>, IoError> {
    read_labels_impl(spec, Some((offset_zyx, shape_zyx)))
}

/// Opens the HDF5 file `tmp` for writing the dataset of `spec`: a copy of the existing file of
/// `spec` (so that its other datasets are carried over) or a new file. Removes an existing dataset
/// of that name and creates the groups on its path. Returns the file and the group that will hold
/// the dataset.
pub(crate) fn prepare_write(
    spec: &VolumeSpec,
    tmp: &Path,
) -> Result<(File, hdf5::Group, String), IoError> {
    let path = &spec.path;
    let file = if path.exists() {
        // Refuse a file that is not HDF5 before copying it.
        drop(File::open(path).map_err(|e| IoError::NotHdf5 {
            path: path.clone(),
            detail: one_line(&e.to_string()),
        })?);
        std::fs::copy(path, tmp).map_err(|e| IoError::os(tmp, e))?;
        File::open_rw(tmp).map_err(|e| hdf5_err(&tmp.display(), e))?
    } else {
        File::create(tmp).map_err(|e| hdf5_err(&tmp.display(), e))?
    };
    let parts: Vec<&str> = spec.dataset.split('/').filter(|p| !p.is_empty()).collect();
    let (leaf, groups) = parts.split_last().ok_or_else(|| IoError::InvalidSpec {
        spec: spec.to_string(),
        reason: "empty dataset name".into(),
    })?;
    let mut group: hdf5::Group = (*file).clone();
    for g in groups {
        group = if group.link_exists(g) {
            group.group(g).map_err(|e| hdf5_err(spec, e))?
        } else {
            group.create_group(g).map_err(|e| hdf5_err(spec, e))?
        };
    }
    if group.link_exists(leaf) {
        group.unlink(leaf).map_err(|e| hdf5_err(spec, e))?;
    }
    Ok((file, group, (*leaf).to_string()))
}

/// Writes the dataset of `spec` without endangering the file's other datasets: the new contents
/// are written into a copy of the file (or a new file) under a temporary name, which replaces the
/// file only when complete ([`crate::atomic::replace_file`]). A failure (full disk, file-size
/// limit, kill) leaves the old file as it was.
fn write_typed<T: Sample>(spec: &VolumeSpec, v: &Array3<T>) -> Result<(), IoError> {
    match spec.format {
        VolumeFormat::Hdf5 => {
            crate::atomic::replace_file(&spec.path, |tmp| write_typed_into(spec, tmp, v))
        }
        VolumeFormat::Zarr => crate::zarr_store::write(spec, v),
        VolumeFormat::Precomputed => {
            crate::precomputed::write(spec, v, crate::precomputed::LayerType::Image)
        }
    }
}

fn write_typed_into<T: H5Type + Clone>(
    spec: &VolumeSpec,
    tmp: &Path,
    v: &Array3<T>,
) -> Result<(), IoError> {
    let sh = v.shape();
    let view = v.as_standard_layout();
    create_hdf5_dataset::<T>(spec, tmp, [sh[0], sh[1], sh[2]], |ds| {
        ds.write(&view).map_err(|e| hdf5_err(spec, e))
    })
}

/// Creates the dataset of `spec` in the HDF5 file `tmp` (see [`prepare_write`]): `T` elements,
/// `shape`, chunks of [`CHUNK_EDGE`]^3 (less along short axes), deflate; lets `fill` write it;
/// then flushes and closes the file, so that a failure to write (disk full) is an error.
pub(crate) fn create_hdf5_dataset<T: H5Type>(
    spec: &VolumeSpec,
    tmp: &Path,
    shape: [usize; 3],
    fill: impl FnOnce(&Dataset) -> Result<(), IoError>,
) -> Result<(), IoError> {
    let (file, group, leaf) = prepare_write(spec, tmp)?;
    let ds = group
        .new_dataset_builder()
        .empty::<T>()
        .shape(shape)
        .chunk(shape.map(|n| n.clamp(1, CHUNK_EDGE)))
        .deflate(DEFLATE_LEVEL)
        .create(leaf.as_str())
        .map_err(|e| hdf5_err(spec, e))?;
    fill(&ds)?;
    drop(ds);
    drop(group);
    // Closing writes the cached metadata: its failure (disk full) must not pass unnoticed.
    file.flush().map_err(|e| hdf5_err(spec, e))?;
    file.close().map_err(|e| hdf5_err(spec, e))
}

/// Writes a 3D `uint8` image (z,y,x), chunked and deflate-compressed, replacing a dataset of that name.
pub fn write_image_u8(spec: &VolumeSpec, v: &Array3<u8>) -> Result<(), IoError> {
    write_typed(spec, v)
}

/// Writes a 3D `float32` image (z,y,x); NaN or infinity is refused.
pub fn write_image_f32(spec: &VolumeSpec, v: &Array3<f32>) -> Result<(), IoError> {
    check_finite(spec, v)?;
    write_typed(spec, v)
}

/// Writes a 3D label volume (z,y,x) as the smallest unsigned type that holds its largest id (for
/// precomputed: a segmentation layer, uint32 or uint64, compressed_segmentation).
pub fn write_labels(spec: &VolumeSpec, v: &Array3<u64>) -> Result<(), IoError> {
    write_label_ids(spec, v)
}

/// [`write_labels`] for 32-bit ids (the ids of flood-fill inference), written without widening
/// them to 64 bits first.
pub fn write_labels_u32(spec: &VolumeSpec, v: &Array3<u32>) -> Result<(), IoError> {
    write_label_ids(spec, v)
}

/// Writes `v` as the smallest label element type its ids need (uint32 at least for precomputed):
/// `v` itself when that is its own type, else a narrowed or widened copy.
fn write_label_ids<T: Sample + Into<u64>>(spec: &VolumeSpec, v: &Array3<T>) -> Result<(), IoError> {
    let max = v.iter().map(|&x| x.into()).max().unwrap_or(0);
    let precomputed = spec.format == VolumeFormat::Precomputed;
    let element = match label_element(max) {
        Element::U8 | Element::U16 if precomputed => Element::U32,
        e => e,
    };
    if element == T::ELEMENT {
        return write_label_volume(spec, v);
    }
    let id = |x: &T| -> u64 { (*x).into() };
    match element {
        Element::U8 => write_label_volume(spec, &v.map(|x| id(x) as u8)),
        Element::U16 => write_label_volume(spec, &v.map(|x| id(x) as u16)),
        Element::U32 => write_label_volume(spec, &v.map(|x| id(x) as u32)),
        _ => write_label_volume(spec, &v.map(id)),
    }
}

/// Writes the ids `v` in their own element type: a segmentation layer for precomputed.
fn write_label_volume<T: Sample>(spec: &VolumeSpec, v: &Array3<T>) -> Result<(), IoError> {
    if spec.format == VolumeFormat::Precomputed {
        crate::precomputed::write(spec, v, crate::precomputed::LayerType::Segmentation)
    } else {
        write_typed(spec, v)
    }
}

/// The smallest unsigned element type that holds every id up to `max_id`.
pub(crate) fn label_element(max_id: u64) -> Element {
    if max_id <= u64::from(u8::MAX) {
        Element::U8
    } else if max_id <= u64::from(u16::MAX) {
        Element::U16
    } else if max_id <= u64::from(u32::MAX) {
        Element::U32
    } else {
        Element::U64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> (tempfile::TempDir, VolumeSpec) {
        let dir = tempfile::tempdir().unwrap();
        let spec = VolumeSpec::new(dir.path().join("v.h5"), name);
        (dir, spec)
    }

    fn ramp<T>(shape: (usize, usize, usize), f: impl Fn(usize) -> T) -> Array3<T> {
        let n = shape.0 * shape.1 * shape.2;
        Array3::from_shape_vec(shape, (0..n).map(f).collect()).unwrap()
    }

    #[test]
    fn spec_parses_and_displays() {
        let s: VolumeSpec = "/a/b.h5:raw".parse().unwrap();
        assert_eq!(s, VolumeSpec::new("/a/b.h5", "raw"));
        assert_eq!(s.to_string(), "/a/b.h5:raw");
        let g: VolumeSpec = "x.h5:/grp/ds".parse().unwrap();
        assert_eq!(g.dataset, "grp/ds");
        for bad in ["x.h5", "x.h5:", ":raw"] {
            let e = bad.parse::<VolumeSpec>().unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("FILE:DATASET"), "{e}");
        }
    }

    #[test]
    fn u8_f32_round_trip_and_regions() {
        let (_d, spec) = tmp("raw");
        let v = ramp((5, 40, 37), |i| (i % 251) as u8);
        write_image_u8(&spec, &v).unwrap();
        assert_eq!(read_image_u8(&spec).unwrap(), v);
        assert_eq!(read_image_f32(&spec).unwrap(), v.mapv(f32::from));
        let r = read_image_f32_region(&spec, [1, 3, 30], [2, 35, 7]).unwrap();
        assert_eq!(r, v.slice(s![1..3, 3..38, 30..37]).mapv(f32::from));
        assert_eq!(
            read_image_u8_region(&spec, [4, 0, 0], [1, 40, 37]).unwrap(),
            v.slice(s![4..5, .., ..])
        );
        assert_eq!(
            read_image_u8_region(&spec, [0, 0, 0], [0, 2, 2])
                .unwrap()
                .len(),
            0
        );
        let e = read_image_f32_region(&spec, [4, 0, 0], [2, 1, 1])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("outside the dataset") && e.contains("[5, 40, 37]"),
            "{e}"
        );
        // second dataset in the same file, f32, and the first one survives
        let f = VolumeSpec::new(&spec.path, "grp/norm");
        let w = ramp((3, 2, 70), |i| i as f32 * 0.5 - 3.0);
        write_image_f32(&f, &w).unwrap();
        assert_eq!(read_image_f32(&f).unwrap(), w);
        assert_eq!(read_image_u8(&spec).unwrap(), v);
        assert_eq!(list_datasets(&spec.path).unwrap(), ["grp/norm", "raw"]);
        assert_eq!(dataset_shape(&f).unwrap(), [3, 2, 70]);
        // replacing a dataset with another shape and type
        write_image_f32(&spec, &w).unwrap();
        assert_eq!(read_image_f32(&spec).unwrap(), w);
        assert_eq!(dataset_dtype(&spec).unwrap(), "float32");
    }

    #[test]
    fn written_datasets_are_chunked_and_compressed() {
        let (_d, spec) = tmp("raw");
        write_image_u8(&spec, &Array3::zeros((64, 64, 10))).unwrap();
        let ds = open_dataset(&spec).unwrap();
        assert_eq!(ds.chunk(), Some(vec![32, 32, 10]));
        assert!(
            ds.filters()
                .iter()
                .any(|f| matches!(f, hdf5::filters::Filter::Deflate(_)))
        );
        assert!(
            ds.storage_size() < 64 * 64 * 10 / 10,
            "zeros compress: {}",
            ds.storage_size()
        );
    }

    #[test]
    fn labels_use_smallest_type_and_round_trip() {
        let (_d, spec) = tmp("labels");
        for (max, name) in [
            (200u64, "uint8"),
            (60_000, "uint16"),
            (70_000, "uint32"),
            (u64::MAX - 1, "uint64"),
        ] {
            let v = ramp((2, 3, 4), |i| if i == 23 { max } else { i as u64 });
            write_labels(&spec, &v).unwrap();
            assert_eq!(dataset_dtype(&spec).unwrap(), name);
            assert_eq!(read_labels(&spec).unwrap(), v);
            assert_eq!(
                read_labels_region(&spec, [1, 2, 3], [1, 1, 1]).unwrap()[[0, 0, 0]],
                max
            );
        }
    }

    #[test]
    fn u32_labels_use_smallest_type_and_round_trip() {
        let (d, spec) = tmp("labels");
        for (max, name) in [
            (200u32, "uint8"),
            (60_000, "uint16"),
            (u32::MAX - 1, "uint32"),
        ] {
            let v = ramp((2, 3, 4), |i| if i == 23 { max } else { i as u32 });
            write_labels_u32(&spec, &v).unwrap();
            assert_eq!(dataset_dtype(&spec).unwrap(), name);
            assert_eq!(read_labels(&spec).unwrap(), v.mapv(u64::from));
        }
        // Precomputed segmentation layers hold uint32 at least.
        let pre = VolumeSpec::precomputed(d.path().join("pre"), "8_8_8");
        let v = ramp((2, 3, 4), |i| i as u32);
        write_labels_u32(&pre, &v).unwrap();
        assert_eq!(dataset_dtype(&pre).unwrap(), "uint32");
        assert_eq!(read_labels(&pre).unwrap(), v.mapv(u64::from));
    }

    #[test]
    fn signed_labels_are_accepted_and_negatives_refused() {
        let (_d, spec) = tmp("seg");
        let file = File::create(&spec.path).unwrap();
        let v = ramp((2, 2, 3), |i| i as i32 * 1000);
        file.new_dataset_builder()
            .with_data(&v)
            .create("seg")
            .unwrap();
        let mut n = v.mapv(i64::from);
        n[[1, 0, 2]] = -7;
        file.new_dataset_builder()
            .with_data(&n)
            .create("neg")
            .unwrap();
        let small = ramp((1, 1, 2), |i| i as i8);
        file.new_dataset_builder()
            .with_data(&small)
            .create("i8")
            .unwrap();
        drop(file);
        assert_eq!(read_labels(&spec).unwrap(), v.mapv(|x| x as u64));
        assert_eq!(
            read_labels(&VolumeSpec::new(&spec.path, "i8")).unwrap(),
            small.mapv(|x| x as u64)
        );
        let e = read_labels(&VolumeSpec::new(&spec.path, "neg"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(":neg") && e.contains("negative label -7 at [1, 0, 2]"),
            "{e}"
        );
    }

    #[test]
    fn shape_check_names_both_volumes() {
        let a = VolumeSpec::new("a.h5", "raw");
        let b = VolumeSpec::new("b.h5", "labels");
        assert!(check_same_shape(&a, &[1, 2, 3], &b, &[1, 2, 3]).is_ok());
        let e = check_same_shape(&a, &[1, 2, 3], &b, &[1, 2, 4])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a.h5:raw") && e.contains("b.h5:labels") && e.contains("[1, 2, 4]"),
            "{e}"
        );
    }

    #[test]
    fn f32_writer_refuses_nan() {
        let (_d, spec) = tmp("x");
        let mut v = Array3::<f32>::zeros((2, 2, 2));
        v[[1, 1, 0]] = f32::NAN;
        let e = write_image_f32(&spec, &v).unwrap_err().to_string();
        assert!(
            e.contains("non-finite value NaN at (z,y,x) = [1, 1, 0]"),
            "{e}"
        );
    }

    #[test]
    fn a_tiny_file_declaring_a_huge_volume_is_refused_before_allocating() {
        let (_d, spec) = tmp("huge");
        let file = File::create(&spec.path).unwrap();
        let side = 1usize << 20;
        file.new_dataset::<u64>()
            .chunk((64, 64, 64))
            .shape((side, side, side))
            .create("huge")
            .unwrap();
        drop(file);
        assert!(std::fs::metadata(&spec.path).unwrap().len() < 100_000);
        let e = read_labels(&spec).unwrap_err().to_string();
        assert!(
            e.contains("v.h5:huge") && e.contains("physical memory"),
            "{e}"
        );
        let e = read_labels_region(&spec, [0, 0, 0], [side, side, 1]).unwrap_err();
        assert!(e.to_string().contains("physical memory"), "{e}");
    }
}
