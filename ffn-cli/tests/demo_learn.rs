//! `ffn demo` end to end on the shipped FIB-25 data and models (a reduced configuration), and
//! `ffn bench learn` over a small training run: rows per checkpoint, the reference, the cache.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ffn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ffn"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("running ffn")
}

fn ok(args: &[&str]) -> (String, String) {
    let o = ffn(args);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "ffn {args:?} failed:\n{out}\n{err}");
    (out, err)
}

#[test]
fn demo_trains_and_segments_a_held_out_fib25_box_with_both_shipped_models() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let (stdout, _) = ok(&[
        "demo",
        "--out",
        out.to_str().unwrap(),
        "--train-minutes",
        "0.02",
        "--depth",
        "2",
        "--features",
        "8",
        "--fov",
        "9,9,9",
        "--deltas",
        "2,2,2",
        "--offset",
        "150,40,170",
        "--size",
        "40,40,40",
        "--context",
        "8",
        "--reference-model",
        "models/ffn-rs-fib25/model.safetensors",
    ]);
    for needle in [
        "short training run:",
        "held-out box (x,y,z 150,40,170 size 40,40,40",
        "ffn-rs model",
        "reference model",
        "Google published",
        "context region x,y,z 142,32,162 of size 56,56,56",
        // The shipped model carries the inference settings chosen for it (ffn set-inference).
        "inference settings recorded with the model: segment threshold 0.2, min segment size 100",
    ] {
        assert!(stdout.contains(needle), "missing '{needle}' in\n{stdout}");
    }
    // Google's published segmentation scores well on the box (a guard of the box, crop and
    // scoring path: a misplaced box or axis would score it badly).
    let row = |name: &str| -> Vec<f64> {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(name) && l.contains('%'))
            .unwrap_or_else(|| panic!("no score row for {name} in\n{stdout}"));
        line[line.find(name).unwrap() + name.len()..]
            .split_whitespace()
            .map(|v| v.trim_end_matches('%').parse().unwrap())
            .collect()
    };
    let google = row("Google published");
    assert!(google[1] < 20.0 && google[4] < 0.3, "{google:?}:\n{stdout}");
    // The live reference run of the same model as the ffn-rs row gives the same scores.
    assert_eq!(row("ffn-rs model"), row("reference model"), "{stdout}");
    // The overlay's first panel is the box's middle slice of the image (zoom 3): z = 170 + 20.
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(out.join("overlay.png")).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut px = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut px).unwrap();
    let image =
        ffn_io::read_image_u8(&ffn_io::VolumeSpec::new(out.join("fib25.h5"), "image")).unwrap();
    for (x, y) in [(0usize, 0usize), (17, 5), (39, 39)] {
        let at = (3 * y * info.width as usize + 3 * x) * 3;
        assert_eq!(
            px[at],
            image[[190, 40 + y, 150 + x]],
            "overlay grey at box x,y = {x},{y}"
        );
    }
    assert!(out.join("train/train_log.csv").exists());
    let seg =
        ffn_io::read_labels(&ffn_io::VolumeSpec::new(out.join("fib25.h5"), "seg_ffn_rs")).unwrap();
    assert_eq!(seg.shape(), [40, 40, 40]);
    // The training part never reaches the held-out box.
    let train = ffn_io::dataset_shape(&ffn_io::VolumeSpec::new(
        out.join("fib25.h5"),
        "train_image",
    ))
    .unwrap();
    assert_eq!(train, [150, 250, 250]);
    // A box inside the training part is refused.
    let o = ffn(&[
        "demo",
        "--out",
        out.to_str().unwrap(),
        "--offset",
        "0,0,100",
        "--size",
        "40,40,40",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("z >= --train-z"),
        "{err}"
    );
}

/// A small synthetic training run with a checkpoint every 4 steps; returns (run dir, volume file).
fn small_run(dir: &Path) -> (String, String) {
    let run = dir.join("run").display().to_string();
    let common = support::dist::set(&support::dist::prepare(dir), "--optimizer", "adam");
    let args = support::dist::with(
        &common,
        &[
            "--out",
            &run,
            "--max-steps",
            "8",
            "--checkpoint-every",
            "4",
            "--keep-checkpoints",
            "0",
        ],
    );
    let cmd = support::dist::ffn(&args);
    support::ok(&support::run(cmd, support::dist::LIMIT), "ffn train");
    (run, dir.join("s.h5").display().to_string())
}

#[test]
fn bench_learn_scores_every_checkpoint_and_the_reference_once() {
    let dir = tempfile::tempdir().unwrap();
    let (run, h5) = small_run(dir.path());
    let out = dir.path().join("learn");
    let reference = format!("{run}/checkpoints/ckpt-0000000004.safetensors");
    let args = [
        "bench",
        "learn",
        "--run",
        &run,
        "--image",
        &format!("{h5}:image"),
        "--labels",
        &format!("{h5}:labels"),
        "--offset",
        "2,2,2",
        "--size",
        "26,26,26",
        "--reference",
        &reference,
        "--min-segment-size",
        "10",
        "--out",
        out.to_str().unwrap(),
    ];
    let (table, err) = ok(&args);
    assert_eq!(err.matches("bench learn: ").count(), 3, "{err}");
    let csv = std::fs::read_to_string(out.join("learning.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{csv}");
    assert!(
        rows[0].starts_with("ffn-rs,4,") && rows[1].starts_with("ffn-rs,8,"),
        "{csv}"
    );
    assert!(rows[2].starts_with("reference,"), "{csv}");
    // The reference is the step-4 checkpoint: the same segmentation, so the same scores.
    let tail = |r: &str| r.split(',').skip(5).take(5).collect::<Vec<_>>().join(",");
    assert_eq!(tail(rows[0]), tail(rows[2]), "{csv}");
    // Examples = step x batch (4); CPU hours recorded from step 0 (a number, not NaN).
    let f: Vec<&str> = rows[1].split(',').collect();
    assert_eq!(f[2], "32");
    assert!(f[3].parse::<f64>().unwrap().is_finite(), "{csv}");
    assert!(table.contains("| ffn-rs | 8 | 32 |"), "{table}");
    assert!(out.join("learning_curve.png").exists() && out.join("learning.md").exists());
    assert!(
        table.contains("move threshold 0.9, segment threshold 0.6, min segment size 10"),
        "the table states the inference settings: {table}"
    );
    // Run again: everything is cached.
    let (_, err) = ok(&args);
    assert_eq!(err.matches("bench learn: ").count(), 0, "{err}");
    // Other inference settings into the same cache are refused, naming both settings; into a new
    // folder they segment anew (the lower move threshold makes other floods of the same model).
    let mut other: Vec<&str> = args.to_vec();
    other.splice(
        other.len() - 2..other.len() - 2,
        ["--move-threshold", "0.7"],
    );
    let o = ffn(&other);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("other inference settings")
            && err.contains("move threshold 0.9")
            && err.contains("move threshold 0.7"),
        "{err}"
    );
    let out2 = dir.path().join("learn-move-0.7");
    let last = other.len() - 1;
    other[last] = out2.to_str().unwrap();
    let (table2, err) = ok(&other);
    assert_eq!(err.matches("bench learn: ").count(), 3, "{err}");
    assert!(table2.contains("move threshold 0.7"), "{table2}");
    let bad = ffn(&[
        &other[..other.len() - 4],
        &["--segment-threshold", "1.5", "--out", "x"],
    ]
    .concat());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("segment_threshold") && err.contains("1.5"),
        "{err}"
    );
    // A run without checkpoints is an error naming the folder.
    let o = ffn(&[
        "bench",
        "learn",
        "--run",
        dir.path().to_str().unwrap(),
        "--image",
        &format!("{h5}:image"),
        "--labels",
        &format!("{h5}:labels"),
        "--offset",
        "0,0,0",
        "--size",
        "8,8,8",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("no checkpoints"),
        "{err}"
    );
}
