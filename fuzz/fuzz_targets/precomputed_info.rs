//! A Neuroglancer precomputed `info` file; what parses gives its scale key and JSON back.
#![no_main]

use std::path::Path;

use ffn_fuzz as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(info) = ffn_io::precomputed::parse_info(text, Path::new("fuzz/info"), None) {
        let _ = info.key();
        let _ = info.to_json();
    }
});
