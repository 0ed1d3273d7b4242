//! A native reader of TensorFlow "tensor bundle" checkpoints (`model.ckpt-N.index` +
//! `model.ckpt-N.data-00000-of-00001`), the format google/ffn saves its models in. No TensorFlow.
//!
//! # Format
//! The `.index` file is an uncompressed LevelDB-style sorted table. Its last 48 bytes are the footer:
//! two block handles (metaindex, index; each a pair of varints offset, size), zero padding to 40
//! bytes, and the magic number `0xdb4775248b80fb57` (little-endian). The index block maps the last
//! key of every data block to that block's handle. Every block is followed by a one-byte compression
//! type (0 = none) and the masked CRC-32C of block + type byte. Inside a block, entries are
//! prefix-compressed (`shared`, `non_shared`, `value_len` varints, the key suffix, the value); a
//! table of restart offsets and their count (u32 each) end the block.
//!
//! In the table, the empty key holds a `BundleHeaderProto` (number of shards, endianness) and every
//! other key is a tensor name whose value is a `BundleEntryProto`: dtype (1), shape (2), shard id
//! (3), offset (4) and size (5) in the data file, masked CRC-32C of the tensor bytes (6) and slices
//! (7). The protobufs are decoded here by hand (varints and length-delimited fields only).
//!
//! [`load_tf_model`] maps google/ffn's `seed_update/convN_a/weights`-style variables onto ffn-core's
//! [`ModelConfig::param_specs`] order; the weight layout `[kz, ky, kx, in, out]` is the same in both.

use crate::crc32c;
use crate::error::IoError;
use ffn_core::model_spec::ModelConfig;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Magic number at the end of a LevelDB-style table.
pub const TABLE_MAGIC: u64 = 0xdb47_7524_8b80_fb57;
const FOOTER_LEN: usize = 48;
const BLOCK_TRAILER_LEN: usize = 5;
/// The most bytes of (prefix-decompressed) keys a block may decode to, per byte of the block.
const KEY_EXPANSION: usize = 64;
/// The scope google/ffn puts its network variables in.
pub const FFN_SCOPE: &str = "seed_update/";

/// TensorFlow element types (`DataType` enum values) that may appear in a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TfDtype {
    /// `DT_FLOAT` (1).
    Float,
    /// `DT_DOUBLE` (2).
    Double,
    /// `DT_INT32` (3).
    Int32,
    /// `DT_UINT8` (4).
    Uint8,
    /// `DT_INT16` (5).
    Int16,
    /// `DT_INT8` (6).
    Int8,
    /// `DT_STRING` (7).
    String,
    /// `DT_INT64` (9).
    Int64,
    /// `DT_BOOL` (10).
    Bool,
    /// `DT_BFLOAT16` (14).
    Bfloat16,
    /// `DT_UINT16` (17).
    Uint16,
    /// `DT_HALF` (19).
    Half,
    /// `DT_UINT32` (22).
    Uint32,
    /// `DT_UINT64` (23).
    Uint64,
    /// Any other enum value.
    Other(u64),
}

impl TfDtype {
    /// From the protobuf enum value.
    pub fn from_code(code: u64) -> Self {
        match code {
            1 => Self::Float,
            2 => Self::Double,
            3 => Self::Int32,
            4 => Self::Uint8,
            5 => Self::Int16,
            6 => Self::Int8,
            7 => Self::String,
            9 => Self::Int64,
            10 => Self::Bool,
            14 => Self::Bfloat16,
            17 => Self::Uint16,
            19 => Self::Half,
            22 => Self::Uint32,
            23 => Self::Uint64,
            other => Self::Other(other),
        }
    }

    /// Bytes per element; `None` for strings and unknown types.
    pub fn size(self) -> Option<usize> {
        Some(match self {
            Self::Uint8 | Self::Int8 | Self::Bool => 1,
            Self::Int16 | Self::Uint16 | Self::Half | Self::Bfloat16 => 2,
            Self::Float | Self::Int32 | Self::Uint32 => 4,
            Self::Double | Self::Int64 | Self::Uint64 => 8,
            Self::String | Self::Other(_) => return None,
        })
    }

    /// Short lower-case name (`float32`, `int64`, ...).
    pub fn name(self) -> String {
        match self {
            Self::Float => "float32".into(),
            Self::Double => "float64".into(),
            Self::Int32 => "int32".into(),
            Self::Uint8 => "uint8".into(),
            Self::Int16 => "int16".into(),
            Self::Int8 => "int8".into(),
            Self::String => "string".into(),
            Self::Int64 => "int64".into(),
            Self::Bool => "bool".into(),
            Self::Bfloat16 => "bfloat16".into(),
            Self::Uint16 => "uint16".into(),
            Self::Half => "float16".into(),
            Self::Uint32 => "uint32".into(),
            Self::Uint64 => "uint64".into(),
            Self::Other(c) => format!("dtype#{c}"),
        }
    }
}

/// One tensor of a bundle, as described by its `BundleEntryProto`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TfEntry {
    /// Variable name, e.g. `seed_update/conv0_a/weights`.
    pub name: String,
    /// Element type.
    pub dtype: TfDtype,
    /// Shape (empty for a scalar).
    pub shape: Vec<usize>,
    /// Which data file holds it.
    pub shard_id: u32,
    /// Byte offset in the data file.
    pub offset: u64,
    /// Byte length in the data file.
    pub size: u64,
    /// Masked CRC-32C of the bytes, as stored.
    pub masked_crc32c: u32,
    /// True for a partitioned (sliced) variable, which this reader does not assemble.
    pub sliced: bool,
}

impl TfEntry {
    /// Number of elements; `None` when the declared shape's product overflows.
    pub fn num_elements(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }
}

/// An opened tensor bundle: its table of entries (sorted by name) and where its data files are.
#[derive(Clone, Debug)]
pub struct TfBundle {
    prefix: PathBuf,
    num_shards: u32,
    entries: Vec<TfEntry>,
}

/// Prefix of a checkpoint given as the prefix itself, the `.index` file or a data file.
pub fn bundle_prefix(path: &Path) -> PathBuf {
    let s = path.to_string_lossy();
    if let Some(p) = s.strip_suffix(".index") {
        return PathBuf::from(p);
    }
    if let Some(pos) = s.rfind(".data-") {
        return PathBuf::from(&s[..pos]);
    }
    path.to_path_buf()
}

/// True when `path` names a TF bundle (its `.index` file exists and ends with the table magic).
pub fn is_tf_checkpoint(path: &Path) -> bool {
    let index = index_path(&bundle_prefix(path));
    let Ok(bytes) = fs::read(index) else {
        return false;
    };
    bytes.len() >= FOOTER_LEN && bytes[bytes.len() - 8..] == TABLE_MAGIC.to_le_bytes()
}

fn index_path(prefix: &Path) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(".index");
    PathBuf::from(s)
}

/// A cursor over protobuf / LevelDB bytes with bounds-checked reads.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .buf
                .get(self.pos)
                .ok_or("varint runs past the end of its record")?;
            self.pos += 1;
            value |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                format!(
                    "record of {n} bytes at offset {} runs past the end ({} bytes)",
                    self.pos,
                    self.buf.len()
                )
            })?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn fixed32(&mut self) -> Result<u32, String> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// A protobuf field value (only the wire types a bundle uses).
enum Field<'a> {
    Varint(u64),
    Fixed32(u32),
    Fixed64,
    Bytes(&'a [u8]),
}

fn next_field<'a>(c: &mut Cursor<'a>) -> Result<(u64, Field<'a>), String> {
    let key = c.varint()?;
    let (number, wire) = (key >> 3, key & 7);
    let field = match wire {
        0 => Field::Varint(c.varint()?),
        1 => {
            c.bytes(8)?;
            Field::Fixed64
        }
        2 => {
            let n = usize::try_from(c.varint()?).map_err(|_| "length too large")?;
            Field::Bytes(c.bytes(n)?)
        }
        5 => Field::Fixed32(c.fixed32()?),
        other => {
            return Err(format!(
                "unsupported protobuf wire type {other} in field {number}"
            ));
        }
    };
    Ok((number, field))
}

fn parse_shape(buf: &[u8]) -> Result<Vec<usize>, String> {
    let mut c = Cursor::new(buf);
    let mut dims = Vec::new();
    while !c.done() {
        match next_field(&mut c)? {
            (2, Field::Bytes(dim)) => {
                let mut d = Cursor::new(dim);
                let mut size = 0u64;
                while !d.done() {
                    if let (1, Field::Varint(v)) = next_field(&mut d)? {
                        size = v;
                    }
                }
                // int64 on the wire: -1 (unknown) arrives as a huge varint.
                let size = i64::try_from(size)
                    .ok()
                    .and_then(|s| usize::try_from(s).ok())
                    .ok_or("shape with an unknown or negative dimension")?;
                dims.push(size);
            }
            (3, Field::Varint(1)) => return Err("tensor of unknown rank".into()),
            _ => {}
        }
    }
    Ok(dims)
}

fn parse_entry(name: String, value: &[u8]) -> Result<TfEntry, String> {
    let mut e = TfEntry {
        name,
        dtype: TfDtype::Other(0),
        shape: Vec::new(),
        shard_id: 0,
        offset: 0,
        size: 0,
        masked_crc32c: 0,
        sliced: false,
    };
    let mut c = Cursor::new(value);
    while !c.done() {
        match next_field(&mut c)? {
            (1, Field::Varint(v)) => e.dtype = TfDtype::from_code(v),
            (2, Field::Bytes(b)) => e.shape = parse_shape(b)?,
            (3, Field::Varint(v)) => {
                e.shard_id = u32::try_from(v).map_err(|_| "shard id out of range")?
            }
            (4, Field::Varint(v)) => e.offset = v,
            (5, Field::Varint(v)) => e.size = v,
            (6, Field::Fixed32(v)) => e.masked_crc32c = v,
            (7, Field::Bytes(_)) => e.sliced = true,
            _ => {}
        }
    }
    Ok(e)
}

/// Reads the block at `handle` (offset, size) of the table, checks its trailer and CRC.
fn read_block<'a>(
    index: &'a [u8],
    offset: u64,
    size: u64,
    what: &str,
    path: &Path,
) -> Result<&'a [u8], IoError> {
    let bad = |reason: String| IoError::TfBundle {
        path: path.into(),
        reason,
    };
    let start =
        usize::try_from(offset).map_err(|_| bad(format!("{what} offset {offset} out of range")))?;
    let len = usize::try_from(size).map_err(|_| bad(format!("{what} size {size} out of range")))?;
    let end = start
        .checked_add(len)
        .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN))
        .filter(|&e| e <= index.len())
        .ok_or_else(|| {
            bad(format!(
                "{what} at {offset}+{size} runs past the end of the file ({} bytes): truncated?",
                index.len()
            ))
        })?;
    let block = &index[start..start + len];
    let kind = index[start + len];
    let trailer = &index[start + len + 1..end];
    let stored = crc32c::unmask(u32::from_le_bytes([
        trailer[0], trailer[1], trailer[2], trailer[3],
    ]));
    let actual = crc32c::extend(crc32c::crc32c(block), &[kind]);
    if stored != actual && !crc32c::SKIP_IN_FUZZING {
        return Err(IoError::Crc {
            path: path.into(),
            what: what.into(),
            expected: stored,
            found: actual,
        });
    }
    if kind != 0 {
        return Err(bad(format!(
            "{what} is compressed (type {kind}); only uncompressed tables are supported"
        )));
    }
    Ok(block)
}

/// One table entry: the full key and the value bytes.
type BlockEntry<'a> = (Vec<u8>, &'a [u8]);

/// Every (key, value) of one table block.
fn block_entries(block: &[u8]) -> Result<Vec<BlockEntry<'_>>, String> {
    if block.len() < 4 {
        return Err("block shorter than its restart count".into());
    }
    let n = block.len();
    let restarts =
        u32::from_le_bytes([block[n - 4], block[n - 3], block[n - 2], block[n - 1]]) as usize;
    let data_end = restarts
        .checked_mul(4)
        .and_then(|r| r.checked_add(4))
        .and_then(|r| n.checked_sub(r))
        .ok_or("restart table larger than its block")?;
    let mut c = Cursor::new(&block[..data_end]);
    let mut out: Vec<BlockEntry<'_>> = Vec::new();
    let mut key: Vec<u8> = Vec::new();
    // Prefix compression lets every entry repeat the previous key and add a byte, so that n bytes
    // could decode to n^2 / 32 bytes of keys; real tables stay far below this bound.
    let key_budget = block.len().saturating_mul(KEY_EXPANSION);
    let mut key_bytes = 0usize;
    while !c.done() {
        let shared = usize::try_from(c.varint()?).map_err(|_| "bad key length")?;
        let non_shared = usize::try_from(c.varint()?).map_err(|_| "bad key length")?;
        let value_len = usize::try_from(c.varint()?).map_err(|_| "bad value length")?;
        if shared > key.len() {
            return Err(format!(
                "entry shares {shared} key bytes but the previous key has {}",
                key.len()
            ));
        }
        key.truncate(shared);
        key.extend_from_slice(c.bytes(non_shared)?);
        key_bytes = key_bytes.saturating_add(key.len());
        if key_bytes > key_budget {
            return Err(format!(
                "the keys of a {}-byte block decode to more than {KEY_EXPANSION} times its size (damaged table)",
                block.len()
            ));
        }
        let value = c.bytes(value_len)?;
        out.push((key.clone(), value));
    }
    Ok(out)
}

fn block_handle(value: &[u8]) -> Result<(u64, u64), String> {
    let mut c = Cursor::new(value);
    Ok((c.varint()?, c.varint()?))
}

impl TfBundle {
    /// Opens a bundle given its prefix (`model.ckpt-27465036`), its `.index` file or a data file.
    /// Parses the whole index (checking every block's CRC); tensors are read on demand.
    pub fn open(path: &Path) -> Result<Self, IoError> {
        let prefix = bundle_prefix(path);
        let index_file = index_path(&prefix);
        let index = fs::read(&index_file).map_err(|e| IoError::os(&index_file, e))?;
        Self::parse(prefix, &index_file, &index)
    }

    /// Parses the bytes of an `.index` file (`path` names it in errors; `prefix` is where the data
    /// files are looked for). Every block's CRC is checked.
    pub fn parse(prefix: PathBuf, path: &Path, index: &[u8]) -> Result<Self, IoError> {
        let bad = |reason: String| IoError::TfBundle {
            path: path.into(),
            reason,
        };
        if index.len() < FOOTER_LEN {
            return Err(bad(format!(
                "{} bytes, shorter than the 48-byte table footer",
                index.len()
            )));
        }
        let footer = &index[index.len() - FOOTER_LEN..];
        let magic = u64::from_le_bytes(
            footer[40..48]
                .try_into()
                .map_err(|_| bad("footer".into()))?,
        );
        if magic != TABLE_MAGIC {
            return Err(bad(format!(
                "footer magic {magic:#018x}, expected {TABLE_MAGIC:#018x} (not a tensor-bundle .index file, or truncated)"
            )));
        }
        let mut fc = Cursor::new(&footer[..40]);
        let (_meta_off, _meta_size) = (fc.varint().map_err(&bad)?, fc.varint().map_err(&bad)?);
        let (idx_off, idx_size) = (fc.varint().map_err(&bad)?, fc.varint().map_err(&bad)?);
        let index_block = read_block(index, idx_off, idx_size, "index block", path)?;
        let mut entries = Vec::new();
        let mut num_shards = None;
        // Data blocks are written one after the other: each starts past the end of the one before
        // (so that no block is read twice and the entries grow with the file, not faster).
        let mut next_free = 0u64;
        for (i, (_, handle)) in block_entries(index_block)
            .map_err(&bad)?
            .into_iter()
            .enumerate()
        {
            let (off, size) = block_handle(handle).map_err(&bad)?;
            if off < next_free {
                return Err(bad(format!(
                    "data block {i} at offset {off} overlaps the block before it (which ends at {next_free})"
                )));
            }
            let block = read_block(index, off, size, &format!("data block {i}"), path)?;
            next_free = off + size + BLOCK_TRAILER_LEN as u64;
            for (key, value) in block_entries(block).map_err(&bad)? {
                if key.is_empty() {
                    num_shards = Some(parse_header(value).map_err(&bad)?);
                    continue;
                }
                let name =
                    String::from_utf8(key).map_err(|_| bad("tensor name is not UTF-8".into()))?;
                let entry = parse_entry(name.clone(), value)
                    .map_err(|r| bad(format!("entry '{name}': {r}")))?;
                entries.push(entry);
            }
        }
        let num_shards =
            num_shards.ok_or_else(|| bad("no bundle header (empty key) in the table".into()))?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(e) = entries.iter().find(|e| e.shard_id >= num_shards) {
            return Err(bad(format!(
                "entry '{}' is in shard {} of {num_shards}",
                e.name, e.shard_id
            )));
        }
        Ok(Self {
            prefix,
            num_shards,
            entries,
        })
    }

    /// Every tensor, sorted by name.
    pub fn entries(&self) -> &[TfEntry] {
        &self.entries
    }

    /// The entry of one tensor.
    pub fn entry(&self, name: &str) -> Option<&TfEntry> {
        self.entries
            .binary_search_by(|e| e.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// The `.index` file.
    pub fn index_path(&self) -> PathBuf {
        index_path(&self.prefix)
    }

    /// The data file of one shard: `PREFIX.data-0000S-of-0000N`.
    pub fn data_path(&self, shard: u32) -> PathBuf {
        let mut s = self.prefix.as_os_str().to_owned();
        s.push(format!(".data-{shard:05}-of-{:05}", self.num_shards));
        PathBuf::from(s)
    }

    /// The raw little-endian bytes of a tensor, after checking size and CRC-32C.
    pub fn read_raw(&self, name: &str) -> Result<Vec<u8>, IoError> {
        let index = self.index_path();
        let entry = self.entry(name).ok_or_else(|| IoError::TfBundle {
            path: index.clone(),
            reason: format!("no tensor '{name}'"),
        })?;
        let data_path = self.data_path(entry.shard_id);
        let bad = |reason: String| IoError::TfBundle {
            path: data_path.clone(),
            reason,
        };
        if entry.sliced {
            return Err(bad(format!(
                "tensor '{name}' is partitioned into slices, which are not supported"
            )));
        }
        if let Some(elem) = entry.dtype.size() {
            let expected = entry
                .num_elements()
                .and_then(|n| (n as u64).checked_mul(elem as u64));
            if expected != Some(entry.size) {
                let expected = expected.map_or("more than 2^64".to_string(), |e| e.to_string());
                return Err(bad(format!(
                    "tensor '{name}': {} bytes recorded, expected {expected} for {} {:?}",
                    entry.size,
                    entry.dtype.name(),
                    entry.shape
                )));
            }
        }
        let mut file = fs::File::open(&data_path).map_err(|e| IoError::os(&data_path, e))?;
        let file_len = file
            .metadata()
            .map_err(|e| IoError::os(&data_path, e))?
            .len();
        if entry
            .offset
            .checked_add(entry.size)
            .is_none_or(|end| end > file_len)
        {
            return Err(bad(format!(
                "tensor '{name}' at {}+{} lies past the end of the file ({file_len} bytes): truncated?",
                entry.offset, entry.size
            )));
        }
        let len =
            usize::try_from(entry.size).map_err(|_| bad(format!("tensor '{name}' too large")))?;
        let mut buf = vec![0u8; len];
        file.seek(SeekFrom::Start(entry.offset))
            .map_err(|e| IoError::os(&data_path, e))?;
        file.read_exact(&mut buf)
            .map_err(|e| IoError::os(&data_path, e))?;
        if entry.dtype != TfDtype::String {
            let stored = crc32c::unmask(entry.masked_crc32c);
            let actual = crc32c::crc32c(&buf);
            if stored != actual {
                return Err(IoError::Crc {
                    path: data_path,
                    what: format!("tensor '{name}'"),
                    expected: stored,
                    found: actual,
                });
            }
        }
        Ok(buf)
    }

    /// A `float32` tensor's shape and values (CRC checked).
    pub fn read_f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>), IoError> {
        let entry = self.entry(name).ok_or_else(|| IoError::TfBundle {
            path: self.index_path(),
            reason: format!("no tensor '{name}'"),
        })?;
        if entry.dtype != TfDtype::Float {
            return Err(IoError::WrongDtype {
                spec: format!("{}: tensor '{name}'", self.index_path().display()),
                expected: "float32".into(),
                found: entry.dtype.name(),
            });
        }
        let shape = entry.shape.clone();
        let raw = self.read_raw(name)?;
        let values = raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok((shape, values))
    }
}

fn parse_header(value: &[u8]) -> Result<u32, String> {
    let mut c = Cursor::new(value);
    let mut shards = 1u64;
    while !c.done() {
        match next_field(&mut c)? {
            (1, Field::Varint(v)) => shards = v,
            (2, Field::Varint(1)) => {
                return Err("big-endian bundle; only little-endian is supported".into());
            }
            _ => {}
        }
    }
    u32::try_from(shards)
        .ok()
        .filter(|&s| s >= 1)
        .ok_or_else(|| format!("bad shard count {shards}"))
}

/// The architecture of the google/ffn `convstack_3d` network a bundle holds, after checking that
/// every variable of it is present with the expected shape (nothing is read from the data files).
/// Depth and feature count are inferred from the variables; the field of view and deltas are not
/// stored in a TF checkpoint, so the returned config has google/ffn's defaults (33^3, 8) for them.
/// A missing variable, a wrong shape or an architecture [`ModelConfig::validate`] refuses is an
/// error naming it.
pub fn tf_model_config(bundle: &TfBundle) -> Result<ModelConfig, IoError> {
    let index = bundle.index_path();
    let bad = |reason: String| IoError::TfBundle {
        path: index.clone(),
        reason,
    };
    let scoped = |name: &str| format!("{FFN_SCOPE}{name}");
    let conv0 = bundle.entry(&scoped("conv0_a/weights")).ok_or_else(|| {
        bad(format!(
            "no variable '{FFN_SCOPE}conv0_a/weights': not a google/ffn convstack_3d checkpoint (variables: {})",
            summarize_names(bundle)
        ))
    })?;
    let features = *conv0
        .shape
        .last()
        .ok_or_else(|| bad("conv0_a/weights is a scalar".into()))?;
    // Bounded by the number of entries.
    let mut depth = 1;
    while bundle
        .entry(&scoped(&format!("conv{depth}_a/weights")))
        .is_some()
    {
        depth += 1;
    }
    let config = ModelConfig {
        depth,
        features,
        ..ModelConfig::default()
    };
    config
        .validate()
        .map_err(|e| bad(format!("variables of a network refused: {e}")))?;
    for spec in &config.param_specs() {
        let name = scoped(&spec.name);
        let entry = bundle.entry(&name).ok_or_else(|| {
            bad(format!(
                "missing variable '{name}' for a depth-{depth} network with {features} features"
            ))
        })?;
        if entry.shape != spec.shape {
            return Err(bad(format!(
                "variable '{name}': expected shape {:?}, found {:?}",
                spec.shape, entry.shape
            )));
        }
    }
    Ok(config)
}

/// Reads the network weights of a google/ffn `convstack_3d` checkpoint into ffn-core's flat parameter
/// order; the architecture comes from [`tf_model_config`] (override the field of view and deltas
/// from the training or inference config). Every tensor is CRC-checked. Other variables
/// (`global_step`, input-pipeline counters) are ignored.
pub fn load_tf_model(path: &Path) -> Result<(ModelConfig, Vec<f32>), IoError> {
    let bundle = TfBundle::open(path)?;
    let config = tf_model_config(&bundle)?;
    // Grows with the tensors read (each bounded by the data file), never by the declared shape.
    let mut params = Vec::new();
    for spec in &config.param_specs() {
        let (_, values) = bundle.read_f32(&format!("{FFN_SCOPE}{}", spec.name))?;
        debug_assert_eq!(params.len(), spec.offset);
        params.extend_from_slice(&values);
    }
    Ok((config, params))
}

fn summarize_names(bundle: &TfBundle) -> String {
    let names: Vec<&str> = bundle
        .entries
        .iter()
        .take(8)
        .map(|e| e.name.as_str())
        .collect();
    let more = bundle.entries.len().saturating_sub(names.len());
    if more > 0 {
        format!("{}, ... {more} more", names.join(", "))
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields_decode() {
        // field 4 varint 300, field 6 fixed32, field 2 bytes "ab"
        let buf = [0x20, 0xAC, 0x02, 0x35, 1, 2, 3, 4, 0x12, 2, b'a', b'b'];
        let mut c = Cursor::new(&buf);
        assert!(matches!(
            next_field(&mut c).unwrap(),
            (4, Field::Varint(300))
        ));
        assert!(matches!(
            next_field(&mut c).unwrap(),
            (6, Field::Fixed32(0x0403_0201))
        ));
        assert!(matches!(
            next_field(&mut c).unwrap(),
            (2, Field::Bytes(b"ab"))
        ));
        assert!(c.done());
        let mut short = Cursor::new(&[0x80, 0x80]);
        assert!(short.varint().unwrap_err().contains("past the end"));
    }

    #[test]
    fn prefix_from_any_file_of_the_bundle() {
        let p = Path::new("/m/model.ckpt-5");
        assert_eq!(bundle_prefix(Path::new("/m/model.ckpt-5.index")), p);
        assert_eq!(
            bundle_prefix(Path::new("/m/model.ckpt-5.data-00000-of-00001")),
            p
        );
        assert_eq!(bundle_prefix(p), p);
    }

    #[test]
    fn short_or_foreign_index_is_refused() {
        let p = Path::new("x.index");
        let e = TfBundle::parse("x".into(), p, &[0u8; 10])
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.index") && e.contains("shorter than"), "{e}");
        let e = TfBundle::parse("x".into(), p, &[0u8; 100])
            .unwrap_err()
            .to_string();
        assert!(e.contains("footer magic"), "{e}");
    }

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// A block of `(shared, key suffix, value)` entries, with one restart.
    fn block(entries: &[(u64, &[u8], &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        for (shared, suffix, value) in entries {
            varint(*shared, &mut b);
            varint(suffix.len() as u64, &mut b);
            varint(value.len() as u64, &mut b);
            b.extend_from_slice(suffix);
            b.extend_from_slice(value);
        }
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b
    }

    /// An `.index` file: `data` blocks written one after the other (with trailers), an index
    /// block whose handles are `handles` (offset, size), and the footer.
    fn table(data: &[Vec<u8>], handles: &[(u64, u64)]) -> Vec<u8> {
        let mut file = Vec::new();
        let put = |file: &mut Vec<u8>, b: &[u8]| {
            let at = file.len() as u64;
            file.extend_from_slice(b);
            file.push(0);
            let crc = crc32c::mask(crc32c::extend(crc32c::crc32c(b), &[0]));
            file.extend_from_slice(&crc.to_le_bytes());
            (at, b.len() as u64)
        };
        for b in data {
            put(&mut file, b);
        }
        let values: Vec<Vec<u8>> = handles
            .iter()
            .map(|&(o, n)| {
                let mut v = Vec::new();
                varint(o, &mut v);
                varint(n, &mut v);
                v
            })
            .collect();
        let index: Vec<(u64, &[u8], &[u8])> = values
            .iter()
            .map(|v| (0, &b"k"[..], v.as_slice()))
            .collect();
        let (io, is) = put(&mut file, &block(&index));
        let mut footer = vec![0, 0];
        varint(io, &mut footer);
        varint(is, &mut footer);
        footer.resize(40, 0);
        footer.extend_from_slice(&TABLE_MAGIC.to_le_bytes());
        file.extend_from_slice(&footer);
        file
    }

    /// A `BundleEntryProto` of a float32 tensor of `shape`.
    fn float_entry(shape: &[u64]) -> Vec<u8> {
        let mut dims = Vec::new();
        for &d in shape {
            let mut dim = vec![0x08];
            varint(d, &mut dim);
            dims.push(0x12);
            varint(dim.len() as u64, &mut dims);
            dims.extend_from_slice(&dim);
        }
        let mut e = vec![0x08, 1, 0x12];
        varint(dims.len() as u64, &mut e);
        e.extend_from_slice(&dims);
        e
    }

    fn parse_table(bytes: &[u8]) -> Result<TfBundle, IoError> {
        TfBundle::parse("m".into(), Path::new("m.index"), bytes)
    }

    #[test]
    fn hand_written_table_parses() {
        let data = block(&[
            (0, b"", &[0x08, 1]),
            (
                0,
                b"seed_update/conv0_a/weights",
                &float_entry(&[3, 3, 3, 2, 4]),
            ),
        ]);
        let n = data.len() as u64;
        let bundle = parse_table(&table(&[data], &[(0, n)])).unwrap();
        assert_eq!(bundle.entries().len(), 1);
        assert_eq!(bundle.entries()[0].shape, vec![3, 3, 3, 2, 4]);
    }

    /// Found while writing the `tf_index` fuzz target: each entry may repeat the whole previous
    /// key and add a byte, so n bytes decoded to n^2/32 bytes of keys (1 MB of index: ~30 GB).
    #[test]
    fn fuzz_keys_growing_by_one_byte_per_entry_are_refused() {
        let mut entries: Vec<(u64, &[u8], &[u8])> = vec![(0, b"", &[0x08, 1])];
        for shared in 0..4000 {
            entries.push((shared, b"a", b""));
        }
        let data = block(&entries);
        let n = data.len() as u64;
        let e = parse_table(&table(&[data], &[(0, n)]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("m.index") && e.contains("times its size"), "{e}");
    }

    /// Found while writing the `tf_index` fuzz target: an index block naming the same data block
    /// again and again made the entries grow with the square of the file.
    #[test]
    fn fuzz_data_block_named_twice_is_refused() {
        let data = block(&[(0, b"", &[0x08, 1])]);
        let n = data.len() as u64;
        let e = parse_table(&table(&[data], &[(0, n), (0, n)]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("data block 1 at offset 0 overlaps"), "{e}");
    }

    /// Found while writing the `tf_index` fuzz target: a `conv0_a/weights` of 2^62 features made
    /// the parameter count overflow (a panic in debug builds).
    #[test]
    fn fuzz_network_of_overflowing_width_is_refused() {
        let data = block(&[
            (0, b"", &[0x08, 1]),
            (
                0,
                b"seed_update/conv0_a/weights",
                &float_entry(&[3, 3, 3, 2, 1 << 62]),
            ),
        ]);
        let n = data.len() as u64;
        let bundle = parse_table(&table(&[data], &[(0, n)])).unwrap();
        let e = tf_model_config(&bundle).unwrap_err().to_string();
        assert!(e.contains("m.index") && e.contains("overflows"), "{e}");
    }

    /// The hostile-input case of the hardening issue: a tiny index declaring conv0 with a million
    /// features (about 108 TB of parameters) is an error, not an allocation of the declared size.
    #[test]
    fn an_index_declaring_a_million_features_is_an_error_not_an_allocation() {
        let dir = tempfile::tempdir().unwrap();
        let f = 1_000_000;
        let entries = [
            ("seed_update/conv0_a/biases", float_entry(&[f])),
            ("seed_update/conv0_a/weights", float_entry(&[3, 3, 3, 2, f])),
            ("seed_update/conv0_b/biases", float_entry(&[f])),
            ("seed_update/conv0_b/weights", float_entry(&[3, 3, 3, f, f])),
            ("seed_update/conv_lom/biases", float_entry(&[1])),
            (
                "seed_update/conv_lom/weights",
                float_entry(&[1, 1, 1, f, 1]),
            ),
        ];
        let mut rows: Vec<(u64, &[u8], &[u8])> = vec![(0, b"", &[0x08, 1])];
        rows.extend(entries.iter().map(|(k, e)| (0, k.as_bytes(), e.as_slice())));
        let data = block(&rows);
        let n = data.len() as u64;
        let index = dir.path().join("model.ckpt-1.index");
        std::fs::write(&index, table(&[data], &[(0, n)])).unwrap();
        std::fs::write(
            dir.path().join("model.ckpt-1.data-00000-of-00001"),
            [0u8; 64],
        )
        .unwrap();
        let e = load_tf_model(&index).unwrap_err().to_string();
        assert!(
            e.contains("model.ckpt-1.data-00000-of-00001")
                && e.contains("expected 216000000 for float32 [3, 3, 3, 2, 1000000]"),
            "{e}"
        );
    }
}
