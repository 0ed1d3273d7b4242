//! A short `ffn train` run on synthetic data learns: the loss falls and F1 rises well above the start.

use std::process::Command;
use std::time::Duration;

mod support;
use support::train_data;

/// The run takes well under a minute alone; a hang is a failure.
const LIMIT: Duration = Duration::from_secs(600);

#[test]
fn loss_falls_and_f1_rises_on_synthetic_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = train_data::make(
        dir.path(),
        &train_data::Recipe {
            synth: &[
                "--shape",
                "64,64,64",
                "--neurites",
                "30",
                "--radius-min",
                "4",
                "--radius-max",
                "9",
                "--seed",
                "2",
            ],
            partitions: &["--lom-radius", "8", "--min-size", "500"],
            coordinates: &["--margin", "8", "--max-per-class", "20000"],
        },
    );
    let out = dir.path().join("run").display().to_string();
    let mut train = Command::new(support::FFN);
    train.arg("train").args(&data).args([
        "--out",
        &out,
        "--depth",
        "3",
        "--features",
        "16",
        "--fov",
        "11,11,11",
        "--deltas",
        "3,3,3",
        "--batch-size",
        "4",
        "--optimizer",
        "adam",
        "--learning-rate",
        "0.003",
        "--clip",
        "0",
        "--init-stddev",
        "0.05",
        "--seed",
        "3",
        "--max-steps",
        "250",
        "--report-every",
        "50",
        "--quiet",
    ]);
    support::ok(&support::run(train, LIMIT), "ffn train");
    let log = std::fs::read_to_string(dir.path().join("run/train_log.csv")).unwrap();
    let rows: Vec<Vec<f64>> = log
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 5, "{log}");
    // Columns: step, loss, precision, recall, f1, ...
    let (loss0, f1_0) = (rows[0][1], rows[0][4]);
    let loss_end = (rows[3][1] + rows[4][1]) / 2.0;
    let f1_end = (rows[3][4] + rows[4][4]) / 2.0;
    assert!(
        loss_end < 0.6 * loss0,
        "loss did not fall enough: {loss0} -> {loss_end}\n{log}"
    );
    assert!(
        f1_end > f1_0 + 0.3 && f1_end > 0.45,
        "F1 did not rise enough: {f1_0} -> {f1_end}\n{log}"
    );
}
