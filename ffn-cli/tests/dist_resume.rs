//! `--resume` of data-parallel runs: on the same number of ranks it continues bitwise as if never
//! stopped (every rank's example state is in rank 0's checkpoint); on another number of ranks (and
//! from / to a single-rank run) it continues from the same weights and optimiser state.

mod support;

use std::path::Path;
use std::process::Command;
use support::dist::*;
use support::*;

fn common(dir: &Path) -> Vec<String> {
    // Deltas 2: examples span several steps, so the per-rank example states matter on resume.
    with(
        &prepare(dir),
        &["--batch-size", "2", "--checkpoint-every", "3"],
    )
}

fn train(base: &[String], out: &str, extra: &[&str]) -> Finished {
    let mut e = vec!["--out", out];
    e.extend(extra);
    let f = run(ffn(&with(base, &e)), LIMIT);
    ok(&f, &format!("train {extra:?}"));
    f
}

/// Waits (at most [`LIMIT`]) until the run writing to `out` has logged a metrics row.
fn wait_for_a_metrics_row(out: &Path) {
    let log = out.join("train_log.csv");
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&log).map_or(0, |t| t.lines().count()) < 2 {
        assert!(t0.elapsed() < LIMIT, "no metrics row within {LIMIT:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The step of the newest checkpoint in `out` (the one written at a stop).
fn newest_checkpoint_step(out: &Path) -> u64 {
    let newest = ffn_io::checkpoint::latest_checkpoint(&out.join("checkpoints"))
        .unwrap()
        .expect("a checkpoint at the stop");
    ffn_io::checkpoint::load_checkpoint(&newest).unwrap().step
}

#[test]
fn resume_on_the_same_number_of_ranks_is_bitwise_exact() {
    let dir = tempfile::tempdir().unwrap();
    let base = common(dir.path());
    let (a, sa) = out_dir(dir.path(), "a");
    let (b, sb) = out_dir(dir.path(), "b");
    train(
        &base,
        &sa,
        &["--max-steps", "8", "--comm", "local", "--ranks", "2"],
    );
    train(
        &base,
        &sb,
        &["--max-steps", "4", "--comm", "local", "--ranks", "2"],
    );
    train(
        &base,
        &sb,
        &[
            "--max-steps",
            "8",
            "--comm",
            "local",
            "--ranks",
            "2",
            "--resume",
        ],
    );
    let (ca, cb) = (checkpoint(&a, 8), checkpoint(&b, 8));
    assert_bitwise(&cb.params, &ca.params, "weights after resume");
    assert_eq!(ca.optimizer.len(), cb.optimizer.len());
    for ((na, va), (nb, vb)) in ca.optimizer.iter().zip(&cb.optimizer) {
        assert_eq!(na, nb);
        assert_bitwise(vb, va, na);
    }
    assert!(ca.optimizer.iter().any(|(n, _)| n == "trainer_state.rank1"));
    assert_eq!(ca.training_config["distributed"]["world_size"], 2);
    // The resumed run's log continues the first one's rows (loss and metrics agree).
    let rows = |d: &Path| -> Vec<String> {
        std::fs::read_to_string(d.join("train_log.csv"))
            .unwrap()
            .lines()
            .map(|l| l.split(',').take(7).collect::<Vec<_>>().join(","))
            .collect()
    };
    assert_eq!(rows(&a), rows(&b));
}

#[test]
fn resume_on_another_number_of_ranks_continues_from_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let base = common(dir.path());
    let (o, so) = out_dir(dir.path(), "o");
    train(
        &base,
        &so,
        &["--max-steps", "3", "--comm", "local", "--ranks", "2"],
    );
    let c3 = checkpoint(&o, 3);
    // 2 -> 3 ranks, one step: with momentum, p4 = p3 - lr * v4 exactly, so the step started from
    // the saved weights (lr: 0.01 x the linear rank factor at step 3 of a 2000-step warm-up).
    let f = train(
        &base,
        &so,
        &[
            "--max-steps",
            "4",
            "--comm",
            "local",
            "--ranks",
            "3",
            "--resume",
        ],
    );
    assert!(
        f.stderr.contains("resuming a 2-rank checkpoint on 3 ranks"),
        "{}",
        f.stderr
    );
    let c4 = checkpoint(&o, 4);
    assert_eq!(c4.training_config["distributed"]["world_size"], 3);
    assert_eq!(
        c4.optimizer
            .iter()
            .filter(|(n, _)| n.starts_with("trainer_state"))
            .count(),
        3
    );
    let lr = (0.01f32 as f64 * (1.0 + 2.0 * 3.0 / 2000.0)) as f32;
    let v4 = &c4
        .optimizer
        .iter()
        .find(|(n, _)| n.ends_with("velocity"))
        .expect("velocity")
        .1;
    let replay: Vec<f32> = c3.params.iter().zip(v4).map(|(p, v)| p - lr * v).collect();
    assert_bitwise(&c4.params, &replay, "step 4 from the step-3 weights");
    assert!(rel_dist(&c4.params, &c3.params) > 0.0, "training went on");
    // 3 -> 1 rank (no --comm), then 1 -> 2 ranks over shm processes.
    train(&base, &so, &["--max-steps", "6", "--resume"]);
    let c6 = checkpoint(&o, 6);
    assert!(c6.training_config.get("distributed").is_none());
    let f = run(
        launch(
            2,
            &with(
                &base,
                &[
                    "--out",
                    &so,
                    "--max-steps",
                    "8",
                    "--comm",
                    "shm",
                    "--resume",
                ],
            ),
        ),
        LIMIT,
    );
    ok(&f, "1 -> 2 ranks over shm");
    assert_eq!(
        checkpoint(&o, 8).training_config["distributed"]["world_size"],
        2
    );
}

/// Preemption under `ffn launch`: SIGTERM to the launcher reaches every rank, the job stops at one
/// step with a checkpoint and exit status 75, and `--resume` ends bitwise where an uninterrupted
/// run ends.
#[test]
fn sigterm_to_the_launcher_stops_every_rank_with_a_checkpoint_and_resume_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let base = common(dir.path());
    let (a, sa) = out_dir(dir.path(), "a");
    let (b, sb) = out_dir(dir.path(), "b");
    let shm = ["--comm", "shm"];
    let args = with(
        &base,
        &[&["--out", &sa, "--max-steps", "100000000"], &shm[..]].concat(),
    );
    let child = spawn(launch(2, &args));
    wait_for_a_metrics_row(&a);
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let stopped = finish(child, LIMIT, "the launched job");
    assert_eq!(stopped.code, 75, "stderr:\n{}", stopped.stderr);
    assert!(
        stopped
            .stderr
            .contains("SIGTERM: asking the 2 running rank(s) to stop")
            // The launcher signals the ranks one after another: rank 0 may see the stop first on
            // rank 1 ("stopped by SIGTERM on rank 1 at step ...").
            && stopped.stderr.contains("stopped by SIGTERM"),
        "{}",
        stopped.stderr
    );
    let step = newest_checkpoint_step(&a);
    assert!(step >= 2, "stopped at step {step}");
    let target = (step + 3).to_string();
    let resumed = with(
        &base,
        &[
            &["--out", &sa, "--max-steps", &target, "--resume"],
            &shm[..],
        ]
        .concat(),
    );
    ok(&run(launch(2, &resumed), LIMIT), "resume after SIGTERM");
    let straight = with(
        &base,
        &[&["--out", &sb, "--max-steps", &target], &shm[..]].concat(),
    );
    ok(&run(launch(2, &straight), LIMIT), "uninterrupted run");
    let (ca, cb) = (checkpoint(&a, step + 3), checkpoint(&b, step + 3));
    assert_bitwise(&ca.params, &cb.params, "weights after the stop and resume");
}

/// A stop signal that reaches one rank only (a scheduler's signal racing the step boundary, or a
/// user's `kill`) stops every rank at the same step, and rank 0 says which rank had it.
#[test]
fn a_signal_to_one_rank_stops_every_rank_and_names_that_rank() {
    let dir = tempfile::tempdir().unwrap();
    let base = common(dir.path());
    let (a, sa) = out_dir(dir.path(), "a");
    let args = with(
        &base,
        &["--out", &sa, "--max-steps", "100000000", "--comm", "shm"],
    );
    let shm_name = support::comm::unique("one-rank-signal");
    let ranks: Vec<_> = (0..2)
        .map(|r| {
            let mut c = ffn(&args);
            c.env("RANK", r.to_string())
                .env("WORLD_SIZE", "2")
                .env("FFN_SHM_NAME", &shm_name)
                .env("FFN_COMM_TOKEN", "dist-resume-test-secret-0123456789");
            spawn(c)
        })
        .collect();
    wait_for_a_metrics_row(&a);
    let kill = Command::new("kill")
        .args(["-USR1", &ranks[1].id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let mut ranks = ranks.into_iter();
    let (r0, r1) = (ranks.next().unwrap(), ranks.next().unwrap());
    let (f0, f1) = (finish(r0, LIMIT, "rank 0"), finish(r1, LIMIT, "rank 1"));
    assert_eq!((f0.code, f1.code), (75, 75), "{}\n{}", f0.stderr, f1.stderr);
    assert!(
        f0.stderr.contains("stopped by SIGUSR1 on rank 1 at step"),
        "{}",
        f0.stderr
    );
    let step = newest_checkpoint_step(&a);
    assert!(
        f0.stderr.contains(&format!("at step {step}:")),
        "checkpoint of step {step}; {}",
        f0.stderr
    );
}
