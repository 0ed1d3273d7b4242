//! A folder of finished tiles of a tiled segmentation, so that an interrupted run resumes where it
//! stopped and several ranks can share the work.
//!
//! ```text
//! DIR/store.json           {"format": "ffn-tile-store", "version": 1, "fingerprint": "..."}
//! DIR/tile_000042.bin      one finished tile (see below)
//! DIR/tile_000042.overlaps its labels in the boxes shared with its neighbours ([`crate::tile_overlaps`])
//! DIR/claims/RUN/000042    tile 42 is being computed by some rank of run RUN
//! ```
//!
//! The fingerprint describes what the tiles were computed from (input, tile plan, options); a store
//! made for another fingerprint is refused, so tiles of different runs never mix.
//!
//! A tile file is written to a temporary name, flushed to disk and renamed: a file under its final
//! name is always complete, and a run killed at any moment leaves only finished tiles behind.
//! Format (little-endian): magic `FFNTILE1`, index, origin `[z, y, x]`, shape `[z, y, x]`, max id
//! (all `u64`), the length of a metadata text and the text (UTF-8, e.g. JSON), the length of the
//! deflated labels and the labels (`u64` each, deflate-compressed), and the crc32c of everything
//! before it (`u32`).
//!
//! Claims implement dynamic scheduling without messages: a rank takes the next tile by creating its
//! claim file with `create_new` (atomic on local and NFSv3+ file systems), so a rank that finishes
//! early simply claims more tiles. Claims live under the run's own id, so those left by a killed run
//! never block the next one.

use crate::crc32c::crc32c;
use crate::error::IoError;
use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"FFNTILE1";
const MANIFEST: &str = "store.json";

/// One finished tile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileRecord {
    /// Index in the tile plan.
    pub index: usize,
    /// First voxel `[z, y, x]` in the volume.
    pub origin: [usize; 3],
    /// Extent `[z, y, x]`.
    pub shape: [usize; 3],
    /// Local segment ids, `[z][y][x]` flattened (0 = background).
    pub labels: Vec<u64>,
    /// Free-form metadata (counters, timing), usually JSON.
    pub meta: String,
}

impl TileRecord {
    /// The largest id (0 for an empty tile).
    pub fn max_id(&self) -> u64 {
        self.labels.iter().copied().max().unwrap_or(0)
    }
}

/// The store folder; see the module docs.
#[derive(Clone, Debug)]
pub struct TileStore {
    dir: PathBuf,
}

fn bad(path: &Path, reason: impl Into<String>) -> IoError {
    IoError::Config {
        path: path.into(),
        reason: reason.into(),
    }
}

use crate::atomic::write_atomic;

impl TileStore {
    /// Opens the store in `dir`, creating the folder and its manifest when they do not exist.
    /// An existing store made for another `fingerprint` is an error naming both.
    pub fn open(dir: &Path, fingerprint: &str) -> Result<Self, IoError> {
        std::fs::create_dir_all(dir).map_err(|e| IoError::os(dir, e))?;
        let manifest = dir.join(MANIFEST);
        if !manifest.exists() {
            let doc = serde_json::json!({"format": "ffn-tile-store", "version": 1, "fingerprint": fingerprint});
            // Several ranks may race here; each writes the same document atomically.
            write_atomic(&manifest, doc.to_string().as_bytes())?;
        }
        let text = std::fs::read_to_string(&manifest).map_err(|e| IoError::os(&manifest, e))?;
        let doc: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| bad(&manifest, format!("not a tile-store manifest: {e}")))?;
        if doc.get("format").and_then(|v| v.as_str()) != Some("ffn-tile-store") {
            return Err(bad(
                &manifest,
                "not a tile-store manifest: expected \"format\": \"ffn-tile-store\"",
            ));
        }
        let found = doc
            .get("fingerprint")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if found != fingerprint {
            return Err(bad(
                &manifest,
                format!(
                    "this tile store was made for another run: expected fingerprint {fingerprint:?}, found {found:?} \
                     (use another --tile-store folder, or delete this one)"
                ),
            ));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of tile `index`.
    pub fn tile_path(&self, index: usize) -> PathBuf {
        self.dir.join(format!("tile_{index:06}.bin"))
    }

    /// Whether tile `index` is finished.
    pub fn is_done(&self, index: usize) -> bool {
        self.tile_path(index).is_file()
    }

    /// How many of the tiles `0..n` are finished.
    pub fn count_done(&self, n: usize) -> usize {
        (0..n).filter(|&i| self.is_done(i)).count()
    }

    /// Saves a finished tile atomically.
    pub fn save(&self, rec: &TileRecord) -> Result<(), IoError> {
        let path = self.tile_path(rec.index);
        let n: usize = rec.shape.iter().product();
        if rec.labels.len() != n {
            return Err(bad(
                &path,
                format!(
                    "tile of shape {:?}: expected {n} labels, found {}",
                    rec.shape,
                    rec.labels.len()
                ),
            ));
        }
        let mut buf = Vec::with_capacity(128 + rec.meta.len());
        buf.extend_from_slice(MAGIC);
        for v in [
            rec.index,
            rec.origin[0],
            rec.origin[1],
            rec.origin[2],
            rec.shape[0],
            rec.shape[1],
            rec.shape[2],
        ] {
            buf.extend_from_slice(&(v as u64).to_le_bytes());
        }
        buf.extend_from_slice(&rec.max_id().to_le_bytes());
        buf.extend_from_slice(&(rec.meta.len() as u64).to_le_bytes());
        buf.extend_from_slice(rec.meta.as_bytes());
        let packed = deflate_labels(&rec.labels).map_err(|e| IoError::os(&path, e))?;
        buf.extend_from_slice(&(packed.len() as u64).to_le_bytes());
        buf.extend_from_slice(&packed);
        let crc = crc32c(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        write_atomic(&path, &buf)
    }

    /// Loads tile `index`; a damaged file is an error naming it.
    pub fn load(&self, index: usize) -> Result<TileRecord, IoError> {
        let path = self.tile_path(index);
        let bytes = std::fs::read(&path).map_err(|e| IoError::os(&path, e))?;
        decode_tile(&bytes, &path, index)
    }

    /// The max id recorded in tile `index`'s header, read without loading the labels (the full
    /// [`TileStore::load`] checks it against the labels).
    pub fn max_id(&self, index: usize) -> Result<u64, IoError> {
        let path = self.tile_path(index);
        let mut f = std::fs::File::open(&path).map_err(|e| IoError::os(&path, e))?;
        let mut head = [0u8; 8 + 8 * 8];
        f.read_exact(&mut head).map_err(|_| {
            bad(
                &path,
                "damaged tile file (truncated header); delete it to recompute the tile",
            )
        })?;
        if &head[..8] != MAGIC {
            return Err(bad(
                &path,
                "damaged tile file (no FFNTILE1 header); delete it to recompute the tile",
            ));
        }
        let mut w = [0u8; 8];
        w.copy_from_slice(&head[64..72]);
        Ok(u64::from_le_bytes(w))
    }

    /// Claims tile `index` for run `run`: true when this caller created the claim (it must
    /// compute the tile), false when someone of this run already holds it.
    pub fn claim(&self, run: &str, index: usize) -> Result<bool, IoError> {
        let dir = self.dir.join("claims").join(run);
        std::fs::create_dir_all(&dir).map_err(|e| IoError::os(&dir, e))?;
        let path = dir.join(format!("{index:06}"));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(IoError::os(&path, e)),
        }
    }

    /// Removes the claims of run `run` (after the run finished).
    pub fn clear_claims(&self, run: &str) -> Result<(), IoError> {
        let dir = self.dir.join("claims").join(run);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(IoError::os(&dir, e)),
        }
    }
}

/// Labels as little-endian `u64`s, deflate-compressed (level 4).
pub(crate) fn deflate_labels(labels: &[u64]) -> std::io::Result<Vec<u8>> {
    let mut enc = DeflateEncoder::new(Vec::new(), Compression::new(4));
    let raw: Vec<u8> = labels.iter().flat_map(|v| v.to_le_bytes()).collect();
    enc.write_all(&raw)?;
    enc.finish()
}

/// Inflates exactly `n` labels written by [`deflate_labels`]; at most one byte more than they
/// need is inflated (a deflate stream can expand a thousandfold). The error says what was wrong.
pub(crate) fn inflate_labels(packed: &[u8], n: usize) -> Result<Vec<u64>, String> {
    let want = n.checked_mul(8).ok_or("shape overflows")?;
    let mut raw = Vec::with_capacity(want.min(packed.len().saturating_mul(4)));
    DeflateDecoder::new(packed)
        .take(want as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(|e| format!("labels do not inflate: {e}"))?;
    if raw.len() > want {
        return Err(format!(
            "labels inflate to more than the {want} bytes of {n} labels"
        ));
    }
    if raw.len() < want {
        return Err(format!(
            "expected {n} labels ({want} bytes), found {} bytes",
            raw.len()
        ));
    }
    Ok(raw
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        .collect())
}

/// Decodes the bytes of a tile file (see the module docs) that should hold tile `index`; `path`
/// names the file in errors. A damaged file is an error that says to delete it; the labels are
/// inflated only up to the size the header's shape gives.
pub fn decode_tile(bytes: &[u8], path: &Path, index: usize) -> Result<TileRecord, IoError> {
    let damaged = |what: &str| {
        bad(
            path,
            format!("damaged tile file ({what}); delete it to recompute the tile"),
        )
    };
    if bytes.len() < 8 + 9 * 8 + 4 || &bytes[..8] != MAGIC {
        return Err(damaged("no FFNTILE1 header"));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let found = crc32c(body);
    if stored != found && !crate::crc32c::SKIP_IN_FUZZING {
        return Err(IoError::Crc {
            path: path.into(),
            what: "tile file".into(),
            expected: stored,
            found,
        });
    }
    let mut pos = 8usize;
    let mut next = |len: usize, what: &str| -> Result<&[u8], IoError> {
        let s = pos
            .checked_add(len)
            .and_then(|end| body.get(pos..end))
            .ok_or_else(|| damaged(what))?;
        pos += len;
        Ok(s)
    };
    // `next(8, ..)` gives 8 bytes.
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
    let h: Vec<u64> = (0..9)
        .map(|_| next(8, "truncated").map(word))
        .collect::<Result<_, _>>()?;
    let to_usize = |v: u64| usize::try_from(v).map_err(|_| damaged("size out of range"));
    let (idx, origin, shape) = (
        to_usize(h[0])?,
        [to_usize(h[1])?, to_usize(h[2])?, to_usize(h[3])?],
        [to_usize(h[4])?, to_usize(h[5])?, to_usize(h[6])?],
    );
    if idx != index {
        return Err(bad(
            path,
            format!("holds tile {idx}, expected tile {index}"),
        ));
    }
    let max_id = h[7];
    let meta = next(to_usize(h[8])?, "truncated metadata")?;
    let meta = String::from_utf8(meta.to_vec()).map_err(|_| damaged("metadata is not UTF-8"))?;
    let packed_len = to_usize(word(next(8, "truncated")?))?;
    let packed = next(packed_len, "truncated labels")?;
    let n = shape
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .ok_or_else(|| damaged("shape overflows"))?;
    let labels = inflate_labels(packed, n).map_err(|e| damaged(&e))?;
    let rec = TileRecord {
        index,
        origin,
        shape,
        labels,
        meta,
    };
    if rec.max_id() != max_id {
        return Err(damaged("max id differs from the labels"));
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(index: usize) -> TileRecord {
        TileRecord {
            index,
            origin: [1, 2, 3],
            shape: [2, 3, 4],
            labels: (0..24u64)
                .map(|i| if i % 5 == 0 { 0 } else { i / 5 + (1 << 40) })
                .collect(),
            meta: "{\"segments\": 4}".into(),
        }
    }

    #[test]
    fn tiles_round_trip_and_resume_state_is_visible() {
        let dir = tempfile::tempdir().unwrap();
        let store = TileStore::open(dir.path(), "fp-1").unwrap();
        assert!(!store.is_done(3));
        store.save(&record(3)).unwrap();
        assert!(store.is_done(3));
        assert_eq!(store.count_done(10), 1);
        assert_eq!(store.load(3).unwrap(), record(3));
        assert_eq!(store.max_id(3).unwrap(), record(3).max_id());
        assert!(store.max_id(4).is_err());
        // No temporary files are left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp.")), "{names:?}");
        // Reopening with the same fingerprint keeps the tiles; another fingerprint is refused.
        assert!(TileStore::open(dir.path(), "fp-1").unwrap().is_done(3));
        let e = TileStore::open(dir.path(), "fp-2").unwrap_err().to_string();
        assert!(
            e.contains("expected fingerprint \"fp-2\", found \"fp-1\""),
            "{e}"
        );
    }

    #[test]
    fn damage_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let store = TileStore::open(dir.path(), "fp").unwrap();
        store.save(&record(0)).unwrap();
        let path = store.tile_path(0);
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let e = store.load(0).unwrap_err().to_string();
        assert!(e.contains("checksum mismatch"), "{e}");
        std::fs::write(&path, b"FFNTILE1short").unwrap();
        assert!(
            store
                .load(0)
                .unwrap_err()
                .to_string()
                .contains("damaged tile file")
        );
        // A tile saved under the wrong index.
        store.save(&record(1)).unwrap();
        std::fs::rename(store.tile_path(1), store.tile_path(2)).unwrap();
        assert!(
            store
                .load(2)
                .unwrap_err()
                .to_string()
                .contains("holds tile 1, expected tile 2")
        );
        let mut short = record(4);
        short.labels.pop();
        assert!(
            store
                .save(&short)
                .unwrap_err()
                .to_string()
                .contains("expected 24 labels, found 23")
        );
    }

    #[test]
    fn claims_are_exclusive_per_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = TileStore::open(dir.path(), "fp").unwrap();
        assert!(store.claim("run-a", 5).unwrap());
        assert!(!store.claim("run-a", 5).unwrap());
        // A new run is not blocked by the claims of an old (killed) one.
        assert!(store.claim("run-b", 5).unwrap());
        store.clear_claims("run-a").unwrap();
        assert!(store.claim("run-a", 5).unwrap());
        store.clear_claims("never-existed").unwrap();
    }

    /// A tile file's bytes: `header` words after the magic, `meta`, the `packed` labels, the CRC.
    fn tile_bytes(header: [u64; 8], meta: &[u8], packed: &[u8], packed_len: u64) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        for v in header.into_iter().chain([meta.len() as u64]) {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(meta);
        b.extend_from_slice(&packed_len.to_le_bytes());
        b.extend_from_slice(packed);
        let crc = crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Found while writing the `tile` fuzz target: a packed length near 2^64 overflowed
    /// `offset + length` (a panic in debug builds).
    #[test]
    fn fuzz_tile_with_a_huge_packed_length_is_damaged() {
        let bytes = tile_bytes([0, 0, 0, 0, 1, 1, 1, 0], b"", b"", u64::MAX - 4);
        let e = decode_tile(&bytes, Path::new("t.bin"), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.bin") && e.contains("truncated labels"), "{e}");
    }

    /// Found while writing the `tile` fuzz target: a header declaring 2^29 labels reserved 4 GiB
    /// before inflating, and a deflate stream of a few KB could inflate without bound.
    #[test]
    fn fuzz_tile_inflating_past_its_shape_is_damaged() {
        let mut enc = DeflateEncoder::new(Vec::new(), Compression::new(9));
        enc.write_all(&vec![0u8; 64 << 20]).unwrap();
        let packed = enc.finish().unwrap();
        assert!(packed.len() < 100_000);
        let n = packed.len() as u64;
        let bytes = tile_bytes([0, 0, 0, 0, 1 << 9, 1 << 10, 1 << 10, 0], b"", &packed, n);
        let e = decode_tile(&bytes, Path::new("t.bin"), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected 536870912 labels"), "{e}");
        let bytes = tile_bytes([0, 0, 0, 0, 1, 1, 1, 0], b"", &packed, n);
        let e = decode_tile(&bytes, Path::new("t.bin"), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("inflate to more than the 8 bytes"), "{e}");
    }
}
