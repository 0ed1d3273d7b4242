//! Helpers of the data-parallel training tests: data, runs on every backend, checkpoint comparison.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ffn_io::checkpoint::{Checkpoint, load_checkpoint};

/// The `ffn` binary under test.
pub const FFN: &str = env!("CARGO_BIN_EXE_ffn");

/// No test run may take longer than this (a hang is a failure, not a stuck CI job).
pub const LIMIT: Duration = Duration::from_secs(240);

/// What a finished command left behind.
#[derive(Debug)]
pub struct Finished {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Wall time.
    pub elapsed: Duration,
}

/// Runs `cmd` with captured output, killing it (and failing) after `limit`.
pub fn run(mut cmd: Command, limit: Duration) -> Finished {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let what = format!("{cmd:?}");
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    finish(child, limit, &what)
}

/// Waits for `child` at most `limit` (kills it and panics when it is still running).
pub fn finish(mut child: Child, limit: Duration, what: &str) -> Finished {
    use std::io::Read;
    let start = Instant::now();
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for a child") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: still running after {limit:?} (a hang); stderr:\n{}",
                t_err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Finished {
        code: status.code().unwrap_or(-1),
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
        elapsed: start.elapsed(),
    }
}

/// Asserts success, printing the output otherwise.
pub fn ok(f: &Finished, what: &str) {
    assert_eq!(
        f.code, 0,
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        f.code, f.stdout, f.stderr
    );
}

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
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        &n.to_string(),
        "-x",
        THREADS.0,
        FFN,
    ])
    .args(args);
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env(THREADS.0, THREADS.1);
    c
}

/// Synthetic volume, partitions and coordinates in `dir`; returns the `ffn train` data arguments.
pub fn prepare(dir: &Path) -> Vec<String> {
    let h5 = dir.join("s.h5").display().to_string();
    let coords = dir.join("t.coords").display().to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    for args in [
        s(&[
            "synth",
            "--out",
            &h5,
            "--shape",
            "30,30,30",
            "--neurites",
            "10",
            "--seed",
            "5",
        ]),
        s(&[
            "partitions",
            "--labels",
            &format!("{h5}:labels"),
            "--out",
            &format!("{h5}:af"),
            "--lom-radius",
            "4",
            "--min-size",
            "100",
        ]),
        s(&[
            "coordinates",
            "--partitions",
            &format!("s:{h5}:af"),
            "--out",
            &coords,
            "--margin",
            "6",
        ]),
    ] {
        ok(&run(ffn(&args), LIMIT), &format!("ffn {args:?}"));
    }
    s(&[
        "train",
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
        "--optimizer",
        "momentum",
        "--learning-rate",
        "0.01",
        "--report-every",
        "2",
        "--quiet",
    ])
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
