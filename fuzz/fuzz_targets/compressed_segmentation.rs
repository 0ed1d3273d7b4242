//! A Neuroglancer `compressed_segmentation` chunk: the first three bytes choose the chunk size
//! (1..=16 per axis), the next three the block size (1..=8), the fourth whether it is uint64; the
//! rest is the chunk. What decodes re-encodes and decodes to the same labels.
#![no_main]

use ffn_fuzz as _;
use ffn_io::precomputed::compressed_segmentation as cseg;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((head, bytes)) = data.split_first_chunk::<7>() else {
        return;
    };
    let chunk = [0, 1, 2].map(|a| usize::from(head[a] % 16) + 1);
    let block = [0, 1, 2].map(|a| usize::from(head[3 + a] % 8) + 1);
    if head[6] % 2 == 0 {
        if let Ok(v) = cseg::decode_u64(bytes, chunk, block) {
            let again = cseg::decode_u64(&cseg::encode_u64(&v, chunk, block), chunk, block);
            assert_eq!(again.as_ref(), Ok(&v));
        }
    } else if let Ok(v) = cseg::decode_u32(bytes, chunk, block) {
        let again = cseg::decode_u32(&cseg::encode_u32(&v, chunk, block), chunk, block);
        assert_eq!(again.as_ref(), Ok(&v));
    }
});
