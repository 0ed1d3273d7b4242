//! An ffn-rs checkpoint's bytes: the safetensors header, our metadata JSON (model, step, RNG state,
//! optimiser buffer names, training config) and the tensors checked against them, then the training
//! normalisation recorded in the config.
#![no_main]

use std::path::Path;

use ffn_fuzz as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.safetensors");
    if let Ok(ckpt) = ffn_io::checkpoint::decode_checkpoint(path, data) {
        let _ = ffn_io::model::training_normalisation(path, &ckpt.training_config);
    }
});
