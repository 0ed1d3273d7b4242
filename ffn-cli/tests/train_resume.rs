//! `ffn train --resume` continues bitwise identically, and refuses a changed configuration;
//! `--init-checkpoint` starts from given weights (ffn-rs or TF) with a fresh optimiser; the
//! normalisation recorded in checkpoints is the one `ffn infer` uses.

use std::path::Path;
use std::process::Command;

use ffn_io::checkpoint::load_checkpoint;

mod support;
use support::train_data;

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

/// Synthetic data, partitions and coordinates in `dir`; returns the common `ffn train` arguments
/// (the tiny network, batch 3, a metrics row every 5 steps).
fn prepare(dir: &Path) -> Vec<String> {
    let mut args = train_data::make(
        dir,
        &train_data::Recipe {
            synth: &["--shape", "36,36,36", "--neurites", "12", "--seed", "5"],
            partitions: &["--lom-radius", "5", "--min-size", "200"],
            coordinates: &["--margin", "5"],
        },
    );
    args.extend(train_data::tiny_network(5));
    args.extend(["--batch-size".into(), "3".into()]);
    args
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

    // A truncated newest checkpoint (a crash of the disk, not of ffn): --resume says so, falls
    // back to step 20 and reaches the same step-40 weights again.
    let newest = Path::new(&b).join(name);
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() / 3]).unwrap();
    let o = train(
        &common,
        &["--out", b.as_str(), "--max-steps", "40", "--resume"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("skipping") && err.contains("ckpt-0000000040"),
        "{err}"
    );
    let again = load_checkpoint(&newest).unwrap();
    assert_eq!(
        bits(&again.params),
        bits(&ca.params),
        "weights differ after the fallback"
    );
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
    // The weight initialisation is part of the configuration: a truncated-normal run's checkpoint
    // does not resume as a Glorot run, and a Glorot run's checkpoint resumes only as one.
    let o = train(
        &common,
        &[
            "--out",
            &out,
            "--max-steps",
            "10",
            "--resume",
            "--init",
            "glorot-uniform",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("init"), "{err}");
    let glorot = dir.path().join("g").display().to_string();
    let g = |steps: &str, resume: bool| {
        let mut extra = vec![
            "--out",
            &glorot,
            "--max-steps",
            steps,
            "--init",
            "glorot-uniform",
        ];
        extra.extend(resume.then_some("--resume"));
        train(&common, &extra)
    };
    let o = g("3", false);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = g("5", true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = train(&common, &["--out", &glorot, "--max-steps", "7", "--resume"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("init_stddev") && err.contains("cannot resume"),
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

/// The value after `flag` in `args`, replaced.
fn with(args: &[String], flag: &str, value: &str) -> Vec<String> {
    let mut a = args.to_vec();
    let i = a.iter().position(|x| x == flag).unwrap();
    a[i + 1] = value.into();
    a
}

/// A run at learning rate 0 of `steps` steps into `out`, started with `--init-checkpoint init`;
/// returns its last checkpoint (the weights it started from).
fn frozen_run_from(common: &[String], out: &str, steps: u64, init: &str) -> ffn_io::Checkpoint {
    let frozen = with(common, "--learning-rate", "0");
    let n = steps.to_string();
    let o = train(
        &frozen,
        &["--out", out, "--max-steps", &n, "--init-checkpoint", init],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    load_checkpoint(&Path::new(out).join(format!("checkpoints/ckpt-{steps:010}.safetensors")))
        .unwrap()
}

#[test]
fn init_checkpoint_starts_from_its_weights_with_a_fresh_optimiser() {
    let dir = tempfile::tempdir().unwrap();
    let common = prepare(dir.path());
    let d = |n: &str| dir.path().join(n).display().to_string();
    let o = train(&common, &["--out", &d("a"), "--max-steps", "10"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let a = load_checkpoint(&Path::new(&d("a")).join("checkpoints/ckpt-0000000010.safetensors"))
        .unwrap();
    // At learning rate 0 the run keeps the initial weights: they are a's, not a fresh draw.
    let b = frozen_run_from(&common, &d("b"), 3, &d("a"));
    assert_eq!(bits(&b.params), bits(&a.params));
    assert_eq!(b.step, 3, "a fine-tuning run counts its own steps");
    let init = &b.training_config["config"]["init_checkpoint"];
    assert!(
        init["path"]
            .as_str()
            .unwrap()
            .ends_with("ckpt-0000000010.safetensors"),
        "{init}"
    );
    // Resumed without the flag, the run still records the weights it started from.
    let frozen = with(&common, "--learning-rate", "0");
    let o = train(&frozen, &["--out", &d("b"), "--max-steps", "5", "--resume"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let resumed =
        load_checkpoint(&Path::new(&d("b")).join("checkpoints/ckpt-0000000005.safetensors"))
            .unwrap();
    assert_eq!(&resumed.training_config["config"]["init_checkpoint"], init);
    // A fresh optimiser: momentum after 3 steps of b differs from a's after 10.
    let velocity = |c: &ffn_io::Checkpoint| c.optimizer[0].1.clone();
    assert_ne!(bits(&velocity(&a)), bits(&velocity(&b)));
    // Another architecture is refused, naming the field.
    let deeper = with(&common, "--depth", "3");
    let o = train(
        &deeper,
        &[
            "--out",
            &d("c"),
            "--max-steps",
            "1",
            "--init-checkpoint",
            &d("a"),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("--init-checkpoint")
            && err.contains("model.depth: expected 3, found 2"),
        "{err}"
    );
}

#[test]
fn average_makes_a_model_to_fine_tune_not_to_resume() {
    let dir = tempfile::tempdir().unwrap();
    let common = prepare(dir.path());
    let d = |n: &str| dir.path().join(n).display().to_string();
    let o = train(
        &common,
        &[
            "--out",
            &d("a"),
            "--max-steps",
            "6",
            "--checkpoint-every",
            "3",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ck = |n: u64| Path::new(&d("a")).join(format!("checkpoints/ckpt-{n:010}.safetensors"));
    let avg = d("avg.safetensors");
    let (p3, p6) = (ck(3).display().to_string(), ck(6).display().to_string());
    ok(&["average", &p3, &p6, "--out", &avg]);
    let (c3, c6) = (
        load_checkpoint(&ck(3)).unwrap(),
        load_checkpoint(&ck(6)).unwrap(),
    );
    let a = load_checkpoint(Path::new(&avg)).unwrap();
    for ((m, x), y) in a.params.iter().zip(&c3.params).zip(&c6.params) {
        assert!(
            (m - (x + y) / 2.0).abs() <= 1e-6 * (x.abs() + y.abs()),
            "{m} {x} {y}"
        );
    }
    assert_eq!(a.step, 6);
    // Put where a resume would look, it is refused with a way out.
    let run = Path::new(&d("a")).join("checkpoints");
    std::fs::copy(&avg, run.join("ckpt-0000000007.safetensors")).unwrap();
    let o = train(&common, &["--out", &d("a"), "--max-steps", "9", "--resume"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("weight average") && err.contains("--init-checkpoint"),
        "{err}"
    );
    // Fine-tuning starts from the mean weights.
    let b = frozen_run_from(&common, &d("b"), 1, &avg);
    assert_eq!(bits(&b.params), bits(&a.params));
    // One checkpoint gives its own weights, without the optimiser state.
    let one = d("one.safetensors");
    ok(&["average", &p3, "--out", &one]);
    let w = load_checkpoint(Path::new(&one)).unwrap();
    assert_eq!(bits(&w.params), bits(&c3.params));
    assert!(w.optimizer.is_empty() && !c3.optimizer.is_empty());
    // None is an error.
    let o = ffn(&["average", "--out", &d("none.safetensors")]);
    assert!(!o.status.success());
}

#[test]
fn init_checkpoint_reads_googles_tf_model() {
    let dir = tempfile::tempdir().unwrap();
    let common = prepare(dir.path());
    let tf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/google-fib25/model.ckpt-27465036");
    let google = with(&with(&common, "--depth", "12"), "--features", "32");
    let google = with(&google, "--learning-rate", "0");
    let out = dir.path().join("g").display().to_string();
    let o = train(
        &google,
        &[
            "--out",
            &out,
            "--max-steps",
            "1",
            "--init-checkpoint",
            tf.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let g =
        load_checkpoint(&Path::new(&out).join("checkpoints/ckpt-0000000001.safetensors")).unwrap();
    let (_, tf_params) = ffn_io::tf_bundle::load_tf_model(&tf).unwrap();
    assert_eq!(bits(&g.params), bits(&tf_params));
}

#[test]
fn infer_uses_the_normalisation_recorded_in_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let common = prepare(dir.path());
    let h5 = dir.path().join("s.h5").display().to_string();
    let infer = |ckpt: &str, extra: &[&str]| -> String {
        let out = format!("{}:seg", dir.path().join("seg.h5").display());
        let image = format!("{h5}:image");
        let mut args = vec![
            "infer",
            "--image",
            &image,
            "--checkpoint",
            ckpt,
            "--out",
            &out,
        ];
        args.extend([
            "--seed-policy",
            "grid",
            "--grid-step",
            "12",
            "--min-segment-size",
            "1",
        ]);
        args.extend(extra);
        let o = ffn(&args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
        err.lines()
            .find(|l| l.starts_with("image normalisation"))
            .unwrap_or_else(|| panic!("no normalisation line in {err}"))
            .to_string()
    };
    let fixed = dir.path().join("fixed").display().to_string();
    let mut args = common.clone();
    args.extend(["--image-mean", "100", "--image-stddev", "20"].map(String::from));
    let o = train(&args, &["--out", &fixed, "--max-steps", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = infer(&fixed, &[]);
    assert!(
        line.contains("(x - 100) / 20") && line.contains("from the checkpoint"),
        "{line}"
    );
    let line = infer(&fixed, &["--image-stddev", "25"]);
    assert!(
        line.contains("(x - 100) / 25") && line.contains("stddev from the command line"),
        "{line}"
    );
    // The default of `ffn train` is each volume's own statistics; with one training volume the
    // checkpoint records its mean and stddev, and inference uses them (the image's, here).
    let per = dir.path().join("per").display().to_string();
    let o = train(&common, &["--out", &per, "--max-steps", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = infer(&per, &[]);
    let img =
        ffn_io::read_image_f32(&ffn_io::VolumeSpec::new(dir.path().join("s.h5"), "image")).unwrap();
    let (m, s) = ffn_core::inference::mean_stddev(img.iter().copied());
    assert!(
        line.contains(&format!("(x - {}) / {}", m as f32, s as f32))
            && line.contains("from the checkpoint"),
        "{line} (image mean {m}, stddev {s})"
    );
}

#[test]
fn sigterm_stops_with_a_checkpoint_and_status_75_and_resume_continues() {
    let dir = tempfile::tempdir().unwrap();
    let common = prepare(dir.path());
    let out = dir.path().join("run");
    let mut args: Vec<String> = vec!["train".into()];
    args.extend(common.iter().cloned());
    args.extend(["--out", out.to_str().unwrap(), "--max-steps", "100000000"].map(String::from));
    let child = Command::new(env!("CARGO_BIN_EXE_ffn"))
        .args(&args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first metrics row (training runs), at most 120 s.
    let log = out.join("train_log.csv");
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&log).map_or(0, |t| t.lines().count()) < 2 {
        assert!(t0.elapsed().as_secs() < 120, "no metrics row within 120 s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(75), "{err}");
    assert!(err.contains("stopped by SIGTERM at step"), "{err}");
    let newest = ffn_io::checkpoint::latest_checkpoint(&out.join("checkpoints"))
        .unwrap()
        .expect("a checkpoint at the stop");
    let stopped = load_checkpoint(&newest).unwrap();
    assert!(stopped.step >= 5, "stopped at step {}", stopped.step);
    // --resume continues from there.
    let target = (stopped.step + 3).to_string();
    let out_s = out.display().to_string();
    let o = train(
        &common,
        &["--out", &out_s, "--max-steps", &target, "--resume"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let done = ffn_io::checkpoint::latest_checkpoint(&out.join("checkpoints"))
        .unwrap()
        .unwrap();
    assert_eq!(load_checkpoint(&done).unwrap().step, stopped.step + 3);
}

#[test]
fn deepen_makes_a_deeper_model_that_segments_the_same_and_fine_tunes() {
    let dir = tempfile::tempdir().unwrap();
    let common = prepare(dir.path());
    let d = |n: &str| dir.path().join(n).display().to_string();
    let o = train(&common, &["--out", &d("a"), "--max-steps", "8"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let deep = d("deep.safetensors");
    ok(&[
        "deepen",
        &d("a"),
        "--depth",
        "4",
        "--seed",
        "3",
        "--out",
        &deep,
    ]);
    let m = ffn_io::load_model(Path::new(&deep)).unwrap();
    assert_eq!(m.config.depth, 4);
    // The deeper model segments the volume exactly as the model it came from.
    let h5 = d("s.h5");
    let segment = |model: &str, out: &str| -> Vec<u8> {
        let seg = format!("{}:seg", d(out));
        ok(&[
            "infer",
            "--image",
            &format!("{h5}:image"),
            "--checkpoint",
            model,
            "--out",
            &seg,
            "--seed-policy",
            "grid",
            "--grid-step",
            "12",
            "--min-segment-size",
            "1",
        ]);
        let labels = ffn_io::read_labels(&ffn_io::VolumeSpec::new(d(out), "seg")).unwrap();
        labels.iter().flat_map(|v| v.to_le_bytes()).collect()
    };
    assert_eq!(segment(&d("a"), "shallow.h5"), segment(&deep, "deep.h5"));
    // Fine-tuning at the new depth starts from its weights.
    let deeper = with(&common, "--depth", "4");
    let b = frozen_run_from(&deeper, &d("b"), 2, &deep);
    assert_eq!(bits(&b.params), bits(&m.params));
    // At the old depth it is refused, naming the field; as a resume point, with a way out.
    let o = train(
        &common,
        &[
            "--out",
            &d("c"),
            "--max-steps",
            "1",
            "--init-checkpoint",
            &deep,
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("depth"), "{err}");
    let run = Path::new(&d("b")).join("checkpoints");
    std::fs::copy(&deep, run.join("ckpt-0000000009.safetensors")).unwrap();
    let o = train(
        &deeper,
        &["--out", &d("b"), "--max-steps", "10", "--resume"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("deepened") && err.contains("--init-checkpoint"),
        "{err}"
    );
    // Not deeper than the model: an error naming the field.
    let o = ffn(&[
        "deepen",
        &deep,
        "--depth",
        "3",
        "--out",
        &d("x.safetensors"),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("model.depth"), "{err}");
    assert!(!Path::new(&d("x.safetensors")).exists());
}
