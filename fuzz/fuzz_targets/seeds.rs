//! A seed list (`ffn infer --seeds`), against a small box and against the largest one (whose
//! bounds would overflow a careless check).
#![no_main]

use ffn_fuzz as _;
use ffn_io::infer::parse_seed_list;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_seed_list(text, "fuzz.txt", [1, 2, 3], [40, 50, 60]);
    let _ = parse_seed_list(text, "fuzz.txt", [usize::MAX; 3], [usize::MAX; 3]);
});
