//! Neuroglancer "precomputed" volumes on disk: an `info` JSON file and raw-encoded chunks, which
//! any static file server can serve to Neuroglancer (`precomputed://http://host/path`).
//!
//! Layout written here (one scale):
//!
//! ```text
//! DIR/info                      {"type": "image"|"segmentation", "data_type": ..., "num_channels": 1,
//!                                "scales": [{"key": "8_8_8", "size": [x, y, z], "resolution": [..],
//!                                "voxel_offset": [0, 0, 0], "chunk_sizes": [[64, 64, 64]],
//!                                "encoding": "raw"}]}
//! DIR/8_8_8/x0-x1_y0-y1_z0-z1   one chunk: little-endian values, x fastest, then y, then z
//! ```
//!
//! Neuroglancer's axes are **x, y, z** (sizes, chunk sizes, resolutions in nanometres); ffn-rs arrays
//! are z, y, x, and the functions here take and return them that way. Images are `uint8`,
//! segmentations `uint32` or `uint64`. Chunks at the upper edges are cut to the volume.

use crate::error::IoError;
use ndarray::{Array3, ArrayView3};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

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
    /// `uint32` (segmentations whose ids fit).
    Uint32,
    /// `uint64` (segmentations).
    Uint64,
}

impl DataType {
    /// The name used in the `info` file.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Uint8 => "uint8",
            DataType::Uint32 => "uint32",
            DataType::Uint64 => "uint64",
        }
    }

    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            DataType::Uint8 => 1,
            DataType::Uint32 => 4,
            DataType::Uint64 => 8,
        }
    }

    /// The largest value it holds.
    pub fn max_value(self) -> u64 {
        match self {
            DataType::Uint8 => u8::MAX as u64,
            DataType::Uint32 => u32::MAX as u64,
            DataType::Uint64 => u64::MAX,
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [DataType::Uint8, DataType::Uint32, DataType::Uint64]
            .into_iter()
            .find(|d| d.name() == s)
    }
}

/// The description of a one-scale precomputed volume. Shapes here are `[z, y, x]`.
#[derive(Clone, Debug, PartialEq)]
pub struct PrecomputedInfo {
    /// Image or segmentation.
    pub layer: LayerType,
    /// Element type.
    pub data_type: DataType,
    /// Volume shape `[z, y, x]`.
    pub shape_zyx: [usize; 3],
    /// Chunk shape `[z, y, x]`.
    pub chunk_zyx: [usize; 3],
    /// Voxel size in nanometres `[z, y, x]`.
    pub resolution_zyx: [f64; 3],
}

impl PrecomputedInfo {
    /// The scale key: the resolution as `x_y_z` (e.g. `8_8_8`).
    pub fn key(&self) -> String {
        let r = self.resolution_zyx;
        [r[2], r[1], r[0]]
            .iter()
            .map(|v| fmt_num(*v))
            .collect::<Vec<_>>()
            .join("_")
    }

    /// The `info` JSON document.
    pub fn to_json(&self) -> Value {
        let (s, c, r) = (self.shape_zyx, self.chunk_zyx, self.resolution_zyx);
        json!({
            "@type": "neuroglancer_multiscale_volume",
            "type": self.layer.name(),
            "data_type": self.data_type.name(),
            "num_channels": 1,
            "scales": [{
                "key": self.key(),
                "size": [s[2], s[1], s[0]],
                "resolution": [r[2], r[1], r[0]],
                "voxel_offset": [0, 0, 0],
                "chunk_sizes": [[c[2], c[1], c[0]]],
                "encoding": "raw",
            }],
        })
    }

    /// Chunk boxes `(lo, hi)` (`[z, y, x]`, `hi` exclusive) whose z range starts at `z0`.
    fn chunks_at(&self, z0: usize) -> Vec<([usize; 3], [usize; 3])> {
        let (s, c) = (self.shape_zyx, self.chunk_zyx);
        let mut out = Vec::new();
        let z1 = (z0 + c[0]).min(s[0]);
        for y0 in (0..s[1]).step_by(c[1]) {
            for x0 in (0..s[2]).step_by(c[2]) {
                out.push((
                    [z0, y0, x0],
                    [z1, (y0 + c[1]).min(s[1]), (x0 + c[2]).min(s[2])],
                ));
            }
        }
        out
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
                "volume size: expected every axis >= 1, found {:?} (z, y, x)",
                self.shape_zyx
            ));
        }
        let bytes = self
            .shape_zyx
            .iter()
            .try_fold(8usize, |n, &d| n.checked_mul(d))
            .filter(|&n| n <= isize::MAX as usize);
        if bytes.is_none() {
            return bad(format!(
                "volume size: {:?} (z, y, x) voxels do not fit in memory as uint64",
                self.shape_zyx
            ));
        }
        if self.chunk_zyx.contains(&0) {
            return bad(format!(
                "chunk size: expected every axis >= 1, found {:?} (z, y, x)",
                self.chunk_zyx
            ));
        }
        if !self
            .resolution_zyx
            .iter()
            .all(|r| r.is_finite() && *r > 0.0)
        {
            return bad(format!(
                "resolution: expected positive nanometres, found {:?} (z, y, x)",
                self.resolution_zyx
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

/// The file name of a chunk (`x0-x1_y0-y1_z0-z1`) from its `[z, y, x]` box.
pub fn chunk_name(lo: [usize; 3], hi: [usize; 3]) -> String {
    format!(
        "{}-{}_{}-{}_{}-{}",
        lo[2], hi[2], lo[1], hi[1], lo[0], hi[0]
    )
}

/// Writes a precomputed volume slab by slab (each slab one chunk row thick along z).
pub struct PrecomputedWriter {
    dir: PathBuf,
    info: PrecomputedInfo,
    next_z: usize,
}

impl PrecomputedWriter {
    /// Creates `dir` (and its parents), writes `dir/info` and the scale folder.
    pub fn create(dir: &Path, info: PrecomputedInfo) -> Result<Self, IoError> {
        info.check(&dir.join("info"))?;
        let scale = dir.join(info.key());
        std::fs::create_dir_all(&scale).map_err(|e| IoError::os(&scale, e))?;
        let text = serde_json::to_string_pretty(&info.to_json()).map_err(|e| IoError::Config {
            path: dir.join("info"),
            reason: e.to_string(),
        })?;
        write_file(&dir.join("info"), text.as_bytes())?;
        Ok(Self {
            dir: dir.to_path_buf(),
            info,
            next_z: 0,
        })
    }

    /// The description being written.
    pub fn info(&self) -> &PrecomputedInfo {
        &self.info
    }

    /// The z at which the next slab must start.
    pub fn next_z(&self) -> usize {
        self.next_z
    }

    /// Writes the chunks of the next slab: `slab` holds z `next_z() .. next_z() + chunk z` (cut at the
    /// volume's end) and the full y and x extent. Values above the data type's maximum are an error.
    pub fn write_slab(&mut self, slab: ArrayView3<u64>) -> Result<(), IoError> {
        let (s, c) = (self.info.shape_zyx, self.info.chunk_zyx);
        let z0 = self.next_z;
        let want = [(z0 + c[0]).min(s[0]).saturating_sub(z0), s[1], s[2]];
        if z0 >= s[0] || slab.shape() != want {
            return Err(IoError::Config {
                path: self.dir.join(self.info.key()),
                reason: format!(
                    "slab at z {z0}: expected shape {want:?} (z, y, x) of a volume {s:?}, found {:?}",
                    slab.shape()
                ),
            });
        }
        let dt = self.info.data_type;
        for (lo, hi) in self.info.chunks_at(z0) {
            let mut bytes =
                Vec::with_capacity((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]) * dt.size());
            for z in lo[0]..hi[0] {
                for y in lo[1]..hi[1] {
                    for x in lo[2]..hi[2] {
                        let v = slab[[z - z0, y, x]];
                        if v > dt.max_value() {
                            return Err(IoError::Config {
                                path: self.dir.join(self.info.key()),
                                reason: format!(
                                    "value {v} at (z,y,x) = {:?} does not fit the data type {}",
                                    [z, y, x],
                                    dt.name()
                                ),
                            });
                        }
                        match dt {
                            DataType::Uint8 => bytes.push(v as u8),
                            DataType::Uint32 => bytes.extend_from_slice(&(v as u32).to_le_bytes()),
                            DataType::Uint64 => bytes.extend_from_slice(&v.to_le_bytes()),
                        }
                    }
                }
            }
            let path = self.dir.join(self.info.key()).join(chunk_name(lo, hi));
            write_file(&path, &bytes)?;
        }
        self.next_z = want[0] + z0;
        Ok(())
    }

    /// Checks that every slab was written.
    pub fn finish(self) -> Result<(), IoError> {
        if self.next_z != self.info.shape_zyx[0] {
            return Err(IoError::Config {
                path: self.dir.clone(),
                reason: format!(
                    "only z 0..{} of {} was written",
                    self.next_z, self.info.shape_zyx[0]
                ),
            });
        }
        Ok(())
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    crate::atomic::write_atomic(path, bytes)
}

fn field<'a>(v: &'a Value, key: &str, path: &Path) -> Result<&'a Value, IoError> {
    v.get(key).ok_or_else(|| IoError::Config {
        path: path.into(),
        reason: format!("missing field '{key}'"),
    })
}

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
    // Stored x, y, z; returned z, y, x.
    Ok([z, y, x])
}

/// Reads `dir/info` (see [`parse_info`]).
pub fn read_info(dir: &Path) -> Result<PrecomputedInfo, IoError> {
    let path = dir.join("info");
    let text = std::fs::read_to_string(&path).map_err(|e| IoError::os(&path, e))?;
    parse_info(&text, &path)
}

/// Parses the text of an `info` file (first scale, raw encoding, one channel); `path` names it in
/// errors.
pub fn parse_info(text: &str, path: &Path) -> Result<PrecomputedInfo, IoError> {
    let path = path.to_path_buf();
    let v: Value = serde_json::from_str(text).map_err(|e| IoError::Config {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    let bad = |reason: String| IoError::Config {
        path: path.clone(),
        reason,
    };
    let layer = match field(&v, "type", &path)?.as_str() {
        Some("image") => LayerType::Image,
        Some("segmentation") => LayerType::Segmentation,
        other => {
            return Err(bad(format!(
                "field 'type': expected \"image\" or \"segmentation\", found {other:?}"
            )));
        }
    };
    let dt = field(&v, "data_type", &path)?.as_str().unwrap_or("");
    let data_type = DataType::parse(dt).ok_or_else(|| {
        bad(format!(
            "field 'data_type': expected uint8, uint32 or uint64, found {dt:?}"
        ))
    })?;
    let channels = field(&v, "num_channels", &path)?.as_u64();
    if channels != Some(1) {
        return Err(bad(format!(
            "field 'num_channels': expected 1, found {channels:?}"
        )));
    }
    let scale = field(&v, "scales", &path)?
        .as_array()
        .and_then(|a| a.first())
        .ok_or_else(|| bad("field 'scales': expected a non-empty list".into()))?;
    let enc = field(scale, "encoding", &path)?.as_str();
    if enc != Some("raw") {
        return Err(bad(format!(
            "field 'encoding': only \"raw\" is read here, found {enc:?}"
        )));
    }
    let as_usize = |x: &Value| x.as_u64().and_then(|n| usize::try_from(n).ok());
    let shape_zyx = triple(field(scale, "size", &path)?, "size", &path, as_usize)?;
    let chunk = field(scale, "chunk_sizes", &path)?
        .as_array()
        .and_then(|a| a.first())
        .ok_or_else(|| bad("field 'chunk_sizes': expected a non-empty list".into()))?;
    let chunk_zyx = triple(chunk, "chunk_sizes", &path, as_usize)?;
    let resolution_zyx = triple(
        field(scale, "resolution", &path)?,
        "resolution",
        &path,
        Value::as_f64,
    )?;
    let info = PrecomputedInfo {
        layer,
        data_type,
        shape_zyx,
        chunk_zyx,
        resolution_zyx,
    };
    info.check(&path)?;
    let key = field(scale, "key", &path)?.as_str().unwrap_or("");
    if key != info.key() {
        return Err(bad(format!(
            "field 'key': this reader expects the resolution key {:?}, found {key:?}",
            info.key()
        )));
    }
    Ok(info)
}

/// Reads one chunk file (box `lo..hi`, `[z, y, x]`) as `u64` values, axes z, y, x.
pub fn read_chunk(
    dir: &Path,
    info: &PrecomputedInfo,
    lo: [usize; 3],
    hi: [usize; 3],
) -> Result<Array3<u64>, IoError> {
    let path = dir.join(info.key()).join(chunk_name(lo, hi));
    let bytes = std::fs::read(&path).map_err(|e| IoError::os(&path, e))?;
    let n = [0, 1, 2].map(|a| hi[a].saturating_sub(lo[a]));
    let size = info.data_type.size();
    let want = n[0] * n[1] * n[2] * size;
    if bytes.len() != want {
        return Err(IoError::Config {
            path,
            reason: format!(
                "chunk of {n:?} (z, y, x) {}: expected {want} bytes, found {}",
                info.data_type.name(),
                bytes.len()
            ),
        });
    }
    let values: Vec<u64> = bytes
        .chunks_exact(size)
        .map(|b| match info.data_type {
            DataType::Uint8 => b[0] as u64,
            DataType::Uint32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64,
            DataType::Uint64 => {
                u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
            }
        })
        .collect();
    Array3::from_shape_vec((n[0], n[1], n[2]), values).map_err(|e| IoError::Config {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Reads a whole precomputed volume (every chunk) as `u64`, axes z, y, x.
pub fn read_volume(dir: &Path) -> Result<(PrecomputedInfo, Array3<u64>), IoError> {
    let info = read_info(dir)?;
    let s = info.shape_zyx;
    let bytes = crate::memory::bytes_of(&s, std::mem::size_of::<u64>());
    crate::memory::check_allocation(&format!("the volume of shape {s:?} (z,y,x)"), bytes).map_err(
        |reason| IoError::Config {
            path: dir.join("info"),
            reason,
        },
    )?;
    let mut out = Array3::<u64>::zeros((s[0], s[1], s[2]));
    for z0 in (0..s[0]).step_by(info.chunk_zyx[0]) {
        for (lo, hi) in info.chunks_at(z0) {
            let c = read_chunk(dir, &info, lo, hi)?;
            out.slice_mut(ndarray::s![lo[0]..hi[0], lo[1]..hi[1], lo[2]..hi[2]])
                .assign(&c);
        }
    }
    Ok((info, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(shape: [usize; 3], f: impl Fn(usize, usize, usize) -> u64) -> Array3<u64> {
        Array3::from_shape_fn((shape[0], shape[1], shape[2]), |(z, y, x)| f(z, y, x))
    }

    fn write_all(dir: &Path, info: PrecomputedInfo, v: &Array3<u64>) -> Result<(), IoError> {
        let mut w = PrecomputedWriter::create(dir, info)?;
        while w.next_z() < v.shape()[0] {
            let z0 = w.next_z();
            let z1 = (z0 + w.info().chunk_zyx[0]).min(v.shape()[0]);
            w.write_slab(v.slice(ndarray::s![z0..z1, .., ..]))?;
        }
        w.finish()
    }

    #[test]
    fn round_trip_with_partial_edge_chunks() {
        let dir = tempfile::tempdir().unwrap();
        for (dt, layer, f) in [
            (
                DataType::Uint8,
                LayerType::Image,
                (|z, y, x| ((z * 7 + y * 3 + x) % 256) as u64) as fn(usize, usize, usize) -> u64,
            ),
            (DataType::Uint32, LayerType::Segmentation, |z, y, x| {
                (z * 1000 + y * 10 + x) as u64 + 70_000
            }),
            (DataType::Uint64, LayerType::Segmentation, |z, y, x| {
                (1u64 << 40) + (z + y + x) as u64
            }),
        ] {
            let d = dir.path().join(dt.name());
            let shape = [11, 9, 13];
            let v = volume(shape, f);
            let info = PrecomputedInfo {
                layer,
                data_type: dt,
                shape_zyx: shape,
                chunk_zyx: [4, 5, 8],
                resolution_zyx: [40.0, 8.0, 8.0],
            };
            write_all(&d, info.clone(), &v).unwrap();
            let (back_info, back) = read_volume(&d).unwrap();
            assert_eq!(back_info, info);
            assert_eq!(back, v);
            // Chunk names and sizes as Neuroglancer expects: x-range first, cut at the edges.
            let c = std::fs::read(d.join("8_8_40").join("8-13_5-9_8-11")).unwrap();
            assert_eq!(c.len(), 5 * 4 * 3 * dt.size());
            let info_json: Value =
                serde_json::from_str(&std::fs::read_to_string(d.join("info")).unwrap()).unwrap();
            assert_eq!(info_json["scales"][0]["size"], json!([13, 9, 11]));
            assert_eq!(info_json["scales"][0]["chunk_sizes"], json!([[8, 5, 4]]));
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let info = PrecomputedInfo {
            layer: LayerType::Segmentation,
            data_type: DataType::Uint32,
            shape_zyx: [2, 2, 2],
            chunk_zyx: [2, 2, 2],
            resolution_zyx: [1.0, 1.0, 1.0],
        };
        let big = volume([2, 2, 2], |_, _, _| 1u64 << 33);
        let e = write_all(dir.path(), info.clone(), &big)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not fit the data type uint32"), "{e}");
        let mut w = PrecomputedWriter::create(dir.path(), info.clone()).unwrap();
        let e = w
            .write_slab(volume([1, 2, 2], |_, _, _| 1).view())
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected shape [2, 2, 2]"), "{e}");
        assert!(
            w.finish()
                .unwrap_err()
                .to_string()
                .contains("only z 0..0 of 2")
        );
        // A truncated chunk.
        write_all(dir.path(), info.clone(), &volume([2, 2, 2], |_, _, _| 3)).unwrap();
        std::fs::write(dir.path().join("1_1_1").join("0-2_0-2_0-2"), [0u8; 5]).unwrap();
        let e = read_volume(dir.path()).unwrap_err().to_string();
        assert!(e.contains("expected 32 bytes, found 5"), "{e}");
        std::fs::write(dir.path().join("info"), "{\"type\": \"mesh\"}").unwrap();
        let e = read_info(dir.path()).unwrap_err().to_string();
        assert!(e.contains("field 'type'"), "{e}");
        let bad = PrecomputedInfo {
            chunk_zyx: [0, 1, 1],
            ..info
        };
        assert!(PrecomputedWriter::create(&dir.path().join("x"), bad).is_err());
    }

    /// Found while writing the `precomputed_info` fuzz target: a size whose voxel count overflows
    /// passed the checks (reading the volume then panicked in ndarray). A chunk larger than the
    /// volume is fine.
    #[test]
    fn fuzz_info_of_overflowing_size_is_refused() {
        let text = |size: &str, chunk: &str| {
            format!(
                r#"{{"type": "image", "data_type": "uint8", "num_channels": 1, "scales": [{{"key": "1_1_1",
                "size": {size}, "resolution": [1, 1, 1], "chunk_sizes": [{chunk}], "encoding": "raw"}}]}}"#
            )
        };
        let p = Path::new("d/info");
        let huge = text("[4294967296, 4294967296, 4294967296]", "[64, 64, 64]");
        let e = parse_info(&huge, p).unwrap_err().to_string();
        assert!(
            e.contains("d/info") && e.contains("do not fit in memory"),
            "{e}"
        );
        let wide = text("[2, 2, 2]", "[18446744073709551615, 1, 1]");
        let info = parse_info(&wide, p).unwrap();
        assert_eq!(info.chunks_at(0).len(), 2);
        assert!(info.chunks_at(0).iter().all(|(_, hi)| hi[2] == 2));
    }

    /// A tiny info declaring a volume larger than physical memory is refused before the volume
    /// is allocated (it used to be allocated whole before any chunk was read).
    #[test]
    fn a_volume_larger_than_memory_is_refused_before_allocating() {
        let dir = tempfile::tempdir().unwrap();
        let info = r#"{"type": "segmentation", "data_type": "uint64", "num_channels": 1, "scales": [{"key": "1_1_1",
            "size": [65536, 65536, 65536], "resolution": [1, 1, 1], "chunk_sizes": [[64, 64, 64]], "encoding": "raw"}]}"#;
        std::fs::write(dir.path().join("info"), info).unwrap();
        let e = read_volume(dir.path()).unwrap_err().to_string();
        assert!(e.contains("info") && e.contains("physical memory"), "{e}");
    }
}
