//! `ffn train --resume` continues bitwise identically, and refuses a changed configuration.

use std::path::Path;
use std::process::Command;

use ffn_io::checkpoint::load_checkpoint;

fn ffn(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ffn"))
        .args(args)
        .output()
        .expect("running ffn")
}

fn ok(args: &[&str]) {
    let out = ffn(args);
    assert!(
        out.status.success(),
        "ffn {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Synthetic data, partitions and coordinates in `dir`; returns the common `ffn train` arguments.
fn prepare(dir: &Path) -> Vec<String> {
    let h5 = dir.join("s.h5").display().to_string();
    let coords = dir.join("t.coords").display().to_string();
    ok(&[
        "synth",
        "--out",
        &h5,
        "--shape",
        "36,36,36",
        "--neurites",
        "12",
        "--seed",
        "5",
    ]);
    ok(&[
        "partitions",
        "--labels",
        &format!("{h5}:labels"),
        "--out",
        &format!("{h5}:af"),
        "--lom-radius",
        "5",
        "--min-size",
        "200",
    ]);
    ok(&[
        "coordinates",
        "--partitions",
        &format!("s:{h5}:af"),
        "--out",
        &coords,
        "--margin",
        "5",
    ]);
    [
        "--image",
        &format!("s:{h5}:image"),
        "--labels",
        &format!("s:{h5}:labels"),
        "--coords",
        &coords,
        "--depth",
        "2",
        "--features",
        "4",
        "--fov",
        "7,7,7",
        "--deltas",
        "2,2,2",
        "--batch-size",
        "3",
        "--optimizer",
        "momentum",
        "--learning-rate",
        "0.01",
        "--report-every",
        "5",
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn train(common: &[String], extra: &[&str]) -> std::process::Output {
    let mut args: Vec<&str> = vec!["train"];
    args.extend(common.iter().map(String::as_str));
    args.extend(extra);
    ffn(&args)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn resume_continues_bitwise_identically() {
    let dir = tempfile::tempdir().unwrap();
    let common = prepare(dir.path());
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let (a, b) = (a.display().to_string(), b.display().to_string());
    for (out, extra) in [
        (&a, vec!["--max-steps", "40"]),
        (&b, vec!["--max-steps", "20"]),
        (&b, vec!["--max-steps", "40", "--resume"]),
    ] {
        let mut e = vec!["--out", out.as_str()];
        e.extend(extra);
        let o = train(&common, &e);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let name = "checkpoints/ckpt-0000000040.safetensors";
    let ca = load_checkpoint(&Path::new(&a).join(name)).unwrap();
    let cb = load_checkpoint(&Path::new(&b).join(name)).unwrap();
    assert_eq!(ca.step, 40);
    assert_eq!(cb.step, 40);
    assert_eq!(
        bits(&ca.params),
        bits(&cb.params),
        "weights differ after resume"
    );
    assert_eq!(ca.optimizer.len(), cb.optimizer.len());
    for ((na, va), (nb, vb)) in ca.optimizer.iter().zip(&cb.optimizer) {
        assert_eq!(na, nb);
        assert_eq!(bits(va), bits(vb), "optimizer/trainer buffer {na} differs");
    }
    // Training moved the weights away from the step-20 checkpoint.
    let c20 =
        load_checkpoint(&Path::new(&b).join("checkpoints/ckpt-0000000020.safetensors")).unwrap();
    assert_ne!(bits(&c20.params), bits(&cb.params));
    // The logs agree on every metric (timing columns aside).
    let rows = |d: &str| -> Vec<String> {
        std::fs::read_to_string(Path::new(d).join("train_log.csv"))
            .unwrap()
            .lines()
            .map(|l| l.split(',').take(7).collect::<Vec<_>>().join(","))
            .collect()
    };
    assert_eq!(rows(&a), rows(&b));
    assert_eq!(rows(&a).len(), 1 + 8);
    assert!(Path::new(&b).join("training_curve.png").exists());
}

#[test]
fn resume_refuses_a_changed_configuration_and_bad_inputs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let common = prepare(dir.path());
    let out = dir.path().join("r").display().to_string();
    let o = train(&common, &["--out", &out, "--max-steps", "5"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut changed = common.clone();
    let i = changed.iter().position(|a| a == "--learning-rate").unwrap();
    changed[i + 1] = "0.02".into();
    let o = train(&changed, &["--out", &out, "--max-steps", "10", "--resume"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("learning_rate") && err.contains("cannot resume"),
        "{err}"
    );
    // A coordinate file naming a volume that was not given.
    let mut other = common.clone();
    let i = other.iter().position(|a| a == "--image").unwrap();
    other[i + 1] = other[i + 1].replacen("s:", "t:", 1);
    let o = train(&other, &["--out", &out, "--max-steps", "10"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("no --image s:"),
        "{err}"
    );
    // A margin too small for the training patch is reported with the coordinate.
    let mut big = common.clone();
    let i = big.iter().position(|a| a == "--fov").unwrap();
    big[i + 1] = "9,9,9".into();
    let i = big.iter().position(|a| a == "--deltas").unwrap();
    big[i + 1] = "3,3,3".into();
    let o = train(&big, &["--out", &out, "--max-steps", "10"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("does not fit"), "{err}");
}
