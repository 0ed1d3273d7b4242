//! A TensorFlow tensor-bundle `.index` file (google/ffn checkpoints): the table footer and
//! blocks, the bundle header and every `BundleEntryProto`, then the mapping of the variables onto
//! a `convstack_3d` network. Block CRCs are not enforced in fuzzing builds, so mutations reach the
//! entries.
#![no_main]

use std::path::Path;

use ffn_fuzz as _;
use ffn_io::tf_bundle::{TfBundle, tf_model_config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(bundle) = TfBundle::parse("fuzz".into(), Path::new("fuzz.index"), data) else {
        return;
    };
    for e in bundle.entries() {
        let _ = (e.num_elements(), e.dtype.name(), e.dtype.size());
        assert!(
            bundle.entry(&e.name).is_some(),
            "entry {:?} not found",
            e.name
        );
        let _ = bundle.data_path(e.shard_id);
    }
    let _ = tf_model_config(&bundle);
});
