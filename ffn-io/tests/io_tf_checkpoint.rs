//! Google's FIB-25 TensorFlow checkpoint, read natively, and corrupt copies of it.

use ffn_io::IoError;
use ffn_io::tf_bundle::{TfBundle, TfDtype, load_tf_model};
use std::path::{Path, PathBuf};

const STEM: &str = "model.ckpt-27465036";
const DATA: &str = "model.ckpt-27465036.data-00000-of-00001";

/// Google's FIB-25 model in the repository's `data/google-fib25/`. Missing data is a failure, not a
/// skip.
fn reference_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/google-fib25");
    assert!(
        dir.join(format!("{STEM}.index")).exists(),
        "test data missing: {} (expected data/google-fib25 in the repository)",
        dir.display()
    );
    dir
}

/// A writable copy of the bundle in a temp folder; returns (folder guard, prefix).
fn copy_bundle() -> (tempfile::TempDir, PathBuf) {
    let src = reference_dir();
    let tmp = tempfile::tempdir().unwrap();
    for f in [format!("{STEM}.index"), DATA.to_string()] {
        std::fs::copy(src.join(&f), tmp.path().join(&f)).unwrap();
    }
    let prefix = tmp.path().join(STEM);
    (tmp, prefix)
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x5A;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn fib25_bundle_lists_every_variable() {
    let bundle = TfBundle::open(&reference_dir().join(STEM)).unwrap();
    let names: Vec<&str> = bundle.entries().iter().map(|e| e.name.as_str()).collect();
    assert!(names.contains(&"global_step"), "{names:?}");
    assert_eq!(bundle.entry("global_step").unwrap().dtype, TfDtype::Int32);
    // 12 modules of 2 convs (conv0_a/b + 11 residual modules) + conv_lom, weights and biases each.
    let model_vars = names
        .iter()
        .filter(|n| n.starts_with("seed_update/"))
        .count();
    assert_eq!(model_vars, 2 * (2 * 12 + 1));
    let w = bundle.entry("seed_update/conv3_b/weights").unwrap();
    assert_eq!(
        (w.dtype, w.shape.as_slice()),
        (TfDtype::Float, &[3usize, 3, 3, 32, 32][..])
    );
    // Opening by the .index or the data file name gives the same bundle.
    let by_index = TfBundle::open(&reference_dir().join(format!("{STEM}.index"))).unwrap();
    let by_data = TfBundle::open(&reference_dir().join(DATA)).unwrap();
    assert_eq!(by_index.entries(), bundle.entries());
    assert_eq!(by_data.entries(), bundle.entries());
    // Every tensor's bytes pass their crc32c, including the non-float ones.
    for e in bundle.entries() {
        let raw = bundle.read_raw(&e.name).unwrap();
        assert_eq!(raw.len() as u64, e.size, "{}", e.name);
    }
}

#[test]
fn fib25_model_maps_onto_model_spec_order() {
    let prefix = reference_dir().join(STEM);
    let (cfg, params) = load_tf_model(&prefix).unwrap();
    assert_eq!(
        (cfg.depth, cfg.features, cfg.fov, cfg.deltas),
        (12, 32, [33; 3], [8; 3])
    );
    assert_eq!(params.len(), 638_433);
    assert_eq!(cfg.num_params(), 638_433);
    let bundle = TfBundle::open(&prefix).unwrap();
    for spec in cfg.param_specs() {
        let (shape, values) = bundle
            .read_f32(&format!("seed_update/{}", spec.name))
            .unwrap();
        assert_eq!(shape, spec.shape, "{}", spec.name);
        assert_eq!(
            &params[spec.offset..spec.offset + spec.len()],
            values.as_slice(),
            "{}",
            spec.name
        );
    }
    assert!(params.iter().all(|p| p.is_finite()));
    // A trained network: weights are not all zero and not init-sized only.
    let max = params.iter().fold(0f32, |m, p| m.max(p.abs()));
    assert!(max > 0.05, "max |w| = {max}");
    // The same through load_any_model.
    let (cfg2, params2) = ffn_io::load_any_model(&prefix).unwrap();
    assert_eq!((cfg2, params2), (cfg, params));
}

#[test]
fn corrupt_tensor_data_fails_its_crc() {
    let (_tmp, prefix) = copy_bundle();
    let bundle = TfBundle::open(&prefix).unwrap();
    let e = bundle.entry("seed_update/conv5_a/weights").unwrap().clone();
    flip_byte(&prefix.with_file_name(DATA), e.offset as usize + 1000);
    let err = load_tf_model(&prefix).unwrap_err();
    assert!(matches!(err, IoError::Crc { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(DATA)
            && msg.contains("seed_update/conv5_a/weights")
            && msg.contains("checksum"),
        "{msg}"
    );
    assert!(!msg.contains('\n'));
    // Other tensors are still readable.
    assert!(bundle.read_f32("seed_update/conv4_a/weights").is_ok());
}

#[test]
fn corrupt_index_block_fails_its_crc() {
    let (_tmp, prefix) = copy_bundle();
    let index = prefix.with_file_name(format!("{STEM}.index"));
    flip_byte(&index, 100);
    let msg = TfBundle::open(&prefix).unwrap_err().to_string();
    assert!(
        msg.contains(".index") && msg.contains("checksum mismatch in data block 0"),
        "{msg}"
    );
}

#[test]
fn truncated_files_are_reported() {
    let (_tmp, prefix) = copy_bundle();
    let index = prefix.with_file_name(format!("{STEM}.index"));
    let bytes = std::fs::read(&index).unwrap();
    std::fs::write(&index, &bytes[..bytes.len() - 7]).unwrap();
    let msg = load_tf_model(&prefix).unwrap_err().to_string();
    assert!(
        msg.contains("footer magic") && msg.contains("truncated"),
        "{msg}"
    );
    std::fs::write(&index, &bytes).unwrap();
    let data = prefix.with_file_name(DATA);
    let d = std::fs::read(&data).unwrap();
    std::fs::write(&data, &d[..d.len() / 2]).unwrap();
    let msg = load_tf_model(&prefix).unwrap_err().to_string();
    assert!(
        msg.contains(DATA) && msg.contains("past the end of the file"),
        "{msg}"
    );
    std::fs::remove_file(&data).unwrap();
    let msg = load_tf_model(&prefix).unwrap_err().to_string();
    assert!(msg.contains(DATA) && msg.contains("not found"), "{msg}");
}

#[test]
fn missing_checkpoint_and_foreign_file() {
    let tmp = tempfile::tempdir().unwrap();
    let msg = TfBundle::open(&tmp.path().join("model.ckpt-1"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("model.ckpt-1.index: file not found"), "{msg}");
    std::fs::write(tmp.path().join("x.index"), vec![7u8; 500]).unwrap();
    let msg = TfBundle::open(&tmp.path().join("x.index"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("x.index") && msg.contains("footer magic"),
        "{msg}"
    );
}
