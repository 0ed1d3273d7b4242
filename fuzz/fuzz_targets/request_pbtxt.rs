//! A google/ffn inference request (`.pbtxt`, protobuf text format), then the network
//! architecture from its `model_args` JSON.
#![no_main]

use std::path::Path;

use ffn_core::model_spec::ModelConfig;
use ffn_fuzz as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.pbtxt");
    if let Ok(request) = ffn_io::parse_inference_request(text, path) {
        let _ = request.model_config(ModelConfig::default(), path);
    }
});
