//! A training coordinate file (`.coords`); whatever decodes encodes back to the same bytes.
#![no_main]

use std::path::Path;

use ffn_fuzz as _;
use ffn_io::coords::{decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = decode(data, Path::new("fuzz.coords")) {
        assert_eq!(encode(&file), data, "decode then encode changed the bytes");
    }
});
