//! TOML config files: the strict-key structs of `ffn import stack` / `ffn import labels` (the
//! same field kinds: strings, paths, booleans, all optional), a nested one, and free-form
//! TOML, through ffn-io's parser with its line/column and unknown-key messages.
#![no_main]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ffn_fuzz as _;
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;

/// The shape of `ffn import labels`'s config.
#[allow(dead_code)]
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct Labels {
    input: Option<PathBuf>,
    output: Option<String>,
    stack_dataset: Option<String>,
    transforms: Option<String>,
    no_transforms: Option<bool>,
}

/// Tables, arrays and numbers under strict keys.
#[allow(dead_code)]
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct Nested {
    steps: Option<u64>,
    lr: Option<f64>,
    fov: Option<[usize; 3]>,
    labels: Option<Labels>,
    volumes: Option<Vec<Labels>>,
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.toml");
    let _ = ffn_io::config::parse_toml::<Labels>(text, path).map_err(|e| e.to_string());
    let _ = ffn_io::config::parse_toml::<Nested>(text, path).map_err(|e| e.to_string());
    let _ = ffn_io::config::parse_toml::<BTreeMap<String, serde_json::Value>>(text, path)
        .map_err(|e| e.to_string());
});
