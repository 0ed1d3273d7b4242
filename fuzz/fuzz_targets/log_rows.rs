//! Lines of the text tables ffn-rs reads back: `train_log.csv`, `train_log.jsonl` (resuming a run)
//! and `learning.csv` (the learning-curve cache).
#![no_main]

use ffn_fuzz as _;
use ffn_io::learning::LearningRow;
use ffn_io::training::LogRow;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines() {
        if let Some(row) = LogRow::parse_csv(line) {
            let _ = row.json();
        }
        let _ = LogRow::parse_json(line);
        if let Some(row) = LearningRow::parse(line) {
            let _ = row.csv();
        }
    }
});
