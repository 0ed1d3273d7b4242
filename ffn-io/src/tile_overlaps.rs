//! The overlap boxes of a finished tile, kept beside its tile file so that the merge reads only
//! the voxels it compares (`DIR/tile_000042.overlaps`, written before the tile file, which marks
//! the tile finished).
//!
//! Format (little-endian `u64` words unless said): magic `FFNOVLP1`; the tile index; the number of
//! boxes `n`; `n` entries of `lo[z, y, x]`, `hi[z, y, x]`, byte offset and length of the box's
//! deflated labels in the file, and their crc32c; the crc32c of everything before it (`u32`);
//! then the deflated labels of each box ([`crate::tile_store`]'s encoding). A reader reads the
//! header and the one box it needs.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::crc32c::crc32c;
use crate::error::IoError;
use crate::tile_store::{deflate_labels, inflate_labels};

const MAGIC: &[u8; 8] = b"FFNOVLP1";
/// More boxes than a tile can have neighbours (26 in a regular grid; more only where last tiles
/// were moved back) means a damaged file.
const MAX_BOXES: u64 = 1024;
const ENTRY_WORDS: usize = 9;

/// The labels of one tile in one box shared with a neighbour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverlapBox {
    /// First voxel `[z, y, x]` in the volume.
    pub lo: [usize; 3],
    /// One past the last voxel.
    pub hi: [usize; 3],
    /// The tile's local ids in the box, `[z][y][x]`.
    pub labels: Vec<u64>,
}

/// The overlaps file of tile `index` in the store folder `dir`.
pub fn overlaps_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("tile_{index:06}.overlaps"))
}

fn damaged(path: &Path, what: &str) -> IoError {
    IoError::Config {
        path: path.into(),
        reason: format!(
            "damaged tile overlaps file ({what}); delete it and its tile file to recompute the tile"
        ),
    }
}

/// Writes the overlaps file of tile `index` atomically. Boxes are taken one at a time and
/// compressed at once, so only one box's labels are held uncompressed (`boxes` may cut them from
/// the tile as it goes); the first error of `boxes` is returned and nothing is written.
pub fn save_overlaps(
    dir: &Path,
    index: usize,
    boxes: impl IntoIterator<Item = Result<OverlapBox, IoError>>,
) -> Result<(), IoError> {
    let path = overlaps_path(dir, index);
    let mut blobs = Vec::new();
    let mut extents = Vec::new();
    for b in boxes {
        let b = b?;
        let voxels: usize = (0..3).map(|a| b.hi[a].saturating_sub(b.lo[a])).product();
        if b.labels.len() != voxels {
            return Err(IoError::Config {
                path: path.clone(),
                reason: format!(
                    "overlap box {:?}..{:?}: expected {voxels} labels, found {}",
                    b.lo,
                    b.hi,
                    b.labels.len()
                ),
            });
        }
        blobs.push(deflate_labels(&b.labels).map_err(|e| IoError::os(&path, e))?);
        extents.push((b.lo, b.hi));
    }
    let header_len = 8 + 2 * 8 + extents.len() * ENTRY_WORDS * 8 + 4;
    let mut out = Vec::with_capacity(header_len + blobs.iter().map(Vec::len).sum::<usize>());
    out.extend_from_slice(MAGIC);
    let word = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
    word(&mut out, index as u64);
    word(&mut out, extents.len() as u64);
    let mut offset = header_len as u64;
    for ((lo, hi), blob) in extents.iter().zip(&blobs) {
        for v in lo.iter().chain(hi) {
            word(&mut out, *v as u64);
        }
        word(&mut out, offset);
        word(&mut out, blob.len() as u64);
        word(&mut out, u64::from(crc32c(blob)));
        offset += blob.len() as u64;
    }
    let crc = crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    for blob in &blobs {
        out.extend_from_slice(blob);
    }
    crate::atomic::write_atomic(&path, &out)
}

/// The labels of tile `index` in the box `lo..hi` from its overlaps file, reading only the header
/// and that box. `None` when the tile has no overlaps file (a store written before they existed)
/// or the file has no such box; a damaged file is an error naming it.
pub fn load_overlap(
    dir: &Path,
    index: usize,
    lo: [usize; 3],
    hi: [usize; 3],
) -> Result<Option<Vec<u64>>, IoError> {
    let path = overlaps_path(dir, index);
    let mut file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(IoError::os(&path, e)),
    };
    let file_len = file.metadata().map_err(|e| IoError::os(&path, e))?.len();
    let mut head = [0u8; 24];
    file.read_exact(&mut head)
        .map_err(|_| damaged(&path, "truncated header"))?;
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
    if &head[..8] != MAGIC {
        return Err(damaged(&path, "no FFNOVLP1 header"));
    }
    if word(&head[8..16]) != index as u64 {
        return Err(damaged(
            &path,
            &format!("holds tile {}, expected tile {index}", word(&head[8..16])),
        ));
    }
    let count = word(&head[16..24]);
    if count > MAX_BOXES {
        return Err(damaged(
            &path,
            &format!("{count} boxes, expected at most {MAX_BOXES}"),
        ));
    }
    let mut entries = vec![0u8; count as usize * ENTRY_WORDS * 8 + 4];
    file.read_exact(&mut entries)
        .map_err(|_| damaged(&path, "truncated header"))?;
    let (entries, tail) = entries.split_at(entries.len() - 4);
    let mut header = head.to_vec();
    header.extend_from_slice(entries);
    let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    if stored != crc32c(&header) && !crate::crc32c::SKIP_IN_FUZZING {
        return Err(damaged(&path, "header checksum mismatch"));
    }
    let want: Vec<u64> = lo.iter().chain(&hi).map(|&v| v as u64).collect();
    let Some(entry) = entries
        .chunks_exact(ENTRY_WORDS * 8)
        .map(|e| {
            (0..ENTRY_WORDS)
                .map(|k| word(&e[8 * k..8 * k + 8]))
                .collect::<Vec<u64>>()
        })
        .find(|e| e[..6] == want[..])
    else {
        return Ok(None);
    };
    let (offset, len, crc) = (entry[6], entry[7], entry[8]);
    if offset.checked_add(len).is_none_or(|end| end > file_len) {
        return Err(damaged(
            &path,
            &format!("box at bytes {offset}+{len} beyond the file's {file_len}"),
        ));
    }
    let mut blob = vec![0u8; len as usize];
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_exact(&mut blob))
        .map_err(|e| IoError::os(&path, e))?;
    if u64::from(crc32c(&blob)) != crc && !crate::crc32c::SKIP_IN_FUZZING {
        return Err(damaged(&path, "box checksum mismatch"));
    }
    let voxels: usize = (0..3).map(|a| hi[a].saturating_sub(lo[a])).product();
    inflate_labels(&blob, voxels)
        .map(Some)
        .map_err(|e| damaged(&path, &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxes() -> Vec<OverlapBox> {
        vec![
            OverlapBox {
                lo: [0, 0, 8],
                hi: [4, 5, 10],
                labels: (0..40).map(|i| i % 3).collect(),
            },
            OverlapBox {
                lo: [2, 3, 0],
                hi: [4, 5, 10],
                labels: (0..40).map(|i| i * 1_000_000_007).collect(),
            },
        ]
    }

    #[test]
    fn boxes_round_trip_and_missing_ones_are_none() {
        let dir = tempfile::tempdir().unwrap();
        let b = boxes();
        save_overlaps(dir.path(), 7, b.iter().cloned().map(Ok)).unwrap();
        for x in &b {
            assert_eq!(
                load_overlap(dir.path(), 7, x.lo, x.hi).unwrap().as_ref(),
                Some(&x.labels)
            );
        }
        assert_eq!(load_overlap(dir.path(), 7, [0; 3], [1; 3]).unwrap(), None);
        assert_eq!(load_overlap(dir.path(), 8, [0; 3], [1; 3]).unwrap(), None);
        let e = save_overlaps(
            dir.path(),
            9,
            [Ok(OverlapBox {
                lo: [0; 3],
                hi: [1, 1, 2],
                labels: vec![1],
            })],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("expected 2 labels, found 1"), "{e}");
    }

    #[test]
    fn every_truncation_and_flipped_byte_is_an_error_or_the_right_labels() {
        let dir = tempfile::tempdir().unwrap();
        let b = boxes();
        save_overlaps(dir.path(), 3, b.iter().cloned().map(Ok)).unwrap();
        let path = overlaps_path(dir.path(), 3);
        let bytes = std::fs::read(&path).unwrap();
        for cut in 0..bytes.len() {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let r = load_overlap(dir.path(), 3, b[1].lo, b[1].hi);
            assert!(r.is_err(), "cut at {cut}: {r:?}");
        }
        for i in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0x10;
            std::fs::write(&path, &flipped).unwrap();
            for x in &b {
                // An error or no box are both fine; wrong labels are not.
                if let Ok(Some(v)) = load_overlap(dir.path(), 3, x.lo, x.hi) {
                    assert_eq!(v, x.labels, "flip at {i}");
                }
            }
        }
        let e = load_overlap(dir.path(), 4, b[0].lo, b[0].hi);
        assert_eq!(e.unwrap(), None, "another tile's index: no file");
    }
}
