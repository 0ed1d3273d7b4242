//! Helpers of the `tiled_*` end-to-end tests (`use support::tiled::*`).

use ffn_core::rng::Rng;
use ndarray::Array3;
use std::path::Path;
use std::process::{Command, Output};

/// HDF5 calls and process starts of one test process are serialised. HDF5 keeps its file lock on a
/// descriptor that a child forked meanwhile by another test thread inherits; the child then holds
/// the lock and the next open fails with "unable to lock file, errno = 11".
static HDF5: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn h5<T>(f: impl FnOnce() -> T) -> T {
    let _guard = HDF5.lock().unwrap_or_else(|e| e.into_inner());
    f()
}

pub fn ffn(args: &[&str]) -> Output {
    let child = spawn(Command::new(env!("CARGO_BIN_EXE_ffn")).args(args));
    child.wait_with_output().expect("running ffn")
}

/// Starts a process (stdout and stderr piped unless set) while no HDF5 file is open in this one.
pub fn spawn(cmd: &mut Command) -> std::process::Child {
    h5(|| {
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starting a process")
    })
}

pub fn ok(args: &[&str]) -> String {
    let out = ffn(args);
    assert!(
        out.status.success(),
        "ffn {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The arguments of `ffn infer-tiled` that segments `image` into `out` in tiles of `tile_size`,
/// followed by `extra`.
pub fn tiled_args<'a>(
    image: &'a str,
    out: &'a str,
    tile_size: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "infer-tiled",
        "--image",
        image,
        "--out",
        out,
        "--tile-size",
        tile_size,
    ];
    args.extend_from_slice(extra);
    args
}

pub fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A volume of axis-aligned boxes (recursive random cuts, every side >= `min_side`), ids 1..=n.
pub fn boxes(shape: [usize; 3], min_side: usize, seed: u64) -> Array3<u64> {
    let mut out = Array3::<u64>::zeros((shape[0], shape[1], shape[2]));
    let mut rng = Rng::new(seed);
    let mut next = 0u64;
    let mut stack = vec![([0usize; 3], shape)];
    while let Some((lo, hi)) = stack.pop() {
        let splittable: Vec<usize> = (0..3).filter(|&a| hi[a] - lo[a] >= 2 * min_side).collect();
        if !splittable.is_empty() && rng.next_f64() < 0.9 {
            let axis = splittable[rng.below(splittable.len())];
            let len = hi[axis] - lo[axis];
            let cut = lo[axis] + min_side + rng.below(len - 2 * min_side + 1);
            let (mut hi1, mut lo2) = (hi, lo);
            hi1[axis] = cut;
            lo2[axis] = cut;
            stack.push((lo, hi1));
            stack.push((lo2, hi));
            continue;
        }
        next += 1;
        out.slice_mut(ndarray::s![lo[0]..hi[0], lo[1]..hi[1], lo[2]..hi[2]])
            .fill(next);
    }
    out
}

/// Writes the boxes of `shape` as a float "image" of label ids (what the oracle predictor reads)
/// and as labels; returns the `file:dataset` of the image and the truth.
pub fn write_boxes(dir: &Path, shape: [usize; 3], seed: u64) -> (String, Array3<u64>) {
    let truth = boxes(shape, 7, seed);
    let file = dir.join("boxes.h5");
    let img = format!("{}:ids", s(&file));
    h5(|| {
        ffn_io::write_image_f32(&img.parse().unwrap(), &truth.mapv(|v| v as f32)).unwrap();
        ffn_io::write_labels(&format!("{}:truth", s(&file)).parse().unwrap(), &truth).unwrap();
    });
    (img, truth)
}

/// The oracle inference arguments shared by every run: moves of one voxel, seeds everywhere.
pub const ORACLE: [&str; 11] = [
    "--oracle",
    "--fov",
    "7,7,7",
    "--seed-policy",
    "grid",
    "--grid-step",
    "1",
    "--min-segment-size",
    "1",
    "--min-boundary-dist",
    "0",
];

pub fn read_seg(spec: &str) -> Array3<u64> {
    h5(|| ffn_io::read_labels(&spec.parse().unwrap()).unwrap())
}

/// Relabels in order of first appearance (the canonical form of a partition).
pub fn canonical(v: &Array3<u64>) -> Vec<u64> {
    let mut flat: Vec<u64> = v.iter().copied().collect();
    ffn_core::segmentation::relabel_first_appearance(&mut flat);
    flat
}

/// Adapted Rand error of `test` against `truth` (every voxel counted).
pub fn arand(truth: &Array3<u64>, test: &Array3<u64>) -> f64 {
    let t: Vec<u64> = truth.iter().copied().collect();
    let x: Vec<u64> = test.iter().copied().collect();
    let opts = ffn_core::metrics::MetricOptions {
        ignore_truth_zero: false,
        ..Default::default()
    };
    ffn_core::metrics::evaluate(&t, &x, &opts)
        .unwrap()
        .adapted_rand_error
}

/// The number in `computed N tiles` of every rank's summary line.
pub fn computed(stdout: &str) -> Vec<usize> {
    stdout
        .lines()
        .filter_map(|l| l.split(" computed ").nth(1))
        .filter_map(|r| r.split(' ').next()?.parse().ok())
        .collect()
}
