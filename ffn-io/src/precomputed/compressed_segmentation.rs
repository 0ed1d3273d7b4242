//! Neuroglancer `compressed_segmentation` chunk encoding (uint32 and uint64 labels).
//!
//! This is the label encoding of the Neuroglancer "precomputed" volume format
//! (`"encoding": "compressed_segmentation"` in the scale's `info` entry, with the block size
//! in `"compressed_segmentation_block_size"`).
//!
//! # Layout
//!
//! A chunk starts with one little-endian `u32` per channel, the offset (in 32-bit words from
//! the start of the chunk) of that channel's data. **Only single-channel chunks are
//! supported**: the chunk starts with the word `1`, followed by the channel data.
//!
//! The channel is split into a grid of blocks (`grid = ceil(chunk / block)` per axis). The
//! channel data starts with one 2-word header per block, in block-grid order (x fastest):
//!
//! - word 0: lookup-table offset (low 24 bits) and encoded bits (high 8 bits, one of
//!   0, 1, 2, 4, 8, 16, 32);
//! - word 1: encoded-values offset.
//!
//! Both offsets count 32-bit words from the start of the channel data (not of the chunk).
//! Each voxel of a block stores an index into the block's lookup table with `encoded bits`
//! bits, packed little-endian into 32-bit words; the voxel at `(x, y, z)` within the block
//! has index number `x + bx * (y + by * z)` for the *full* block size `(bx, by, bz)`, even
//! for the partial blocks at the chunk's upper edge (their padding positions hold any
//! index; this encoder leaves them 0). The lookup table holds one `u32` (uint32 volumes) or
//! two words, low word first (uint64 volumes), per entry. Its length is not stored: a
//! decoder can only check indices against the end of the buffer. Several blocks may share
//! one lookup table.
//!
//! The encoder follows the reference layout (encoded values of each block, then its sorted
//! lookup table unless an identical table was already written), so its output matches the
//! reference encoders byte for byte.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;

/// Why a chunk could not be decoded (corrupt or truncated data, or unsupported parameters).
///
/// `reason` names what was expected and what was found, with the block and word offset
/// where it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsegError {
    /// Human-readable description of the problem.
    pub reason: String,
}

impl CsegError {
    fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for CsegError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "compressed_segmentation: {}", self.reason)
    }
}

impl std::error::Error for CsegError {}

/// Encodes one channel of one chunk of uint64 labels.
///
/// `values` are x fastest, then y, then z; `chunk` is the chunk's actual size `[x, y, z]`
/// (edge chunks of a volume are smaller than the nominal chunk size); `block` is the
/// compression block size `[x, y, z]`. Returns the chunk's bytes, starting with the
/// one-channel header.
///
/// # Panics
///
/// If `values.len()` is not the chunk's voxel count, if a chunk or block dimension is 0, or
/// if the encoding outgrows the format's offsets (lookup tables beyond 2^24 words, i.e.
/// more than 64 MiB of encoded data in one chunk).
pub fn encode_u64(values: &[u64], chunk: [usize; 3], block: [usize; 3]) -> Vec<u8> {
    encode(values, chunk, block)
}

/// Encodes one channel of one chunk of uint32 labels.
///
/// Same layout and arguments as [`encode_u64`], with one word per lookup-table entry.
///
/// # Panics
///
/// Under the same conditions as [`encode_u64`].
pub fn encode_u32(values: &[u32], chunk: [usize; 3], block: [usize; 3]) -> Vec<u8> {
    encode(values, chunk, block)
}

/// Decodes a one-channel chunk of uint64 labels of size `chunk` `[x, y, z]`.
///
/// Returns the labels x fastest, then y, then z. Never panics and never allocates more
/// than the chunk's voxels (plus small overhead), whatever the bytes say.
///
/// # Errors
///
/// If a chunk or block dimension is 0, if the chunk does not hold exactly one channel, or
/// if the data is truncated or corrupt (an offset or index outside the buffer, encoded bits
/// not in {0, 1, 2, 4, 8, 16, 32}); the error names the block and word offset.
pub fn decode_u64(
    bytes: &[u8],
    chunk: [usize; 3],
    block: [usize; 3],
) -> Result<Vec<u64>, CsegError> {
    decode(bytes, chunk, block)
}

/// Decodes a one-channel chunk of uint32 labels of size `chunk` `[x, y, z]`.
///
/// Same behaviour as [`decode_u64`], with one word per lookup-table entry.
///
/// # Errors
///
/// Under the same conditions as [`decode_u64`].
pub fn decode_u32(
    bytes: &[u8],
    chunk: [usize; 3],
    block: [usize; 3],
) -> Result<Vec<u32>, CsegError> {
    decode(bytes, chunk, block)
}

/// Largest lookup-table offset the 24-bit header field can hold.
const MAX_TABLE_OFFSET: usize = (1 << 24) - 1;
/// Words per block header.
const BLOCK_HEADER_WORDS: usize = 2;
/// The single channel's data starts right after the one-word channel header.
const SINGLE_CHANNEL_OFFSET: u32 = 1;

/// A label type: the lookup-table entry width is the only difference between u32 and u64.
trait Label: Copy + Ord + Hash + Default {
    /// 32-bit words per lookup-table entry.
    const WORDS: usize;
    /// Appends the entry's words, low word first.
    fn push_words(self, out: &mut Vec<u32>);
    /// Reads the entry starting at word `at`, or `None` if it runs past the buffer.
    fn read_words(words: Words<'_>, at: usize) -> Option<Self>;
}

impl Label for u32 {
    const WORDS: usize = 1;

    fn push_words(self, out: &mut Vec<u32>) {
        out.push(self);
    }

    fn read_words(words: Words<'_>, at: usize) -> Option<Self> {
        words.get(at)
    }
}

impl Label for u64 {
    const WORDS: usize = 2;

    fn push_words(self, out: &mut Vec<u32>) {
        out.push(self as u32);
        out.push((self >> 32) as u32);
    }

    fn read_words(words: Words<'_>, at: usize) -> Option<Self> {
        let low = words.get(at)?;
        let high = words.get(at.checked_add(1)?)?;
        Some(u64::from(low) | (u64::from(high) << 32))
    }
}

/// A little-endian view of a byte buffer as 32-bit words (any trailing partial word ignored).
#[derive(Clone, Copy)]
struct Words<'a> {
    bytes: &'a [u8],
}

impl<'a> Words<'a> {
    fn len(self) -> usize {
        self.bytes.len() / 4
    }

    fn get(self, index: usize) -> Option<u32> {
        let start = index.checked_mul(4)?;
        let word = self.bytes.get(start..start.checked_add(4)?)?;
        Some(u32::from_le_bytes(word.try_into().ok()?))
    }

    /// The words from `offset` on (empty if `offset` is past the end).
    fn skip(self, offset: usize) -> Words<'a> {
        let start = offset.saturating_mul(4).min(self.bytes.len());
        Words {
            bytes: &self.bytes[start..],
        }
    }
}

/// Chunk and block sizes, validated, with the block grid derived from them.
struct Geometry {
    chunk: [usize; 3],
    block: [usize; 3],
    grid: [usize; 3],
    voxel_count: usize,
    block_volume: usize,
    block_count: usize,
}

/// One block of the grid: its grid position, first voxel and (clipped) extent in voxels.
struct BlockBox {
    grid_position: [usize; 3],
    origin: [usize; 3],
    extent: [usize; 3],
}

impl Geometry {
    fn new(chunk: [usize; 3], block: [usize; 3]) -> Result<Self, CsegError> {
        if chunk.contains(&0) {
            return Err(CsegError::new(format!(
                "chunk size {chunk:?} has a zero dimension"
            )));
        }
        if block.contains(&0) {
            return Err(CsegError::new(format!(
                "block size {block:?} has a zero dimension"
            )));
        }
        let grid = [0, 1, 2].map(|axis| chunk[axis].div_ceil(block[axis]));
        let too_large = |what: &str, size: [usize; 3]| {
            CsegError::new(format!(
                "{what} {size:?} has more elements than fit in memory"
            ))
        };
        let voxel_count = product(chunk).ok_or_else(|| too_large("chunk size", chunk))?;
        let block_volume = product(block).ok_or_else(|| too_large("block size", block))?;
        let block_count = product(grid).ok_or_else(|| too_large("block grid", grid))?;
        Ok(Self {
            chunk,
            block,
            grid,
            voxel_count,
            block_volume,
            block_count,
        })
    }

    /// Header words of all blocks (cannot overflow: at most 2 per voxel).
    fn header_words(&self) -> usize {
        self.block_count * BLOCK_HEADER_WORDS
    }

    /// The block whose header is number `index` (x fastest, then y, then z).
    fn block_box(&self, index: usize) -> BlockBox {
        let grid_position = [
            index % self.grid[0],
            index / self.grid[0] % self.grid[1],
            index / self.grid[0] / self.grid[1],
        ];
        let origin = [0, 1, 2].map(|axis| grid_position[axis] * self.block[axis]);
        let extent = [0, 1, 2].map(|axis| self.block[axis].min(self.chunk[axis] - origin[axis]));
        BlockBox {
            grid_position,
            origin,
            extent,
        }
    }

    /// `(index in chunk, index in full block)` of every voxel of `block` that lies in the chunk.
    fn voxels(&self, block: &BlockBox) -> impl Iterator<Item = (usize, usize)> {
        let [cx, cy, _] = self.chunk;
        let [bx, by, _] = self.block;
        let [ox, oy, oz] = block.origin;
        let [ex, ey, ez] = block.extent;
        (0..ez).flat_map(move |z| {
            (0..ey).flat_map(move |y| {
                (0..ex).map(move |x| {
                    let in_chunk = (ox + x) + cx * ((oy + y) + cy * (oz + z));
                    let in_block = x + bx * (y + by * z);
                    (in_chunk, in_block)
                })
            })
        })
    }
}

fn product(size: [usize; 3]) -> Option<usize> {
    size[0].checked_mul(size[1])?.checked_mul(size[2])
}

/// Smallest allowed encoded-bit count whose indices can address `distinct` table entries.
fn encoded_bits_for(distinct: usize) -> u32 {
    [0, 1, 2, 4, 8, 16, 32]
        .into_iter()
        .find(|&bits| (1u64 << bits) >= distinct as u64)
        .unwrap_or(32)
}

fn is_valid_encoded_bits(bits: u32) -> bool {
    bits == 0 || (bits <= 32 && bits.is_power_of_two())
}

/// 32-bit words holding `bits`-bit indices of `block_volume` voxels, or `None` on overflow.
fn encoded_words(bits: u32, block_volume: usize) -> Option<usize> {
    Some((bits as usize).checked_mul(block_volume)?.div_ceil(32))
}

fn encode<L: Label>(values: &[L], chunk: [usize; 3], block: [usize; 3]) -> Vec<u8> {
    let geometry = Geometry::new(chunk, block).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        values.len(),
        geometry.voxel_count,
        "compressed_segmentation: {} values given for a chunk of size {chunk:?}",
        values.len()
    );
    let mut words = vec![SINGLE_CHANNEL_OFFSET];
    words.extend(encode_channel(values, &geometry));
    words.iter().flat_map(|word| word.to_le_bytes()).collect()
}

/// Encodes the channel data: block headers, then each block's values and (new) table.
fn encode_channel<L: Label>(values: &[L], geometry: &Geometry) -> Vec<u32> {
    let mut out = vec![0u32; geometry.header_words()];
    let mut table_offsets: HashMap<Vec<L>, usize> = HashMap::new();
    for index in 0..geometry.block_count {
        let block = geometry.block_box(index);
        let [table_word, values_word] =
            encode_block(values, geometry, &block, &mut table_offsets, &mut out);
        out[index * BLOCK_HEADER_WORDS] = table_word;
        out[index * BLOCK_HEADER_WORDS + 1] = values_word;
    }
    out
}

/// Appends one block's encoded values (and its lookup table unless an identical one was
/// already written) to `out`; returns the block's two header words.
fn encode_block<L: Label>(
    values: &[L],
    geometry: &Geometry,
    block: &BlockBox,
    table_offsets: &mut HashMap<Vec<L>, usize>,
    out: &mut Vec<u32>,
) -> [u32; 2] {
    let table = sorted_distinct(geometry.voxels(block).map(|(in_chunk, _)| values[in_chunk]));
    let bits = encoded_bits_for(table.len());
    let values_offset = out.len();
    let word_count =
        encoded_words(bits, geometry.block_volume).expect("encoded size overflows usize");
    out.resize(values_offset + word_count, 0);
    if bits > 0 {
        for (in_chunk, in_block) in geometry.voxels(block) {
            let index = table.binary_search(&values[in_chunk]).unwrap_or_default() as u32;
            let bit_offset = in_block * bits as usize;
            out[values_offset + bit_offset / 32] |= index << (bit_offset % 32);
        }
    }
    let table_offset = *table_offsets.entry(table).or_insert_with_key(|table| {
        let offset = out.len();
        table.iter().for_each(|&label| label.push_words(out));
        offset
    });
    assert!(
        table_offset <= MAX_TABLE_OFFSET,
        "compressed_segmentation: lookup table offset {table_offset} exceeds the 24-bit limit; use a smaller chunk"
    );
    let values_word = u32::try_from(values_offset)
        .expect("encoded values offset exceeds 32 bits; use a smaller chunk");
    [table_offset as u32 | (bits << 24), values_word]
}

fn sorted_distinct<L: Label>(labels: impl Iterator<Item = L>) -> Vec<L> {
    let mut table: Vec<L> = labels.collect();
    table.sort_unstable();
    table.dedup();
    table
}

fn decode<L: Label>(
    bytes: &[u8],
    chunk: [usize; 3],
    block: [usize; 3],
) -> Result<Vec<L>, CsegError> {
    let geometry = Geometry::new(chunk, block)?;
    let channel = single_channel_data(bytes)?;
    if channel.len() < geometry.header_words() {
        return Err(CsegError::new(format!(
            "truncated: expected {} block header words for {} blocks (grid {:?}), found {} words of channel data",
            geometry.header_words(),
            geometry.block_count,
            geometry.grid,
            channel.len()
        )));
    }
    let mut out = vec![L::default(); geometry.voxel_count];
    for index in 0..geometry.block_count {
        decode_block(channel, &geometry, index, &mut out)?;
    }
    Ok(out)
}

/// Checks the one-channel header and returns the channel's data.
fn single_channel_data(bytes: &[u8]) -> Result<Words<'_>, CsegError> {
    if !bytes.len().is_multiple_of(4) {
        return Err(CsegError::new(format!(
            "expected a whole number of 32-bit words, found {} bytes",
            bytes.len()
        )));
    }
    let words = Words { bytes };
    let first = words.get(0).ok_or_else(|| {
        CsegError::new("truncated: expected a 4-byte channel header, found 0 bytes")
    })?;
    if first != SINGLE_CHANNEL_OFFSET {
        return Err(CsegError::new(format!(
            "only one channel is supported: expected the channel offset word 1, found {first} \
             (a {first}-channel chunk or corrupt data)"
        )));
    }
    Ok(words.skip(1))
}

/// The parsed and checked header of one block.
struct BlockHeader {
    table_offset: usize,
    table_entries: usize,
    bits: u32,
    values_offset: usize,
}

fn read_block_header<L: Label>(
    channel: Words<'_>,
    geometry: &Geometry,
    index: usize,
    block: &BlockBox,
) -> Result<BlockHeader, CsegError> {
    let at = index * BLOCK_HEADER_WORDS;
    let fail = |what: String| {
        CsegError::new(format!(
            "block {:?} (header at channel word {at}): {what}",
            block.grid_position
        ))
    };
    let (Some(table_word), Some(values_word)) = (channel.get(at), channel.get(at + 1)) else {
        return Err(fail(format!(
            "truncated header, channel has {} words",
            channel.len()
        )));
    };
    let table_offset = (table_word & 0x00ff_ffff) as usize;
    let bits = table_word >> 24;
    let values_offset = values_word as usize;
    if !is_valid_encoded_bits(bits) {
        return Err(fail(format!(
            "expected encoded bits 0, 1, 2, 4, 8, 16 or 32, found {bits}"
        )));
    }
    let word_count = encoded_words(bits, geometry.block_volume).ok_or_else(|| {
        fail(format!(
            "{bits}-bit values of a {:?} block overflow",
            geometry.block
        ))
    })?;
    if values_offset.saturating_add(word_count) > channel.len() {
        return Err(fail(format!(
            "expected {word_count} encoded-value words at channel word {values_offset}, \
             but the channel has {} words",
            channel.len()
        )));
    }
    let table_entries = channel.len().saturating_sub(table_offset) / L::WORDS;
    if table_entries == 0 {
        return Err(fail(format!(
            "expected a lookup table at channel word {table_offset}, but the channel has {} words",
            channel.len()
        )));
    }
    Ok(BlockHeader {
        table_offset,
        table_entries,
        bits,
        values_offset,
    })
}

fn decode_block<L: Label>(
    channel: Words<'_>,
    geometry: &Geometry,
    index: usize,
    out: &mut [L],
) -> Result<(), CsegError> {
    let block = geometry.block_box(index);
    let header = read_block_header::<L>(channel, geometry, index, &block)?;
    for (in_chunk, in_block) in geometry.voxels(&block) {
        let table_index = read_table_index(channel, &header, in_block).ok_or_else(|| {
            CsegError::new(format!(
                "block {:?}: encoded values at channel word {} run past the buffer",
                block.grid_position, header.values_offset
            ))
        })?;
        out[in_chunk] = read_table_entry(channel, &header, table_index).ok_or_else(|| {
            CsegError::new(format!(
                "block {:?}: index {table_index} is beyond the lookup table at channel word {} \
                 ({} entries to the end of the buffer)",
                block.grid_position, header.table_offset, header.table_entries
            ))
        })?;
    }
    Ok(())
}

/// The lookup-table index stored for the voxel with number `in_block` in its block.
fn read_table_index(channel: Words<'_>, header: &BlockHeader, in_block: usize) -> Option<usize> {
    if header.bits == 0 {
        return Some(0);
    }
    let bit_offset = in_block.checked_mul(header.bits as usize)?;
    let word = channel.get(header.values_offset.checked_add(bit_offset / 32)?)?;
    let mask = u32::MAX >> (32 - header.bits);
    Some(((word >> (bit_offset % 32)) & mask) as usize)
}

fn read_table_entry<L: Label>(
    channel: Words<'_>,
    header: &BlockHeader,
    table_index: usize,
) -> Option<L> {
    if table_index >= header.table_entries {
        return None;
    }
    L::read_words(channel, header.table_offset + table_index * L::WORDS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// Folder holding the tensorstore-written fixtures (one sub-folder per volume).
    const FIXTURE_ROOT: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/compressed_segmentation"
    );

    /// Small deterministic generator (xorshift64).
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        fn below(&mut self, bound: usize) -> usize {
            (self.next() % bound as u64) as usize
        }

        /// A size in `1..=max` per axis.
        fn size(&mut self, max: usize) -> [usize; 3] {
            [0; 3].map(|_| 1 + self.below(max))
        }
    }

    const SHAPES: [([usize; 3], [usize; 3]); 7] = [
        ([13, 7, 5], [8, 8, 8]),
        ([64, 64, 64], [8, 8, 8]),
        ([13, 7, 5], [4, 4, 2]),
        ([16, 16, 8], [4, 4, 2]),
        ([1, 1, 1], [8, 8, 8]),
        ([9, 17, 3], [3, 5, 7]),
        ([5, 4, 3], [1, 1, 1]),
    ];

    fn voxel_count(chunk: [usize; 3]) -> usize {
        chunk.iter().product()
    }

    fn random_labels(rng: &mut XorShift, count: usize, distinct: usize) -> Vec<u64> {
        let alphabet: Vec<u64> = (0..distinct).map(|_| rng.next()).collect();
        (0..count).map(|_| alphabet[rng.below(distinct)]).collect()
    }

    fn assert_round_trip_u64(values: &[u64], chunk: [usize; 3], block: [usize; 3]) {
        let bytes = encode_u64(values, chunk, block);
        assert_eq!(
            decode_u64(&bytes, chunk, block).unwrap(),
            values,
            "u64 {chunk:?} {block:?}"
        );
    }

    fn assert_round_trip_u32(values: &[u32], chunk: [usize; 3], block: [usize; 3]) {
        let bytes = encode_u32(values, chunk, block);
        assert_eq!(
            decode_u32(&bytes, chunk, block).unwrap(),
            values,
            "u32 {chunk:?} {block:?}"
        );
    }

    /// Header words `[table word, values word]` of block `index` of an encoded chunk.
    fn block_header(bytes: &[u8], index: usize) -> [u32; 2] {
        let word = |at: usize| u32::from_le_bytes(bytes[4 * at..4 * at + 4].try_into().unwrap());
        [word(1 + 2 * index), word(2 + 2 * index)]
    }

    fn encoded_bits_of(bytes: &[u8], index: usize) -> u32 {
        block_header(bytes, index)[0] >> 24
    }

    fn table_offset_of(bytes: &[u8], index: usize) -> u32 {
        block_header(bytes, index)[0] & 0x00ff_ffff
    }

    #[test]
    fn round_trips_random_labels_over_shapes() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for (chunk, block) in SHAPES {
            for distinct in [1, 2, 3, 5, 40, 300] {
                let values = random_labels(&mut rng, voxel_count(chunk), distinct);
                assert_round_trip_u64(&values, chunk, block);
                let narrow: Vec<u32> = values.iter().map(|&v| v as u32).collect();
                assert_round_trip_u32(&narrow, chunk, block);
            }
        }
    }

    #[test]
    fn uniform_chunk_uses_zero_bits_and_one_shared_table() {
        let (chunk, block) = ([13, 7, 5], [4, 4, 2]);
        let blocks = 4 * 2 * 3;
        let bytes = encode_u64(&vec![42; voxel_count(chunk)], chunk, block);
        assert_eq!(
            bytes.len(),
            4 * (1 + 2 * blocks + 2),
            "headers plus one 2-word entry"
        );
        for index in 0..blocks {
            assert_eq!(encoded_bits_of(&bytes, index), 0);
            assert_eq!(table_offset_of(&bytes, index), 2 * blocks as u32);
        }
        assert_eq!(
            decode_u64(&bytes, chunk, block).unwrap(),
            vec![42; voxel_count(chunk)]
        );
        assert_round_trip_u32(&vec![7; voxel_count(chunk)], chunk, block);
    }

    #[test]
    fn encoded_bits_follow_the_number_of_distinct_values() {
        let (chunk, block) = ([8, 8, 8], [8, 8, 8]);
        let cases = [
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 4),
            (16, 4),
            (17, 8),
            (256, 8),
            (257, 16),
            (512, 16),
        ];
        for (distinct, bits) in cases {
            let values: Vec<u64> = (0..512)
                .map(|i| (1 << 40) + (i % distinct) as u64 * 3)
                .collect();
            let bytes = encode_u64(&values, chunk, block);
            assert_eq!(
                encoded_bits_of(&bytes, 0),
                bits,
                "{distinct} distinct values"
            );
            assert_round_trip_u64(&values, chunk, block);
            let narrow: Vec<u32> = values.iter().map(|&v| v as u32).collect();
            assert_eq!(encoded_bits_of(&encode_u32(&narrow, chunk, block), 0), bits);
            assert_round_trip_u32(&narrow, chunk, block);
        }
    }

    #[test]
    fn more_than_65536_distinct_values_in_one_block_use_32_bits() {
        let (chunk, block) = ([64, 64, 32], [64, 64, 32]);
        let values: Vec<u64> = (0..voxel_count(chunk) as u64)
            .map(|i| i * 0x1_0000_0001 + 5)
            .collect();
        let bytes = encode_u64(&values, chunk, block);
        assert_eq!(encoded_bits_of(&bytes, 0), 32);
        assert_round_trip_u64(&values, chunk, block);
        let narrow: Vec<u32> = (0..voxel_count(chunk) as u32).rev().collect();
        assert_eq!(encoded_bits_of(&encode_u32(&narrow, chunk, block), 0), 32);
        assert_round_trip_u32(&narrow, chunk, block);
    }

    #[test]
    fn identical_tables_are_shared_between_blocks() {
        // Three 4x4x4 blocks along x: the first two hold {3, 9}, the third {3, 10}.
        let (chunk, block) = ([12, 4, 4], [4, 4, 4]);
        let values: Vec<u32> = (0..voxel_count(chunk))
            .map(|i| match (i % 12 / 4, i % 2) {
                (2, 1) => 10,
                (_, 1) => 9,
                _ => 3,
            })
            .collect();
        let bytes = encode_u32(&values, chunk, block);
        assert_eq!(table_offset_of(&bytes, 0), table_offset_of(&bytes, 1));
        assert_ne!(table_offset_of(&bytes, 0), table_offset_of(&bytes, 2));
        // Headers 6 words, then per block 2 words of 1-bit values; tables of 2 entries for
        // blocks 0 and 2 only.
        assert_eq!(bytes.len(), 4 * (1 + 6 + 3 * 2 + 2 * 2));
        assert_round_trip_u32(&values, chunk, block);
    }

    #[test]
    fn partial_blocks_are_laid_out_with_the_full_block_size() {
        // Block 1 covers x 8..13 only, but its 1-bit values still take 8*8*8 bits.
        let (chunk, block) = ([13, 7, 5], [8, 8, 8]);
        let values: Vec<u32> = (0..voxel_count(chunk) as u32).map(|i| i % 2).collect();
        let bytes = encode_u32(&values, chunk, block);
        let [_, values_0] = block_header(&bytes, 0);
        let [_, values_1] = block_header(&bytes, 1);
        assert_eq!(values_0, 4);
        assert_eq!(table_offset_of(&bytes, 0), values_0 + 16);
        assert_eq!(
            values_1,
            values_0 + 16 + 2,
            "16 value words and a 2-entry table before it"
        );
        assert_round_trip_u32(&values, chunk, block);
    }

    #[test]
    fn decoder_accepts_tables_before_values_and_nonzero_padding() {
        // Chunk [3, 1, 1], block [2, 1, 1]: two blocks sharing the table [10, 20] placed
        // right after the headers; block 1's padding voxel has index 1.
        let channel: [u32; 8] = [4 | (1 << 24), 6, 4 | (1 << 24), 7, 10, 20, 0b01, 0b11];
        let bytes: Vec<u8> = std::iter::once(1u32)
            .chain(channel)
            .flat_map(u32::to_le_bytes)
            .collect();
        assert_eq!(
            decode_u32(&bytes, [3, 1, 1], [2, 1, 1]).unwrap(),
            vec![20, 10, 20]
        );
    }

    #[test]
    fn rejects_zero_sizes_and_other_channel_counts() {
        let bytes = encode_u64(&[1, 2, 3, 4], [2, 2, 1], [2, 2, 2]);
        for (chunk, block) in [([0, 2, 1], [2, 2, 2]), ([2, 2, 1], [2, 0, 2])] {
            let error = decode_u64(&bytes, chunk, block).unwrap_err();
            assert!(error.reason.contains("zero dimension"), "{error}");
        }
        let mut two_channels = bytes.clone();
        two_channels[0] = 2;
        let error = decode_u64(&two_channels, [2, 2, 1], [2, 2, 2]).unwrap_err();
        assert!(error.reason.contains("only one channel"), "{error}");
        let error = decode_u64(&[], [2, 2, 1], [2, 2, 2]).unwrap_err();
        assert!(error.reason.contains("channel header"), "{error}");
    }

    #[test]
    fn rejects_bad_encoded_bits_and_out_of_range_offsets() {
        let (chunk, block) = ([4, 4, 4], [4, 4, 4]);
        let values: Vec<u64> = (0..64).map(|i| i % 3).collect();
        let good = encode_u64(&values, chunk, block);
        let with_header = |table_word: u32, values_word: u32| {
            let mut bytes = good.clone();
            bytes[4..8].copy_from_slice(&table_word.to_le_bytes());
            bytes[8..12].copy_from_slice(&values_word.to_le_bytes());
            bytes
        };
        let [table_word, values_word] = block_header(&good, 0);
        let cases = [
            (
                with_header((table_word & 0xff_ffff) | (3 << 24), values_word),
                "encoded bits",
            ),
            (
                with_header((table_word & 0xff_ffff) | (64 << 24), values_word),
                "encoded bits",
            ),
            (
                with_header(table_word, values_word + 1000),
                "encoded-value words",
            ),
            (with_header(table_word, u32::MAX), "encoded-value words"),
            (
                with_header(0x00ff_ffff | (2 << 24), values_word),
                "lookup table",
            ),
        ];
        for (bytes, expected) in cases {
            let error = decode_u64(&bytes, chunk, block).unwrap_err();
            assert!(error.reason.contains(expected), "{error}");
            assert!(error.reason.contains("block [0, 0, 0]"), "{error}");
        }
    }

    #[test]
    fn rejects_an_index_beyond_the_lookup_table() {
        let (chunk, block) = ([4, 4, 4], [4, 4, 4]);
        let values: Vec<u32> = (0..64).map(|i| i % 3).collect();
        let mut bytes = encode_u32(&values, chunk, block);
        // Point the table at its last entry: index 1 and 2 now run past the buffer.
        let last_entry = (bytes.len() / 4 - 2) as u32;
        bytes[4..8].copy_from_slice(&(last_entry | (2 << 24)).to_le_bytes());
        let error = decode_u32(&bytes, chunk, block).unwrap_err();
        assert!(error.reason.contains("beyond the lookup table"), "{error}");
    }

    #[test]
    fn every_truncation_is_an_error() {
        let mut rng = XorShift(7);
        let (chunk, block) = ([13, 7, 5], [4, 4, 2]);
        let values = random_labels(&mut rng, voxel_count(chunk), 3);
        let wide = encode_u64(&values, chunk, block);
        let narrow = encode_u32(
            &values.iter().map(|&v| v as u32).collect::<Vec<_>>(),
            chunk,
            block,
        );
        for length in 0..wide.len() {
            assert!(
                decode_u64(&wide[..length], chunk, block).is_err(),
                "u64 length {length}"
            );
        }
        for length in 0..narrow.len() {
            assert!(
                decode_u32(&narrow[..length], chunk, block).is_err(),
                "u32 length {length}"
            );
        }
    }

    #[test]
    fn random_byte_flips_never_panic() {
        let mut rng = XorShift(11);
        let (chunk, block) = ([13, 7, 5], [4, 4, 2]);
        let values = random_labels(&mut rng, voxel_count(chunk), 5);
        let good = encode_u64(&values, chunk, block);
        for _ in 0..3000 {
            let mut bytes = good.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(bytes.len());
                bytes[at] ^= 1 << rng.below(8);
            }
            if let Ok(decoded) = decode_u64(&bytes, chunk, block) {
                assert_eq!(decoded.len(), voxel_count(chunk));
            }
            if let Ok(decoded) = decode_u32(&bytes, chunk, block) {
                assert_eq!(decoded.len(), voxel_count(chunk));
            }
        }
    }

    /// A random buffer that is plausible enough to reach the block decoder: a channel word
    /// of 1 and headers with small offsets and mostly valid encoded bits.
    fn random_chunk_bytes(rng: &mut XorShift) -> Vec<u8> {
        let words = rng.below(64);
        let mut out: Vec<u32> = (0..words)
            .map(|_| match rng.below(4) {
                0 => rng.next() as u32,
                1 => rng.below(words + 2) as u32,
                _ => rng.below(words + 2) as u32 | ([0, 1, 2, 4, 8, 16, 32, 5][rng.below(8)] << 24),
            })
            .collect();
        if rng.below(8) != 0 && !out.is_empty() {
            out[0] = 1;
        }
        let mut bytes: Vec<u8> = out.iter().flat_map(|word| word.to_le_bytes()).collect();
        if rng.below(8) == 0 {
            bytes.push(rng.next() as u8);
        }
        bytes
    }

    #[test]
    fn random_buffers_never_panic() {
        let mut rng = XorShift(0xdead_beef);
        let mut decoded = 0;
        for _ in 0..5000 {
            let bytes = random_chunk_bytes(&mut rng);
            let (chunk, block) = (rng.size(16), rng.size(16));
            if let Ok(values) = decode_u64(&bytes, chunk, block) {
                assert_eq!(values.len(), voxel_count(chunk));
                decoded += 1;
            }
            if let Ok(values) = decode_u32(&bytes, chunk, block) {
                assert_eq!(values.len(), voxel_count(chunk));
                decoded += 1;
            }
        }
        assert!(
            decoded > 0,
            "the generator should reach successful decodes too"
        );
    }

    /// The label formula of `fixtures/make_fixtures.py`; `wide` adds ids above 2^40.
    fn fixture_label(x: usize, y: usize, z: usize, wide: bool) -> u64 {
        let mut value = if x >= 24 && y >= 16 && z >= 16 {
            (1000 + x + 37 * (y + 29 * z)) as u64
        } else {
            (x / 5 + 7 * (y / 6) + 50 * (z / 4)) as u64
        };
        if wide && (3 * x + 5 * y + 7 * z).is_multiple_of(23) {
            value = (1 << 40) + (value << 3) + (x % 5) as u64;
        }
        value
    }

    /// A tensorstore-written volume: folder name, whether uint64, block size.
    const FIXTURES: [(&str, bool, [usize; 3]); 4] = [
        ("u64_b888", true, [8, 8, 8]),
        ("u32_b888", false, [8, 8, 8]),
        ("u64_b444", true, [4, 4, 4]),
        ("u32_b423", false, [4, 2, 3]),
    ];
    const FIXTURE_SIZE: [usize; 3] = [37, 29, 21];

    /// Origin and size of a chunk from its file name `x0-x1_y0-y1_z0-z1`.
    fn chunk_box(name: &str) -> Option<([usize; 3], [usize; 3])> {
        let ranges: Vec<(usize, usize)> = name
            .split('_')
            .map(|range| {
                let (begin, end) = range.split_once('-')?;
                Some((begin.parse().ok()?, end.parse().ok()?))
            })
            .collect::<Option<_>>()?;
        let [x, y, z] = ranges[..] else { return None };
        Some(([x.0, y.0, z.0], [x.1 - x.0, y.1 - y.0, z.1 - z.0]))
    }

    /// `(path, origin, size)` of every chunk file of a fixture's only scale (key `1_1_1`).
    fn chunk_files(fixture: &Path) -> Vec<(PathBuf, [usize; 3], [usize; 3])> {
        let scale = fixture.join("1_1_1");
        let entries =
            std::fs::read_dir(&scale).unwrap_or_else(|e| panic!("{}: {e}", scale.display()));
        let mut files: Vec<_> = entries
            .map(|entry| entry.unwrap().path())
            .filter_map(|path| {
                let (origin, size) = chunk_box(path.file_name()?.to_str()?)?;
                Some((path, origin, size))
            })
            .collect();
        files.sort();
        files
    }

    fn expected_chunk(origin: [usize; 3], size: [usize; 3], wide: bool) -> Vec<u64> {
        let mut out = Vec::with_capacity(voxel_count(size));
        for z in origin[2]..origin[2] + size[2] {
            for y in origin[1]..origin[1] + size[1] {
                for x in origin[0]..origin[0] + size[0] {
                    out.push(fixture_label(x, y, z, wide));
                }
            }
        }
        out
    }

    fn assert_info_matches(fixture: &Path, wide: bool, block: [usize; 3]) {
        let info: String = std::fs::read_to_string(fixture.join("info"))
            .unwrap()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let data_type = if wide { "uint64" } else { "uint32" };
        for expected in [
            format!("\"data_type\":\"{data_type}\""),
            "\"encoding\":\"compressed_segmentation\"".to_string(),
            format!(
                "\"compressed_segmentation_block_size\":[{},{},{}]",
                block[0], block[1], block[2]
            ),
            format!(
                "\"size\":[{},{},{}]",
                FIXTURE_SIZE[0], FIXTURE_SIZE[1], FIXTURE_SIZE[2]
            ),
        ] {
            assert!(
                info.contains(&expected),
                "{}: info lacks {expected}",
                fixture.display()
            );
        }
        assert!(!info.contains("sharding"), "fixtures must be unsharded");
    }

    #[test]
    fn decodes_chunks_written_by_tensorstore() {
        for (name, wide, block) in FIXTURES {
            let fixture = Path::new(FIXTURE_ROOT).join(name);
            assert_info_matches(&fixture, wide, block);
            let files = chunk_files(&fixture);
            assert_eq!(files.len(), 3 * 2 * 3, "{name}: chunk files");
            for (path, origin, size) in files {
                let bytes = std::fs::read(&path).unwrap();
                let expected = expected_chunk(origin, size, wide);
                let decoded = if wide {
                    decode_u64(&bytes, size, block).unwrap()
                } else {
                    decode_u32(&bytes, size, block)
                        .unwrap()
                        .into_iter()
                        .map(u64::from)
                        .collect()
                };
                assert_eq!(decoded, expected, "{}", path.display());
            }
        }
    }

    #[test]
    fn reencoding_tensorstore_chunks_reproduces_their_bytes() {
        for (name, wide, block) in FIXTURES {
            for (path, origin, size) in chunk_files(&Path::new(FIXTURE_ROOT).join(name)) {
                let values = expected_chunk(origin, size, wide);
                let ours = if wide {
                    encode_u64(&values, size, block)
                } else {
                    let narrow: Vec<u32> = values.iter().map(|&v| v as u32).collect();
                    encode_u32(&narrow, size, block)
                };
                assert!(
                    ours == std::fs::read(&path).unwrap(),
                    "{}: bytes differ",
                    path.display()
                );
            }
        }
    }
}
