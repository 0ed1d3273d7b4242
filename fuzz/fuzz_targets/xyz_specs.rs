//! What users type for volumes and boxes: `FILE.h5:DATASET` specs, `x,y,z` triples (integers
//! and floats) and `--offset/--size` boxes checked against a volume. One value per line.
#![no_main]

use ffn_fuzz as _;
use ffn_io::VolumeSpec;
use ffn_io::xyz::{parse_box, parse_triple, parse_xyz};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.lines();
    let (a, b) = (lines.next(), lines.next());
    let _ = parse_box(a, b, [100, usize::MAX, 7], &"fuzz.h5:raw");
    for line in text.lines() {
        if let Ok(spec) = line.parse::<VolumeSpec>() {
            let _ = spec.to_string();
        }
        let _ = parse_xyz(line, "--fuzz");
        let _ = parse_triple::<f32>(line, "--fuzz");
    }
});
