//! Synthetic training data made through the CLI (`ffn synth`, `ffn partitions`, `ffn
//! coordinates`) and the tiny network that the training tests train.

use std::path::Path;
use std::process::Command;

use super::{FFN, ok, run};

/// The flags of the three commands that make training data, each after its `--out`.
pub struct Recipe<'a> {
    /// `ffn synth` (shape, neurites, radii, seed).
    pub synth: &'a [&'a str],
    /// `ffn partitions` (lom radius, min size).
    pub partitions: &'a [&'a str],
    /// `ffn coordinates` (margin, max per class).
    pub coordinates: &'a [&'a str],
}

/// Makes the volume `s.h5` (datasets `image`, `labels` and the partitions `af`) and the
/// coordinates `t.coords` in `dir` by `recipe`; returns `ffn train`'s data arguments (`--image`,
/// `--labels`, `--coords`).
pub fn make(dir: &Path, recipe: &Recipe) -> Vec<String> {
    let h5 = dir.join("s.h5").display().to_string();
    let coords = dir.join("t.coords").display().to_string();
    let (labels, parts, parts_in) = (
        format!("{h5}:labels"),
        format!("{h5}:af"),
        format!("s:{h5}:af"),
    );
    let steps: [(&[&str], &[&str]); 3] = [
        (&["synth", "--out", &h5], recipe.synth),
        (
            &["partitions", "--labels", &labels, "--out", &parts],
            recipe.partitions,
        ),
        (
            &["coordinates", "--partitions", &parts_in, "--out", &coords],
            recipe.coordinates,
        ),
    ];
    for (command, flags) in steps {
        let mut c = Command::new(FFN);
        c.args(command).args(flags);
        ok(
            &run(c, super::dist::LIMIT),
            &format!("ffn {command:?} {flags:?}"),
        );
    }
    strings(&[
        "--image",
        &format!("s:{h5}:image"),
        "--labels",
        &format!("s:{h5}:labels"),
        "--coords",
        &coords,
    ])
}

/// `ffn train` flags of the tiny network the training tests share: depth 2, 4 features, FOV
/// 7^3, deltas 2, momentum at 0.01, a metrics row every `report_every` steps, quiet.
pub fn tiny_network(report_every: u64) -> Vec<String> {
    let mut v = strings(&[
        "--depth",
        "2",
        "--features",
        "4",
        "--fov",
        "7,7,7",
        "--deltas",
        "2,2,2",
        "--optimizer",
        "momentum",
        "--learning-rate",
        "0.01",
        "--quiet",
    ]);
    v.extend(["--report-every".into(), report_every.to_string()]);
    v
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}
