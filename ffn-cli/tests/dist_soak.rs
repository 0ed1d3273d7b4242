//! Fault-injection soak test of data-parallel training: round after round, a 2-rank job under
//! `ffn launch` has a random rank killed (SIGKILL) or stalled (SIGSTOP) at a random step; the job
//! must end within a bounded time (no hang), the newest checkpoint written before the fault must
//! still load (no lost checkpoint), and `--resume` must end with weights bitwise equal to an
//! uninterrupted run (no divergence).
//!
//! `FFN_SOAK_ROUNDS` (default 4) and `FFN_SOAK_SEED` (default 1) choose the rounds; the counts
//! are printed (`cargo test --test dist_soak -- --nocapture`).

mod support;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use ffn_core::rng::Rng;
use support::dist::*;
use support::*;

/// Steps of every run; faults fall between the first checkpoint and shortly before the end.
const STEPS: u64 = 24;
/// The communicator timeout of the faulted jobs: a lost peer is an error after this long.
const COMM_TIMEOUT_S: u64 = 3;
/// The longest a faulted job may take to end once its peer died or stalled.
const END_WITHIN: Duration = Duration::from_secs(COMM_TIMEOUT_S + 20);

/// What happens to the chosen rank.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Stall,
}

/// The outcome counts of the soak.
#[derive(Debug, Default)]
struct Counts {
    rounds: usize,
    kills: usize,
    stalls: usize,
    hangs: usize,
    lost_checkpoints: usize,
    divergences: usize,
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn args_for(base: &[String], out: &str, extra: &[&str]) -> Vec<String> {
    let steps = STEPS.to_string();
    let timeout = COMM_TIMEOUT_S.to_string();
    let mut e = vec!["--out", out, "--max-steps", &steps, "--comm", "shm"];
    e.extend(["--comm-timeout", &timeout]);
    e.extend(extra);
    with(base, &e)
}

/// The launcher's rank processes (its children), in pid order.
fn ranks_of(launcher: &Child) -> Vec<i32> {
    let out = Command::new("pgrep")
        .args(["-P", &launcher.id().to_string()])
        .output()
        .expect("pgrep");
    let mut pids: Vec<i32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    pids.sort_unstable();
    pids
}

fn signal(pid: i32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
}

fn newest_step(dir: &Path) -> Option<u64> {
    ffn_io::checkpoint::list_checkpoints(dir)
        .ok()
        .and_then(|l| l.last().map(|(s, _)| *s))
}

/// Waits for `child` at most `limit`; `None` (after killing it) when it is still running.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<i32> {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waiting") {
            return Some(status.code().unwrap_or(-1));
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The training data in `dir` (the `ffn train` arguments) and the final weights of an
/// uninterrupted 2-rank run on it, which every faulted run must end with.
fn data_and_reference(dir: &Path) -> (Vec<String>, Vec<f32>) {
    let base = with(&prepare(dir), &["--batch-size", "2"]);
    let (r, sr) = out_dir(dir, "reference");
    ok(
        &run(launch(2, &args_for(&base, &sr, &[])), LIMIT),
        "uninterrupted run",
    );
    (base, checkpoint(&r, STEPS).params)
}

/// One round: start, inject `fault` into a rank at about `at_step`, check the end, resume.
fn round(
    base: &[String],
    dir: &Path,
    reference: &[f32],
    fault: Fault,
    at_step: u64,
    rng: &mut Rng,
    c: &mut Counts,
) {
    let (out, so) = out_dir(dir, &format!("round-{}", c.rounds));
    let ckpts = out.join("checkpoints");
    let mut job = spawn(launch(
        2,
        &args_for(base, &so, &["--checkpoint-every", "2"]),
    ));
    let t0 = Instant::now();
    while newest_step(&ckpts).is_none_or(|s| s < at_step) {
        if t0.elapsed() > LIMIT {
            c.hangs += 1;
            let _ = job.kill();
            let _ = job.wait();
            return;
        }
        if job.try_wait().expect("waiting").is_some() {
            break; // finished before the fault: nothing injected this round
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let ranks = ranks_of(&job);
    let before = newest_step(&ckpts);
    if let (false, Some(&victim)) = (ranks.is_empty(), ranks.get(rng.below(ranks.len().max(1)))) {
        match fault {
            Fault::Kill => (signal(victim, "KILL"), c.kills += 1),
            Fault::Stall => (signal(victim, "STOP"), c.stalls += 1),
        };
        if wait_bounded(&mut job, END_WITHIN).is_none() {
            c.hangs += 1;
        }
        // A stalled rank the launcher could not stop: end it (SIGKILL works on stopped processes).
        signal(victim, "KILL");
    } else if wait_bounded(&mut job, LIMIT).is_none() {
        c.hangs += 1;
    }
    let valid = ffn_io::checkpoint::newest_valid_checkpoint(&ckpts).expect("listing checkpoints");
    let kept = valid.found.as_ref().map(|(_, ck)| ck.step);
    if kept < before {
        c.lost_checkpoints += 1;
    }
    let resume = args_for(base, &so, &["--checkpoint-every", "2", "--resume"]);
    let f = finish(spawn(launch(2, &resume)), LIMIT, "resume after the fault");
    assert_eq!(f.code, 0, "resume failed:\n{}", f.stderr);
    if bits(&checkpoint(&out, STEPS).params) != bits(reference) {
        c.divergences += 1;
    }
}

#[test]
fn killed_or_stalled_ranks_never_hang_lose_checkpoints_or_diverge() {
    let rounds = env_or("FFN_SOAK_ROUNDS", 4);
    let seed = env_or("FFN_SOAK_SEED", 1);
    let dir = tempfile::tempdir().unwrap();
    let (base, reference) = data_and_reference(dir.path());
    let mut rng = Rng::new(seed);
    let mut c = Counts::default();
    while (c.rounds as u64) < rounds {
        let fault = if rng.below(2) == 0 {
            Fault::Kill
        } else {
            Fault::Stall
        };
        let at_step = 2 + 2 * rng.below(((STEPS - 6) / 2) as usize) as u64;
        round(
            &base,
            dir.path(),
            &reference,
            fault,
            at_step,
            &mut rng,
            &mut c,
        );
        c.rounds += 1;
    }
    println!(
        "soak (seed {seed}): {} rounds, {} ranks killed, {} stalled, {} hangs, {} lost checkpoints, {} divergences",
        c.rounds, c.kills, c.stalls, c.hangs, c.lost_checkpoints, c.divergences
    );
    assert!(c.kills + c.stalls > 0, "no fault was injected: {c:?}");
    assert_eq!(
        (c.hangs, c.lost_checkpoints, c.divergences),
        (0, 0, 0),
        "{c:?}"
    );
}

/// `ffn launch --max-restarts 2`: a rank killed mid-run makes the launcher restart all ranks,
/// which resume from the newest checkpoint and end with the weights of an uninterrupted run.
#[test]
fn a_killed_rank_under_max_restarts_ends_in_the_uninterrupted_weights() {
    let dir = tempfile::tempdir().unwrap();
    let (base, reference) = data_and_reference(dir.path());
    let (out, so) = out_dir(dir.path(), "restarted");
    let mut cmd = Command::new(FFN);
    cmd.args([
        "launch",
        "-n",
        "2",
        "--timeout",
        "200",
        "--max-restarts",
        "2",
        "--",
    ])
    .args(args_for(&base, &so, &["--checkpoint-every", "2"]))
    .env("RAYON_NUM_THREADS", "1");
    let mut job = spawn(cmd);
    let ckpts = out.join("checkpoints");
    let t0 = Instant::now();
    while newest_step(&ckpts).is_none_or(|s| s < 6) {
        assert!(t0.elapsed() < LIMIT, "no checkpoint at step 6");
        assert!(
            job.try_wait().unwrap().is_none(),
            "the job ended before the fault"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let ranks = ranks_of(&job);
    assert_eq!(ranks.len(), 2, "{ranks:?}");
    signal(ranks[1], "KILL");
    let f = finish(job, LIMIT, "the restarted job");
    assert_eq!(f.code, 0, "stderr:\n{}", f.stderr);
    assert!(
        f.stderr
            .contains("ffn launch: restart 1/2 of all 2 ranks after rank ")
            && f.stderr.contains("--resume"),
        "{}",
        f.stderr
    );
    assert!(!f.stderr.contains("restart 2/2"), "{}", f.stderr);
    assert_bitwise(
        &checkpoint(&out, STEPS).params,
        &reference,
        "weights after the restart",
    );
}
