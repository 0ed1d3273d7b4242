//! Data of the data-parallel training tests, their runs on every backend, checkpoint comparison.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use ffn_io::checkpoint::{Checkpoint, load_checkpoint};

use super::{FFN, finish, train_data};

/// No test run may take longer than this (a hang is a failure, not a stuck CI job).
pub const LIMIT: Duration = Duration::from_secs(240);

/// One kernel thread per rank: the engine's sums depend on its thread count, so bitwise
/// comparisons between backends need the same count everywhere (and 2 cores are shared anyway).
const THREADS: (&str, &str) = ("RAYON_NUM_THREADS", "1");

/// `ffn ARGS`.
pub fn ffn(args: &[String]) -> Command {
    let mut c = Command::new(FFN);
    c.args(args).env(THREADS.0, THREADS.1);
    c
}

/// `ffn launch -n N --timeout 200 -- ARGS` (shm and zmq ranks on this host).
pub fn launch(n: usize, args: &[String]) -> Command {
    let mut c = Command::new(FFN);
    c.args(["launch", "-n", &n.to_string(), "--timeout", "200", "--"])
        .args(args)
        .env(THREADS.0, THREADS.1);
    c
}

/// `mpirun --allow-run-as-root --oversubscribe -n N ffn ARGS`.
pub fn mpirun(n: usize, args: &[String]) -> Command {
    let mut c = super::mpirun_command(n, &["-x", THREADS.0], FFN);
    c.args(args).env(THREADS.0, THREADS.1);
    c
}

/// Synthetic volume, partitions and coordinates in `dir`; returns the `ffn train` arguments of
/// the tiny network on them.
pub fn prepare(dir: &Path) -> Vec<String> {
    let data = train_data::make(
        dir,
        &train_data::Recipe {
            synth: &["--shape", "30,30,30", "--neurites", "10", "--seed", "5"],
            partitions: &["--lom-radius", "4", "--min-size", "100"],
            coordinates: &["--margin", "6"],
        },
    );
    let mut args = vec!["train".to_string()];
    args.extend(data);
    args.extend(train_data::tiny_network(2));
    args
}

/// `base` plus `extra`.
pub fn with(base: &[String], extra: &[&str]) -> Vec<String> {
    base.iter()
        .cloned()
        .chain(extra.iter().map(|s| s.to_string()))
        .collect()
}

/// `base` with `flag`'s value replaced by `value` (appended when absent).
pub fn set(base: &[String], flag: &str, value: &str) -> Vec<String> {
    let mut v = base.to_vec();
    match v.iter().position(|a| a == flag) {
        Some(i) => v[i + 1] = value.to_string(),
        None => v.extend([flag.to_string(), value.to_string()]),
    }
    v
}

/// The checkpoint of `step` in run directory `out`.
pub fn checkpoint(out: &Path, step: u64) -> Checkpoint {
    let p = out
        .join("checkpoints")
        .join(format!("ckpt-{step:010}.safetensors"));
    load_checkpoint(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Bit patterns.
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Asserts that two parameter vectors are bitwise equal (reporting how many values differ).
pub fn assert_bitwise(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let n = a
        .iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count();
    assert_eq!(
        n,
        0,
        "{what}: {n} of {} values differ in some bit (relative distance {:e})",
        a.len(),
        rel_dist(a, b)
    );
}

/// Largest |a - b| over the largest |b|: the relative distance of two parameter vectors.
pub fn rel_dist(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() as f64)
        .fold(0.0, f64::max);
    let s = b.iter().map(|y| y.abs() as f64).fold(0.0, f64::max);
    d / s.max(1e-30)
}

/// A fresh run directory under `dir`.
pub fn out_dir(dir: &Path, name: &str) -> (PathBuf, String) {
    let p = dir.join(name);
    let s = p.display().to_string();
    (p, s)
}

/// Waits until run directory `out` holds at least `n` checkpoints while `job` runs; panics with the
/// processes' stderr when one of them exits first or [`LIMIT`] passes.
pub fn wait_for_checkpoints(job: &mut Vec<Child>, out: &Path, n: usize) {
    let ckpts = out.join("checkpoints");
    let start = std::time::Instant::now();
    while ffn_io::checkpoint::list_checkpoints(&ckpts)
        .map(|l| l.len())
        .unwrap_or(0)
        < n
    {
        if start.elapsed() > LIMIT
            || job
                .iter_mut()
                .any(|c| c.try_wait().ok().flatten().is_some())
        {
            let errs: Vec<String> = job
                .drain(..)
                .map(|c| finish(c, LIMIT, "training process").stderr)
                .collect();
            panic!(
                "fewer than {n} checkpoints appeared in {}; stderr of the processes:\n{}",
                out.display(),
                errs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
