//! One chunk file of a precomputed scale: its bytes (gzip-compressed or not) to values and back.

use std::io::Read;
use std::path::Path;

use flate2::read::GzDecoder;

use super::compressed_segmentation as cseg;
use super::{Encoding, PrecomputedInfo};
use crate::error::IoError;
use crate::volume::Sample;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

fn damaged(path: &Path, reason: String) -> IoError {
    IoError::Config {
        path: path.into(),
        reason,
    }
}

/// `[z, y, x]` to the `[x, y, z]` of the codec.
fn xyz(v: [usize; 3]) -> [usize; 3] {
    [v[2], v[1], v[0]]
}

/// Reads the chunk file at `path` (or `path.gz`) holding the box of `shape` (`[z, y, x]`): its
/// values x fastest, or `None` when neither file exists.
pub(super) fn read_chunk<T: Sample>(
    info: &PrecomputedInfo,
    path: &Path,
    shape: [usize; 3],
) -> Result<Option<Vec<T>>, IoError> {
    let gz = path.with_file_name(format!(
        "{}.gz",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    let (bytes, at) = match std::fs::read(path) {
        Ok(b) => (b, path.to_path_buf()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::read(&gz) {
            Ok(b) => (b, gz),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(IoError::os(&gz, e)),
        },
        Err(e) => return Err(IoError::os(path, e)),
    };
    let bytes = if bytes.starts_with(&GZIP_MAGIC) {
        gunzip(&bytes, bound(info, shape), &at)?
    } else {
        bytes
    };
    decode(info, &bytes, shape, &at).map(Some)
}

/// The most bytes a chunk of `shape` can take in `info`'s encoding (compressed_segmentation: the
/// block headers, at most one word per position of the padded blocks, and a 64-bit table entry
/// per position).
fn bound(info: &PrecomputedInfo, shape: [usize; 3]) -> usize {
    match info.encoding {
        Encoding::Raw => shape.iter().product::<usize>() * info.data_type.size(),
        Encoding::CompressedSegmentation { block_zyx } => {
            let blocks: usize = (0..3).map(|a| shape[a].div_ceil(block_zyx[a])).product();
            let padded = blocks * block_zyx.iter().product::<usize>();
            4 + 4 * (2 * blocks + 3 * padded)
        }
    }
}

fn gunzip(bytes: &[u8], limit: usize, path: &Path) -> Result<Vec<u8>, IoError> {
    let mut out = Vec::new();
    GzDecoder::new(bytes)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| damaged(path, format!("damaged gzip chunk: {e}")))?;
    if out.len() > limit {
        return Err(damaged(
            path,
            format!("gzip chunk inflates to more than the {limit} bytes its box can hold"),
        ));
    }
    Ok(out)
}

/// The values (x fastest) of a chunk of `shape` from its uncompressed bytes.
fn decode<T: Sample>(
    info: &PrecomputedInfo,
    bytes: &[u8],
    shape: [usize; 3],
    path: &Path,
) -> Result<Vec<T>, IoError> {
    let voxels: usize = shape.iter().product();
    let size = std::mem::size_of::<T>();
    match info.encoding {
        Encoding::Raw => {
            if bytes.len() != voxels * size {
                return Err(damaged(
                    path,
                    format!(
                        "chunk of {shape:?} (z, y, x) {}: expected {} bytes, found {}",
                        info.data_type.name(),
                        voxels * size,
                        bytes.len()
                    ),
                ));
            }
            Ok(bytes.chunks_exact(size).map(T::from_le_slice).collect())
        }
        Encoding::CompressedSegmentation { block_zyx } => {
            let (chunk, block) = (xyz(shape), xyz(block_zyx));
            let err = |e: cseg::CsegError| damaged(path, e.to_string());
            let le: Vec<u8> = if size == 8 {
                cseg::decode_u64(bytes, chunk, block)
                    .map_err(err)?
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect()
            } else {
                cseg::decode_u32(bytes, chunk, block)
                    .map_err(err)?
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect()
            };
            Ok(le.chunks_exact(size).map(T::from_le_slice).collect())
        }
    }
}

/// The bytes of a chunk of `shape` (`[z, y, x]`) holding `values` (x fastest).
pub(super) fn encode<T: Sample>(
    info: &PrecomputedInfo,
    values: &[T],
    shape: [usize; 3],
) -> Vec<u8> {
    let mut le = Vec::with_capacity(std::mem::size_of_val(values));
    for v in values {
        v.push_le(&mut le);
    }
    match info.encoding {
        Encoding::Raw => le,
        Encoding::CompressedSegmentation { block_zyx } => {
            let (chunk, block) = (xyz(shape), xyz(block_zyx));
            if std::mem::size_of::<T>() == 8 {
                let v: Vec<u64> = le.chunks_exact(8).map(u64::from_le_slice).collect();
                cseg::encode_u64(&v, chunk, block)
            } else {
                let v: Vec<u32> = le.chunks_exact(4).map(u32::from_le_slice).collect();
                cseg::encode_u32(&v, chunk, block)
            }
        }
    }
}
