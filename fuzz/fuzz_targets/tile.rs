//! A finished tile of a tiled segmentation (`tile_NNNNNN.bin` of a tile store): header, metadata
//! and the deflated labels. The expected tile index is the one in the header, so that mutations
//! get past the index check; the CRC is not enforced in fuzzing builds.
#![no_main]

use std::path::Path;

use ffn_fuzz as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let index = data
        .get(8..16)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    let Ok(index) = usize::try_from(index) else {
        return;
    };
    let _ = ffn_io::tile_store::decode_tile(data, Path::new("tile.bin"), index);
});
