//! Training coordinate files (`.coords`), written by `ffn coordinates` and read by `ffn train`.
//!
//! A small little-endian binary format:
//!
//! | bytes | content |
//! | --- | --- |
//! | 8 | magic `FFNCRD01` |
//! | 4 | `u32` number of volumes `V` |
//! | V x (4 + n) | each volume name: `u32` byte length, then UTF-8 bytes |
//! | 8 | `u64` number of coordinates `N` |
//! | N x 16 | each coordinate: `u32` volume index, then `u32` x, y, z (voxel centre) |
//!
//! Coordinates are stored x, y, z as shown to users; in memory they are
//! [`Coordinate`]s with `zyx`. Files are written to a temporary name and renamed, so a reader never
//! sees half a file.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::IoError;
use ffn_core::training::coordinates::Coordinate;

/// Magic bytes at the start of a coordinate file.
pub const MAGIC: &[u8; 8] = b"FFNCRD01";

/// Errors reading or writing a coordinate file; each names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoordsError {
    /// An operating-system error.
    #[error("{path}: {source}")]
    Os {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The bytes are not a valid coordinate file.
    #[error("{path}: not a valid coordinate file: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The content of a coordinate file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinateFile {
    /// Volume names; `Coordinate::volume` indexes this list.
    pub volumes: Vec<String>,
    /// The coordinates, in training order.
    pub coords: Vec<Coordinate>,
}

/// Encodes to bytes (see the module docs).
pub fn encode(file: &CoordinateFile) -> Vec<u8> {
    let mut b = Vec::with_capacity(24 + 16 * file.coords.len());
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&(file.volumes.len() as u32).to_le_bytes());
    for name in &file.volumes {
        b.extend_from_slice(&(name.len() as u32).to_le_bytes());
        b.extend_from_slice(name.as_bytes());
    }
    b.extend_from_slice(&(file.coords.len() as u64).to_le_bytes());
    for c in &file.coords {
        for v in [c.volume, c.zyx[2], c.zyx[1], c.zyx[0]] {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    b
}

/// Decodes bytes; `path` is only used in error messages.
pub fn decode(bytes: &[u8], path: &Path) -> Result<CoordinateFile, CoordsError> {
    let bad = |reason: String| CoordsError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let mut pos = 0usize;
    let mut take = |n: usize, what: &str| -> Result<&[u8], CoordsError> {
        let end = pos
            .checked_add(n)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| {
                bad(format!(
                    "truncated while reading {what} at byte {pos} (file has {} bytes)",
                    bytes.len()
                ))
            })?;
        let s = &bytes[pos..end];
        pos = end;
        Ok(s)
    };
    let magic = take(8, "the magic")?;
    if magic != MAGIC {
        return Err(bad(format!(
            "expected magic {:?}, found {:?}",
            "FFNCRD01",
            String::from_utf8_lossy(magic)
        )));
    }
    let u32_at = |s: &[u8]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let nv = u32_at(take(4, "the volume count")?) as usize;
    let mut volumes = Vec::new();
    for i in 0..nv {
        let len = u32_at(take(4, "a volume name length")?) as usize;
        let name = std::str::from_utf8(take(len, "a volume name")?)
            .map_err(|_| bad(format!("volume name #{i} is not UTF-8")))?;
        volumes.push(name.to_string());
    }
    let n = take(8, "the coordinate count")?;
    let n = u64::from_le_bytes([n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7]]);
    let n = usize::try_from(n).map_err(|_| bad(format!("coordinate count {n} too large")))?;
    let raw = take(
        n.checked_mul(16)
            .ok_or_else(|| bad(format!("coordinate count {n} too large")))?,
        "the coordinates",
    )?;
    let mut coords = Vec::with_capacity(n);
    for (i, c) in raw.chunks_exact(16).enumerate() {
        let (v, x, y, z) = (
            u32_at(&c[0..]),
            u32_at(&c[4..]),
            u32_at(&c[8..]),
            u32_at(&c[12..]),
        );
        if v as usize >= nv {
            return Err(bad(format!(
                "coordinate #{i} names volume index {v}, but the file lists {nv} volumes"
            )));
        }
        coords.push(Coordinate {
            volume: v,
            zyx: [z, y, x],
        });
    }
    if pos != bytes.len() {
        return Err(bad(format!(
            "{} unexpected bytes after the coordinates",
            bytes.len() - pos
        )));
    }
    Ok(CoordinateFile { volumes, coords })
}

/// Writes a coordinate file atomically (temporary file in the same folder, then rename).
pub fn write_coords(path: &Path, file: &CoordinateFile) -> Result<(), CoordsError> {
    let os = |source| CoordsError::Os {
        path: path.to_path_buf(),
        source,
    };
    crate::atomic::write_atomic(path, &encode(file)).map_err(|e| match e {
        IoError::Os { source, .. } => os(source),
        other => os(std::io::Error::other(other.to_string())),
    })
}

/// Reads a coordinate file.
pub fn read_coords(path: &Path) -> Result<CoordinateFile, CoordsError> {
    let bytes = fs::read(path).map_err(|source| CoordsError::Os {
        path: path.to_path_buf(),
        source,
    })?;
    decode(&bytes, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.coords");
        let file = CoordinateFile {
            volumes: vec!["a".into(), "vol_b".into()],
            coords: vec![
                Coordinate {
                    volume: 1,
                    zyx: [1, 2, 3],
                },
                Coordinate {
                    volume: 0,
                    zyx: [70000, 5, 6],
                },
            ],
        };
        write_coords(&path, &file).unwrap();
        assert_eq!(read_coords(&path).unwrap(), file);
        let bytes = encode(&file);
        // x is stored first: coordinate 0 starts after 8 + 4 + (4 + 1) + (4 + 5) + 8 bytes.
        assert_eq!(bytes[34 + 4], 3);
        let e = decode(&bytes[..bytes.len() - 3], &path).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        let e = decode(b"NOTCOORDS.......", &path).unwrap_err();
        assert!(
            e.to_string().contains("t.coords") && e.to_string().contains("magic"),
            "{e}"
        );
        let mut bad = bytes.clone();
        bad[34] = 9;
        assert!(
            decode(&bad, &path)
                .unwrap_err()
                .to_string()
                .contains("volume index 9")
        );
        assert!(read_coords(&dir.path().join("missing.coords")).is_err());
    }
}
