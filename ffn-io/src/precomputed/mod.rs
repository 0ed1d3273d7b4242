//! Neuroglancer "precomputed" volumes on disk, read and written: an `info` JSON file and one
//! folder of chunk files per scale, which any static file server can serve to Neuroglancer
//! (`precomputed://http://host/path`) and which CloudVolume and TensorStore open.
//!
//! ```text
//! DIR/info                      {"@type": "neuroglancer_multiscale_volume", "type": "image"|"segmentation",
//!                                "data_type": ..., "num_channels": 1, "scales": [{"key": "8_8_8",
//!                                "size": [x, y, z], "resolution": [..], "voxel_offset": [x, y, z],
//!                                "chunk_sizes": [[64, 64, 64]], "encoding": "raw"|"compressed_segmentation",
//!                                "compressed_segmentation_block_size": [8, 8, 8]}, ...]}
//! DIR/8_8_8/x0-x1_y0-y1_z0-z1   one chunk (absolute voxel coordinates, cut at the volume's edges)
//! ```
//!
//! - **Read**: every scale (chosen by key; the first by default), `voxel_offset`, data types
//!   `uint8`, `uint16`, `uint32`, `uint64` and `float32`, encodings `raw` (little-endian, x
//!   fastest) and `compressed_segmentation` ([`compressed_segmentation`], uint32 and uint64), chunk
//!   files gzip-compressed or not (`NAME` or `NAME.gz`, as CloudVolume writes them). A missing
//!   chunk reads as zeros, as in Neuroglancer and TensorStore. Sharded scales and more than one
//!   channel are refused with an error naming the field.
//! - **Write**: one scale, chunks of 64^3 (capped by the volume), resolution 8 nm unless given;
//!   images `raw`, segmentations `compressed_segmentation` with 8^3 blocks (uint32 when the ids
//!   fit, else uint64). A volume is written into a temporary folder and renamed into place when
//!   complete; boxes may be written in any order ([`PrecomputedVolume::write_region`]).
//!
//! Neuroglancer's axes are **x, y, z** (sizes, chunk sizes, resolutions in nanometres); ffn-rs
//! arrays are z, y, x, and the types here hold them that way (`_zyx`).
//!
//! Volume specs: `precomputed://DIR` (the first scale), `precomputed://DIR#KEY` (the scale `KEY`),
//! or an existing folder holding an `info` file; see [`crate::volume::VolumeSpec`].

mod chunk;
pub mod compressed_segmentation;
mod store;

pub use store::PrecomputedVolume;
pub(crate) use store::{create_and_fill, write};

use crate::error::IoError;
use crate::volume::Element;
use serde_json::{Value, json};
use std::path::Path;

/// The prefix of precomputed volume specs.
pub const SPEC_PREFIX: &str = "precomputed://";
/// Edge of the chunks of written volumes (per axis, capped by the axis length).
pub const WRITE_CHUNK_EDGE: usize = 64;
/// Block edge of written `compressed_segmentation` chunks.
pub const WRITE_BLOCK_EDGE: usize = 8;
/// Voxel size of written volumes, nanometres, when none is given (FIB-25's 8 nm).
pub const DEFAULT_RESOLUTION_NM: f64 = 8.0;
/// Most voxels one chunk may have (a larger chunk in an `info` file is refused before anything is
/// allocated).
pub const MAX_CHUNK_VOXELS: usize = 1 << 27;

/// Image or segmentation layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerType {
    /// Grey values.
    Image,
    /// Segment ids.
    Segmentation,
}

impl LayerType {
    fn name(self) -> &'static str {
        match self {
            LayerType::Image => "image",
            LayerType::Segmentation => "segmentation",
        }
    }
}

/// Element type of the chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    /// `uint8` (images).
    Uint8,
    /// `uint16`.
    Uint16,
    /// `uint32` (segmentations whose ids fit).
    Uint32,
    /// `uint64` (segmentations).
    Uint64,
    /// `float32` (images, probability maps).
    Float32,
}

const DATA_TYPES: [DataType; 5] = [
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
    DataType::Float32,
];

impl DataType {
    /// The name used in the `info` file.
    pub fn name(self) -> &'static str {
        self.element().name()
    }

    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            DataType::Uint8 => 1,
            DataType::Uint16 => 2,
            DataType::Uint32 | DataType::Float32 => 4,
            DataType::Uint64 => 8,
        }
    }

    /// The ffn-io element type.
    pub(crate) fn element(self) -> Element {
        match self {
            DataType::Uint8 => Element::U8,
            DataType::Uint16 => Element::U16,
            DataType::Uint32 => Element::U32,
            DataType::Uint64 => Element::U64,
            DataType::Float32 => Element::F32,
        }
    }

    /// The data type of an element type, if precomputed has one.
    pub(crate) fn of_element(e: Element) -> Option<Self> {
        DATA_TYPES.into_iter().find(|d| d.element() == e)
    }

    fn parse(s: &str) -> Option<Self> {
        DATA_TYPES.into_iter().find(|d| d.name() == s)
    }
}

/// How the values of a chunk are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Little-endian values, x fastest.
    Raw,
    /// Neuroglancer's label compression ([`compressed_segmentation`]) with this block size
    /// `[z, y, x]`.
    CompressedSegmentation {
        /// Block size `[z, y, x]`.
        block_zyx: [usize; 3],
    },
}

/// One scale of a precomputed volume, with the layer's type and data type. Shapes are `[z, y, x]`.
#[derive(Clone, Debug, PartialEq)]
pub struct PrecomputedInfo {
    /// Image or segmentation.
    pub layer: LayerType,
    /// Element type.
    pub data_type: DataType,
    /// The scale's key: the folder of its chunks.
    pub key: String,
    /// Volume shape `[z, y, x]`.
    pub shape_zyx: [usize; 3],
    /// Chunk shape `[z, y, x]`.
    pub chunk_zyx: [usize; 3],
    /// Voxel size in nanometres `[z, y, x]`.
    pub resolution_zyx: [f64; 3],
    /// Coordinates of the volume's first voxel `[z, y, x]` (chunk names are in these coordinates).
    pub voxel_offset_zyx: [i64; 3],
    /// Chunk encoding.
    pub encoding: Encoding,
}

impl PrecomputedInfo {
    /// A one-scale description as ffn-io writes it: chunks of `chunk_zyx`, key from the
    /// resolution, offset 0, `raw` for images and `compressed_segmentation` (8^3 blocks) for
    /// uint32 / uint64 segmentations.
    pub fn new(
        layer: LayerType,
        data_type: DataType,
        shape_zyx: [usize; 3],
        chunk_zyx: [usize; 3],
        resolution_zyx: [f64; 3],
    ) -> Self {
        let labels = layer == LayerType::Segmentation
            && matches!(data_type, DataType::Uint32 | DataType::Uint64);
        let encoding = if labels {
            Encoding::CompressedSegmentation {
                block_zyx: [WRITE_BLOCK_EDGE; 3],
            }
        } else {
            Encoding::Raw
        };
        let key = resolution_zyx
            .iter()
            .rev()
            .map(|v| fmt_num(*v))
            .collect::<Vec<_>>()
            .join("_");
        Self {
            layer,
            data_type,
            key,
            shape_zyx,
            chunk_zyx,
            resolution_zyx,
            voxel_offset_zyx: [0; 3],
            encoding,
        }
    }

    /// The default description of a volume of `shape_zyx` written by ffn-io.
    pub fn for_volume(layer: LayerType, data_type: DataType, shape_zyx: [usize; 3]) -> Self {
        Self::new(
            layer,
            data_type,
            shape_zyx,
            shape_zyx.map(|n| n.clamp(1, WRITE_CHUNK_EDGE)),
            [DEFAULT_RESOLUTION_NM; 3],
        )
    }

    /// The scale's key (the folder of its chunks).
    pub fn key(&self) -> String {
        self.key.clone()
    }

    /// The `info` document of a volume with this one scale.
    pub fn to_json(&self) -> Value {
        let xyz = |v: [usize; 3]| [v[2], v[1], v[0]];
        let (r, o) = (self.resolution_zyx, self.voxel_offset_zyx);
        let mut scale = json!({
            "key": self.key,
            "size": xyz(self.shape_zyx),
            "resolution": [r[2], r[1], r[0]],
            "voxel_offset": [o[2], o[1], o[0]],
            "chunk_sizes": [xyz(self.chunk_zyx)],
            "encoding": "raw",
        });
        if let Encoding::CompressedSegmentation { block_zyx } = self.encoding {
            scale["encoding"] = json!("compressed_segmentation");
            scale["compressed_segmentation_block_size"] = json!(xyz(block_zyx));
        }
        json!({
            "@type": "neuroglancer_multiscale_volume",
            "type": self.layer.name(),
            "data_type": self.data_type.name(),
            "num_channels": 1,
            "scales": [scale],
        })
    }

    /// The chunk grid: chunks per axis `[z, y, x]`.
    pub fn chunk_grid(&self) -> [usize; 3] {
        [0, 1, 2].map(|a| self.shape_zyx[a].div_ceil(self.chunk_zyx[a]))
    }

    /// The box `(lo, hi)` of chunk `c` (grid position `[z, y, x]`), in array coordinates.
    pub fn chunk_box(&self, c: [usize; 3]) -> ([usize; 3], [usize; 3]) {
        let lo = [0, 1, 2].map(|a| c[a] * self.chunk_zyx[a]);
        let hi = [0, 1, 2].map(|a| (lo[a] + self.chunk_zyx[a]).min(self.shape_zyx[a]));
        (lo, hi)
    }

    /// The file name of the chunk whose array box is `lo..hi`: `x0-x1_y0-y1_z0-z1` in voxel
    /// coordinates (the array box shifted by the voxel offset).
    pub fn chunk_name(&self, lo: [usize; 3], hi: [usize; 3]) -> String {
        let o = self.voxel_offset_zyx;
        let at = |a: usize, v: usize| v as i64 + o[a];
        format!(
            "{}-{}_{}-{}_{}-{}",
            at(2, lo[2]),
            at(2, hi[2]),
            at(1, lo[1]),
            at(1, hi[1]),
            at(0, lo[0]),
            at(0, hi[0])
        )
    }

    fn check(&self, path: &Path) -> Result<(), IoError> {
        let bad = |reason: String| {
            Err(IoError::Config {
                path: path.into(),
                reason,
            })
        };
        if self.shape_zyx.contains(&0) {
            return bad(format!(
                "scale {:?} size: expected every axis >= 1, found {:?} (z, y, x)",
                self.key, self.shape_zyx
            ));
        }
        let voxels = self
            .shape_zyx
            .iter()
            .try_fold(8usize, |n, &d| n.checked_mul(d))
            .filter(|&n| n <= isize::MAX as usize);
        if voxels.is_none() {
            return bad(format!(
                "scale {:?} size: {:?} (z, y, x) voxels cannot be addressed",
                self.key, self.shape_zyx
            ));
        }
        let chunk_voxels = self
            .chunk_zyx
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d));
        if self.chunk_zyx.contains(&0) || chunk_voxels.is_none_or(|n| n > MAX_CHUNK_VOXELS) {
            return bad(format!(
                "scale {:?} chunk_sizes: expected every axis >= 1 and at most {MAX_CHUNK_VOXELS} voxels per chunk, found {:?} (z, y, x)",
                self.key, self.chunk_zyx
            ));
        }
        if let Encoding::CompressedSegmentation { block_zyx } = self.encoding {
            if !matches!(self.data_type, DataType::Uint32 | DataType::Uint64) {
                return bad(format!(
                    "scale {:?}: compressed_segmentation needs uint32 or uint64, found {}",
                    self.key,
                    self.data_type.name()
                ));
            }
            if block_zyx.contains(&0) {
                return bad(format!(
                    "scale {:?} compressed_segmentation_block_size: expected every axis >= 1, found {block_zyx:?} (z, y, x)",
                    self.key
                ));
            }
        }
        if !self
            .resolution_zyx
            .iter()
            .all(|r| r.is_finite() && *r > 0.0)
        {
            return bad(format!(
                "scale {:?} resolution: expected positive nanometres, found {:?} (z, y, x)",
                self.key, self.resolution_zyx
            ));
        }
        if self.key.is_empty() || self.key.contains("..") || self.key.starts_with('/') {
            return bad(format!(
                "scale key: expected a relative folder name, found {:?}",
                self.key
            ));
        }
        Ok(())
    }
}

fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn field<'a>(v: &'a Value, key: &str, path: &Path) -> Result<&'a Value, IoError> {
    v.get(key).ok_or_else(|| IoError::Config {
        path: path.into(),
        reason: format!("missing field '{key}'"),
    })
}

/// Three numbers stored x, y, z, returned z, y, x.
fn triple<T>(
    v: &Value,
    key: &str,
    path: &Path,
    get: impl Fn(&Value) -> Option<T>,
) -> Result<[T; 3], IoError> {
    let bad = || IoError::Config {
        path: path.into(),
        reason: format!("field '{key}': expected 3 numbers, found {v}"),
    };
    let a = v.as_array().filter(|a| a.len() == 3).ok_or_else(bad)?;
    let x = get(&a[0]).ok_or_else(bad)?;
    let y = get(&a[1]).ok_or_else(bad)?;
    let z = get(&a[2]).ok_or_else(bad)?;
    Ok([z, y, x])
}

/// Reads `dir/info` and the scale `key` (the first scale for `None`); see [`parse_info`].
pub fn read_info(dir: &Path, key: Option<&str>) -> Result<PrecomputedInfo, IoError> {
    let path = dir.join("info");
    let text = std::fs::read_to_string(&path).map_err(|e| IoError::os(&path, e))?;
    parse_info(&text, &path, key)
}

/// Parses the text of an `info` file and picks the scale `key` (the first for `None`); `path`
/// names the file in errors. A missing scale is an error listing the keys there are.
pub fn parse_info(text: &str, path: &Path, key: Option<&str>) -> Result<PrecomputedInfo, IoError> {
    let v: Value = serde_json::from_str(text).map_err(|e| IoError::Config {
        path: path.into(),
        reason: e.to_string(),
    })?;
    let bad = |reason: String| IoError::Config {
        path: path.into(),
        reason,
    };
    let layer = match field(&v, "type", path)?.as_str() {
        Some("image") => LayerType::Image,
        Some("segmentation") => LayerType::Segmentation,
        other => {
            return Err(bad(format!(
                "field 'type': expected \"image\" or \"segmentation\", found {other:?}"
            )));
        }
    };
    let dt = field(&v, "data_type", path)?.as_str().unwrap_or("");
    let data_type = DataType::parse(dt).ok_or_else(|| {
        bad(format!(
            "field 'data_type': expected uint8, uint16, uint32, uint64 or float32, found {dt:?}"
        ))
    })?;
    let channels = field(&v, "num_channels", path)?.as_u64();
    if channels != Some(1) {
        return Err(bad(format!(
            "field 'num_channels': expected 1, found {channels:?}"
        )));
    }
    let scales = field(&v, "scales", path)?
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| bad("field 'scales': expected a non-empty list".into()))?;
    let key_of = |s: &Value| {
        s.get("key")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let scale = match key {
        None => &scales[0],
        Some(k) => scales.iter().find(|s| key_of(s) == k).ok_or_else(|| {
            let keys: Vec<String> = scales.iter().map(key_of).collect();
            bad(format!(
                "no scale {k:?}: the scales are {}",
                keys.join(", ")
            ))
        })?,
    };
    let key = key_of(scale);
    if scale.get("sharding").is_some_and(|s| !s.is_null()) {
        return Err(bad(format!(
            "scale {key:?}: sharded precomputed volumes are not read (field 'sharding'); \
             convert it to unsharded chunks first"
        )));
    }
    let as_usize = |x: &Value| x.as_u64().and_then(|n| usize::try_from(n).ok());
    let shape_zyx = triple(field(scale, "size", path)?, "size", path, as_usize)?;
    let chunk = field(scale, "chunk_sizes", path)?
        .as_array()
        .and_then(|a| a.first())
        .ok_or_else(|| bad("field 'chunk_sizes': expected a non-empty list".into()))?;
    let chunk_zyx = triple(chunk, "chunk_sizes", path, as_usize)?;
    let resolution_zyx = triple(
        field(scale, "resolution", path)?,
        "resolution",
        path,
        Value::as_f64,
    )?;
    let voxel_offset_zyx = match scale.get("voxel_offset") {
        None => [0; 3],
        Some(o) => triple(o, "voxel_offset", path, Value::as_i64)?,
    };
    let encoding = match field(scale, "encoding", path)?.as_str() {
        Some("raw") => Encoding::Raw,
        Some("compressed_segmentation") => {
            let block = field(scale, "compressed_segmentation_block_size", path)?;
            Encoding::CompressedSegmentation {
                block_zyx: triple(block, "compressed_segmentation_block_size", path, as_usize)?,
            }
        }
        other => {
            return Err(bad(format!(
                "scale {key:?} field 'encoding': expected \"raw\" or \"compressed_segmentation\", found {other:?}"
            )));
        }
    };
    let info = PrecomputedInfo {
        layer,
        data_type,
        key,
        shape_zyx,
        chunk_zyx,
        resolution_zyx,
        voxel_offset_zyx,
        encoding,
    };
    info.check(path)?;
    Ok(info)
}

#[cfg(test)]
mod tests;
