//! `ffn infer` and `ffn eval` end to end on a small synthetic volume with small hand-made models:
//! outputs, JSON reports, google/ffn requests, crops, and bad input giving one-line errors.

use std::path::Path;
use std::process::{Command, Output};

use ffn_core::model_spec::ModelConfig;
use ffn_core::synth::{SynthConfig, generate};
use ffn_io::checkpoint::{Checkpoint, save_checkpoint};
use ffn_io::{VolumeSpec, read_labels, write_image_u8, write_labels};
use serde_json::Value;

const FFN: &str = env!("CARGO_BIN_EXE_ffn");

fn ffn(args: &[&str], cwd: &Path) -> Output {
    Command::new(FFN)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("ffn runs")
}

fn ok(args: &[&str], cwd: &Path) -> String {
    let o = ffn(args, cwd);
    assert!(
        o.status.success(),
        "ffn {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails(args: &[&str], cwd: &Path) -> String {
    let o = ffn(args, cwd);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(
        o.status.code(),
        Some(1),
        "ffn {args:?}: expected exit 1, stderr: {err}"
    );
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    lines[0].to_string()
}

/// A depth-1 network whose weights are all zero and whose final bias is `bias`: it predicts
/// `seed + bias` everywhere.
fn constant_model(dir: &Path, name: &str, bias: f32) -> String {
    let model = ModelConfig {
        depth: 1,
        features: 4,
        fov: [9, 9, 9],
        deltas: [2, 2, 2],
    };
    save_model(dir, name, model, constant_params(&model, bias))
}

/// Weights of `model` all zero but the final bias, `bias`.
fn constant_params(model: &ModelConfig, bias: f32) -> Vec<f32> {
    let mut params = vec![0f32; model.num_params()];
    let lom = model
        .param_specs()
        .into_iter()
        .find(|p| p.name == "conv_lom/biases")
        .expect("conv_lom bias");
    params[lom.offset] = bias;
    params
}

/// The weights `params` of `model` saved as checkpoint `name` in `dir`; its path.
fn save_model(dir: &Path, name: &str, model: ModelConfig, params: Vec<f32>) -> String {
    let ck = Checkpoint {
        model,
        params,
        optimizer: vec![],
        step: 0,
        rng_state: [1, 2, 3, 4],
        training_config: serde_json::json!({}),
    };
    let path = dir.join(name);
    save_checkpoint(&path, &ck).expect("checkpoint saved");
    path.display().to_string()
}

fn setup(dir: &Path) {
    let v = generate(&SynthConfig {
        shape: [32, 36, 40],
        neurites: 10,
        ..SynthConfig::default()
    })
    .expect("synth");
    let data = dir.join("data.h5");
    write_image_u8(&VolumeSpec::new(&data, "raw"), &v.image).expect("raw written");
    write_labels(&VolumeSpec::new(&data, "labels"), &v.labels).expect("labels written");
}

fn json(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn infer_then_eval_with_a_flooding_model() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let ck = constant_model(d, "flood.safetensors", 6.0);
    let out = ok(
        &[
            "infer",
            "--image",
            "data.h5:raw",
            "--checkpoint",
            &ck,
            "--out",
            "seg.h5:seg",
            "--min-segment-size",
            "10",
            "--seed-policy",
            "grid",
            "--grid-step",
            "8",
            "--prob-out",
            "seg.h5:prob",
            "--quiet",
            "--json",
        ],
        d,
    );
    let s = json(&out);
    // Everything is "object": floods are large, but a flat prediction makes face-max moves drift
    // to face corners, so several floods are needed to cover the volume.
    let n = s["segments"].as_u64().unwrap();
    assert!(n >= 1, "{s}");
    assert!(
        s["voxels_segmented_fraction"].as_f64().unwrap() > 0.5,
        "{s}"
    );
    let calls = s["predict_calls"].as_u64().unwrap();
    assert!(calls > 10, "{s}");
    let info = json(&std::fs::read_to_string(d.join("seg.seg.json")).unwrap());
    let origins = info["origins"].as_array().unwrap();
    assert_eq!(origins.len() as u64, n);
    let iters: u64 = origins
        .iter()
        .map(|o| o["iterations"].as_u64().unwrap())
        .sum();
    assert_eq!(
        iters, calls,
        "every prediction went into an accepted segment"
    );
    assert_eq!(info["counters"]["predict_calls"].as_u64().unwrap(), calls);
    let seg = read_labels(&VolumeSpec::new(d.join("seg.h5"), "seg")).unwrap();
    assert_eq!(seg.shape(), &[32, 36, 40]);
    assert_eq!(seg.iter().copied().max(), Some(n));
    let voxels: u64 = origins.iter().map(|o| o["voxels"].as_u64().unwrap()).sum();
    assert_eq!(seg.iter().filter(|&&l| l != 0).count() as u64, voxels);
    let prob = ffn_io::read_image_u8(&VolumeSpec::new(d.join("seg.h5"), "prob")).unwrap();
    assert!(
        prob.iter()
            .zip(seg.iter())
            .all(|(&p, &l)| (p == 0) == (l == 0))
    );

    // Big blind segments: merges dominate.
    let e = json(&ok(
        &[
            "eval",
            "--truth",
            "data.h5:labels",
            "--test",
            "seg.h5:seg",
            "--json",
        ],
        d,
    ));
    for k in [
        "voi_split",
        "voi_merge",
        "rand_split",
        "rand_merge",
        "adapted_rand_error",
    ] {
        assert!(e[k].as_f64().is_some(), "{k} missing: {e}");
    }
    assert!(e["voi_merge"].as_f64().unwrap() > 0.5, "{e}");
    assert!(e["adapted_rand_error"].as_f64().unwrap() > 0.2, "{e}");
    assert!(
        e["worst_merges"][0]["parts"].as_array().unwrap().len() > 1,
        "{e}"
    );
    // The truth against itself is perfect.
    let p = json(&ok(
        &[
            "eval",
            "--truth",
            "data.h5:labels",
            "--test",
            "data.h5:labels",
            "--json",
        ],
        d,
    ));
    assert_eq!(p["voi_split"].as_f64(), Some(0.0));
    assert_eq!(p["adapted_rand_error"].as_f64(), Some(0.0));
    let text = ok(
        &[
            "eval",
            "--truth",
            "data.h5:labels",
            "--test",
            "seg.h5:seg",
            "--convention",
            "skimage",
        ],
        d,
    );
    assert!(
        text.contains("VI split") && text.contains("worst merges"),
        "{text}"
    );
}

#[test]
fn request_file_crop_and_a_model_that_sees_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let ck = constant_model(d, "none.safetensors", -6.0);
    std::fs::write(
        d.join("req.pbtxt"),
        format!(
            "image {{ hdf5: \"data.h5:raw\" }}\nimage_mean: 128\nimage_stddev: 33\ncheckpoint_interval: 1800\n\
             seed_policy: \"PolicyPeaks\"\nmodel_checkpoint_path: \"{ck}\"\n\
             model_args: \"{{\\\"depth\\\": 1, \\\"fov_size\\\": [9, 9, 9], \\\"deltas\\\": [2, 2, 2]}}\"\n\
             inference_options {{ min_segment_size: 5 min_boundary_dist {{ x: 1 y: 1 z: 1 }} }}\n"
        ),
    )
    .unwrap();
    let o = ffn(
        &[
            "infer",
            "--request",
            "req.pbtxt",
            "--out",
            "crop.h5:seg",
            "--offset",
            "4,2,3",
            "--size",
            "30,28,24",
            "--json",
        ],
        d,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("checkpoint_interval"),
        "ignored fields are reported: {err}"
    );
    let s = json(&String::from_utf8_lossy(&o.stdout));
    // The seed itself drops below the move threshold after one prediction: every try fails.
    assert_eq!(s["segments"], 0, "{s}");
    assert_eq!(s["size_xyz"], serde_json::json!([30, 28, 24]));
    assert_eq!(s["seed_policy"], "PolicyPeaks");
    let c = &s["counters"];
    assert!(c["seeds_weak"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(c["seeds_weak"], c["predict_calls"], "{s}");
    let seg = read_labels(&VolumeSpec::new(d.join("crop.h5"), "seg")).unwrap();
    assert_eq!(seg.shape(), &[24, 28, 30]);
    // Eval of a crop against the full truth.
    let e = json(&ok(
        &[
            "eval",
            "--truth",
            "data.h5:labels",
            "--test",
            "crop.h5:seg",
            "--truth-offset",
            "4,2,3",
            "--json",
        ],
        d,
    ));
    assert_eq!(e["voxels"].as_u64(), Some(24 * 28 * 30));
    assert!(
        e["voi_split"].as_f64().unwrap().abs() < 1e-12,
        "all test voxels are 0: no split: {e}"
    );
}

#[test]
fn bad_input_gives_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let ck = constant_model(d, "m.safetensors", 0.0);
    // `ffn infer` of `image` with `checkpoint` and the flags `extra`, which must fail.
    let infer_fails = |image: &str, checkpoint: &str, extra: &[&str]| {
        let mut args = vec![
            "infer",
            "--image",
            image,
            "--checkpoint",
            checkpoint,
            "--out",
            "s.h5:seg",
        ];
        args.extend_from_slice(extra);
        fails(&args, d)
    };
    let e = infer_fails("data.h5:nope", &ck, &[]);
    assert!(e.contains("nope"), "{e}");
    let e = infer_fails("data.h5:raw", "missing.safetensors", &[]);
    assert!(e.contains("missing.safetensors"), "{e}");
    let e = infer_fails("data.h5:raw", &ck, &["--seed-policy", "random"]);
    assert!(e.contains("random") && e.contains("peaks"), "{e}");
    let e = infer_fails(
        "data.h5:raw",
        &ck,
        &["--offset", "0,0,0", "--size", "41,1,1"],
    );
    assert!(e.contains("--offset/--size"), "{e}");
    std::fs::write(d.join("deep.pbtxt"), "model_args: '{\"depth\": 12}'\n").unwrap();
    let e = infer_fails("data.h5:raw", &ck, &["--request", "deep.pbtxt"]);
    assert!(e.contains("deep.pbtxt") && e.contains("depth"), "{e}");
    std::fs::write(
        d.join("broken.pbtxt"),
        "inference_options {\n  pad_value: 2\n}\n",
    )
    .unwrap();
    let e = infer_fails("data.h5:raw", &ck, &["--request", "broken.pbtxt"]);
    assert!(e.contains("broken.pbtxt") && e.contains("pad_value"), "{e}");
    let e = fails(
        &[
            "eval",
            "--truth",
            "data.h5:labels",
            "--test",
            "data.h5:raw",
            "--truth-offset",
            "1,1",
        ],
        d,
    );
    assert!(e.contains("--truth-offset"), "{e}");
    let e = fails(
        &[
            "eval",
            "--truth",
            "data.h5:labels",
            "--test",
            "data.h5:labels",
            "--convention",
            "x",
        ],
        d,
    );
    assert!(e.contains("--convention"), "{e}");
}

/// `--conv bf16` reaches inference through the CLI: a 32-feature model (so the bf16
/// products apply to its hidden convs) segments the volume, the JSON names the precision and
/// what ran its products (`amx` on a CPU with AMX, else `emulated`), and stderr says the
/// segmentation differs from float32's.
#[test]
fn infer_runs_the_bf16_precision() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let model = ModelConfig {
        depth: 2,
        features: 32,
        fov: [9, 9, 9],
        deltas: [2, 2, 2],
    };
    // The flooding model's final bias, and small pseudo-random weights elsewhere.
    let mut params = constant_params(&model, 6.0);
    let mut x = 12345u32;
    for v in params.iter_mut().filter(|v| **v == 0.0) {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        *v = ((x >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.01;
    }
    save_model(d, "m32.safetensors", model, params);
    let run = |out: &str, conv: &str| {
        let args = [
            "infer",
            "--image",
            "data.h5:raw",
            "--checkpoint",
            "m32.safetensors",
            "--out",
            out,
            "--seed-policy",
            "grid",
            "--grid-step",
            "12",
            "--min-segment-size",
            "10",
            "--conv",
            conv,
            "--quiet",
            "--json",
        ];
        let o = ffn(&args, d);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (json(&String::from_utf8_lossy(&o.stdout)), err)
    };
    let (s, err) = run("bf16.h5:seg", "bf16");
    assert_eq!(s["conv"], "bf16", "{s}");
    let products = s["bf16_products"].as_str().unwrap();
    assert!(products == "amx" || products == "emulated", "{s}");
    assert!(s["segments"].as_u64().unwrap() >= 1, "{s}");
    assert!(
        err.contains(&format!("precision: bfloat16 products ({products})")),
        "{err}"
    );
    let (f32_run, err) = run("f32.h5:seg", "winograd");
    assert!(!err.contains("precision: bfloat16"), "{err}");
    assert_eq!(f32_run["conv"], "winograd");
    assert!(f32_run["bf16_products"].is_null(), "{f32_run}");
}

/// `ffn infer --agglomerate`: a model that floods wherever it goes joins touching segments from
/// both sides (not all: its flat predictions drift its floods to the corners of the small box
/// around a contact), so the written segmentation has fewer segments than the flood fill made,
/// and the JSON says so; agglomeration flags without `--agglomerate` are refused.
#[test]
fn infer_agglomerates_touching_segments_the_model_joins() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let ck = constant_model(d, "flood.safetensors", 6.0);
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "infer",
            "--image",
            "data.h5:raw",
            "--checkpoint",
            &ck,
            "--out",
            "agg.h5:seg",
            "--min-segment-size",
            "10",
            "--seed-policy",
            "grid",
            "--grid-step",
            "8",
            "--quiet",
            "--json",
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let plain = args(&[]);
    let plain: Vec<&str> = plain.iter().map(String::as_str).collect();
    let before = json(&ok(&plain, d));
    assert!(before["agglomeration"].is_null(), "{before}");
    let flood_segments = before["segments"].as_u64().unwrap();
    assert!(
        flood_segments >= 2,
        "the test needs a split flood fill: {before}"
    );
    let agg = args(&[
        "--agglomerate",
        "--agglomerate-min-contact",
        "1",
        "--agglomerate-reach",
        "2",
    ]);
    let agg: Vec<&str> = agg.iter().map(String::as_str).collect();
    let s = json(&ok(&agg, d));
    let a = &s["agglomeration"];
    assert_eq!(a["segments_before"].as_u64(), Some(flood_segments), "{s}");
    assert!(a["tested_pairs"].as_u64().unwrap() >= 1, "{s}");
    let joined = a["joined_pairs"].as_u64().unwrap();
    assert!(
        joined >= 1 && joined <= a["tested_pairs"].as_u64().unwrap(),
        "{s}"
    );
    assert!(a["predict_calls"].as_u64().unwrap() >= 2, "{s}");
    let after = a["segments_after"].as_u64().unwrap();
    assert!(after < flood_segments, "{s}");
    assert_eq!(s["segments"].as_u64(), Some(after), "{s}");
    let written = read_labels(&VolumeSpec::new(d.join("agg.h5"), "seg")).unwrap();
    let mut ids: Vec<u64> = written.iter().copied().filter(|&l| l != 0).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len() as u64, after);
    let refused = ffn(
        &[
            "infer",
            "--image",
            "data.h5:raw",
            "--checkpoint",
            &ck,
            "--out",
            "x.h5:seg",
            "--agglomerate-coverage",
            "0.7",
        ],
        d,
    );
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("--agglomerate"),
        "{err}"
    );
}
