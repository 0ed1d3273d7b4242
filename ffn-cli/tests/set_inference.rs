//! `ffn set-inference` records inference settings with a model; `ffn infer` then starts from them
//! (and says so), a flag still wins, and bad input is a clear error.

use std::path::Path;
use std::process::{Command, Output};

use ffn_core::model_spec::ModelConfig;
use ffn_io::checkpoint::{Checkpoint, load_checkpoint, save_checkpoint};
use serde_json::Value;

fn ffn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ffn"))
        .args(args)
        .output()
        .expect("running ffn")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A small model (weights 0.01) and a 20^3 image in `dir`; returns their paths.
fn model_and_image(dir: &Path) -> (String, String) {
    let model = ModelConfig {
        depth: 1,
        features: 4,
        fov: [7, 7, 7],
        deltas: [2, 2, 2],
    };
    let ck = Checkpoint {
        model,
        params: vec![0.01; model.num_params()],
        optimizer: vec![("adam_m".into(), vec![0.5; 3])],
        step: 12,
        rng_state: [1, 2, 3, 4],
        training_config: serde_json::json!({ "config": { "seed": 3 } }),
    };
    let path = dir.join("m.safetensors");
    save_checkpoint(&path, &ck).unwrap();
    let image = ffn_io::VolumeSpec::new(dir.join("v.h5"), "raw");
    let voxels =
        ndarray::Array3::from_shape_fn((20, 20, 20), |(z, y, x)| ((x * 7 + y * 3 + z) % 256) as u8);
    ffn_io::write_image_u8(&image, &voxels).unwrap();
    (path.display().to_string(), image.to_string())
}

/// `ffn infer --json` on the image with `model` and `extra` flags: its summary and stderr.
fn infer(dir: &Path, model: &str, image: &str, extra: &[&str]) -> (Value, String) {
    let out = format!("{}:seg", dir.join("seg.h5").display());
    let mut args = vec![
        "infer",
        "--image",
        image,
        "--checkpoint",
        model,
        "--out",
        &out,
    ];
    args.extend([
        "--seed-policy",
        "grid",
        "--grid-step",
        "8",
        "--json",
        "--quiet",
    ]);
    args.extend(extra);
    let o = ffn(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = serde_json::from_slice(&o.stdout).expect("one JSON summary");
    (summary, stderr(&o))
}

/// `ffn set-inference` of `plain` with `settings`, written to `tuned.safetensors` in `dir`: its
/// path and output (checked to have succeeded).
fn record(dir: &Path, plain: &str, settings: &[&str]) -> (String, Output) {
    let tuned = dir.join("tuned.safetensors").display().to_string();
    let mut args = vec!["set-inference", plain];
    args.extend(settings);
    args.extend(["--out", &tuned]);
    let o = ffn(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    (tuned, o)
}

#[test]
fn recorded_settings_are_used_by_infer_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, image) = model_and_image(dir.path());
    let settings = [
        "--segment-threshold",
        "0.5",
        "--min-segment-size",
        "3",
        "--chosen-on",
        "a test",
    ];
    let (tuned, o) = record(dir.path(), &plain, &settings);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("segment threshold 0.5, min segment size 3"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // Weights, step and optimiser state are the model's; the record is added.
    let (a, b) = (
        load_checkpoint(Path::new(&plain)).unwrap(),
        load_checkpoint(Path::new(&tuned)).unwrap(),
    );
    assert_eq!(
        (a.params, a.optimizer, a.step),
        (b.params, b.optimizer, b.step)
    );
    assert_eq!(b.training_config["config"]["seed"], 3);
    assert_eq!(
        b.training_config["inference_defaults"]["chosen_on"],
        "a test"
    );

    let (s, err) = infer(dir.path(), &tuned, &image, &[]);
    assert!(
        err.contains(
            "inference settings recorded with the model: segment threshold 0.5, min segment size 3"
        ),
        "{err}"
    );
    let opts = &s["options"];
    assert_eq!(
        (
            opts["segment_threshold"].as_f64(),
            opts["min_segment_size"].as_u64(),
            opts["move_threshold"].as_f64()
        ),
        (Some(0.5), Some(3), Some(0.9f32 as f64))
    );
    assert_eq!(s["model_inference_defaults"]["min_segment_size"], 3);

    let (s, _) = infer(dir.path(), &tuned, &image, &["--min-segment-size", "7"]);
    assert_eq!(s["options"]["min_segment_size"], 7, "the flag wins");
    assert_eq!(s["options"]["segment_threshold"], 0.5);

    let (s, err) = infer(dir.path(), &plain, &image, &[]);
    assert!(!err.contains("recorded with the model"), "{err}");
    assert_eq!(
        s["options"]["min_segment_size"], 1000,
        "google/ffn's default"
    );
    assert_eq!(s["model_inference_defaults"], Value::Null);
    assert_eq!(s["options"]["symmetries"], "none");
}

#[test]
fn recorded_symmetries_are_used_by_infer_and_the_flag_wins() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, image) = model_and_image(dir.path());
    let (tuned, _) = record(dir.path(), &plain, &["--symmetries", "flip-x,flip-y"]);
    let (s, err) = infer(dir.path(), &tuned, &image, &[]);
    assert!(
        err.contains("predictions averaged over symmetries flip-y,flip-x"),
        "{err}"
    );
    assert_eq!(s["options"]["symmetries"], "flip-y,flip-x");
    assert_eq!(s["model_inference_defaults"]["symmetries"], "flip-y,flip-x");
    let (s, _) = infer(dir.path(), &tuned, &image, &["--symmetries", "none"]);
    assert_eq!(s["options"]["symmetries"], "none", "the flag wins");
    let o = ffn(&[
        "infer",
        "--image",
        &image,
        "--checkpoint",
        &plain,
        "--out",
        "x.h5:seg",
        "--symmetries",
        "flip-x,mirror",
    ]);
    assert!(
        !o.status.success() && stderr(&o).contains("unknown symmetry \"mirror\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_settings_and_models_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, _) = model_and_image(dir.path());
    let out = dir.path().join("o.safetensors").display().to_string();
    let tf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/google-fib25/model.ckpt-27465036");
    let cases: [(Vec<&str>, &str); 3] = [
        (vec![&plain], "no settings to record"),
        (
            vec![&plain, "--move-threshold", "1.5"],
            "move_threshold: expected a probability strictly between 0 and 1, found 1.5",
        ),
        (
            vec![tf.to_str().unwrap(), "--segment-threshold", "0.5"],
            "a google/ffn TensorFlow checkpoint has no training configuration",
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["set-inference"];
        all.extend(args);
        all.extend(["--out", &out]);
        let o = ffn(&all);
        assert!(
            !o.status.success() && stderr(&o).contains(expected),
            "{all:?}: {}",
            stderr(&o)
        );
        assert!(!Path::new(&out).exists(), "nothing written on error");
    }
}
