//! ffn-rs under a real SLURM (`scripts/slurm-up.sh` starts a single-node cluster; CI runs it and
//! sets `FFN_REQUIRE_SLURM=1`, which makes a missing SLURM a failure, not a skip):
//! - `srun -n 2 ffn train` with the shm and zmq backends finds its ranks from SLURM's variables and
//!   trains bitwise like two local ranks; `srun -n 2 ffn infer-tiled` shares the tiles;
//! - preemption: `scancel --signal=USR1 --batch` (what `--signal=B:USR1@T` does) reaches the batch
//!   script, which passes it on to the ranks (as the README's script does); they checkpoint and
//!   exit 75, the script requeues the job, and the requeued job resumes and ends with the weights of an
//!   uninterrupted run.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::dist::*;
use support::*;

/// Whether a SLURM cluster answers; panics when `FFN_REQUIRE_SLURM=1` and none does.
fn slurm_available() -> bool {
    let up = Command::new("sinfo")
        .args(["-h", "-o", "%T"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .any(|state| ["idle", "mixed", "allocated", "completing"].contains(&state))
        });
    let required = std::env::var("FFN_REQUIRE_SLURM").is_ok_and(|v| v == "1");
    assert!(
        up || !required,
        "FFN_REQUIRE_SLURM=1 but no SLURM node is up (sinfo) (start one as root: bash scripts/slurm-up.sh)"
    );
    if !up {
        eprintln!("no SLURM cluster (sinfo): not run here; CI runs it with FFN_REQUIRE_SLURM=1");
    }
    up
}

/// `srun -n N ffn ARGS` with one kernel thread per rank.
fn srun(n: usize, args: &[String]) -> Command {
    let mut c = Command::new("srun");
    c.args([
        "-n",
        &n.to_string(),
        "--export=ALL,RAYON_NUM_THREADS=1",
        FFN,
    ])
    .args(args);
    c
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

fn train_args(base: &[String], out: &str, steps: u64, extra: &[&str]) -> Vec<String> {
    let steps = steps.to_string();
    let mut e = vec!["--out", out, "--max-steps", &steps];
    e.extend(extra);
    with(base, &e)
}

#[test]
fn srun_trains_on_shm_and_zmq_like_local_ranks() {
    if !slurm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = with(&prepare(dir.path()), &["--batch-size", "2"]);
    let (r, sr) = out_dir(dir.path(), "local");
    let local = train_args(&base, &sr, 10, &["--comm", "local", "--ranks", "2"]);
    ok(&run(ffn(&local), LIMIT), "2 local ranks");
    let reference = checkpoint(&r, 10).params;
    for backend in ["shm", "zmq"] {
        let (o, so) = out_dir(dir.path(), backend);
        let args = train_args(&base, &so, 10, &["--comm", backend]);
        let mut cmd = srun(2, &args);
        cmd.env("MASTER_PORT", free_port().to_string())
            .env("FFN_COMM_TOKEN", "a-secret-of-the-slurm-test-job");
        let f = run(cmd, LIMIT);
        ok(&f, &format!("srun -n 2 ffn train --comm {backend}"));
        let ck = checkpoint(&o, 10);
        assert_eq!(ck.training_config["distributed"]["world_size"], 2);
        assert_bitwise(&ck.params, &reference, &format!("srun {backend} vs local"));
    }
}

#[test]
fn srun_shares_the_tiles_of_infer_tiled() {
    if !slurm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, truth) = support::tiled::write_boxes(dir.path(), [30, 30, 30], 21);
    let out = format!("{}:seg", dir.path().join("out.h5").display());
    let mut args: Vec<String> = [
        "infer-tiled",
        "--backend",
        "shm",
        "--image",
        &img,
        "--out",
        &out,
    ]
    .map(String::from)
    .to_vec();
    args.extend(["--tile-size", "12"].map(String::from));
    args.extend(support::tiled::ORACLE.map(String::from));
    let f = run(srun(2, &args), LIMIT);
    ok(&f, "srun -n 2 ffn infer-tiled");
    for rank in 0..2 {
        assert!(
            f.stdout
                .contains(&format!("infer-tiled: rank {rank} computed")),
            "{}",
            f.stdout
        );
    }
    let seg = support::tiled::read_seg(&out);
    assert_eq!(support::tiled::arand(&truth, &seg), 0.0);
}

/// `scontrol show job J` as `key=value` fields.
fn job_field(job: &str, key: &str) -> String {
    let o = Command::new("scontrol")
        .args(["show", "job", job])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_default()
        .to_string()
}

fn wait_for(what: &str, job: &str, log: &Path, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        if t0.elapsed() > LIMIT {
            let _ = Command::new("scancel").arg(job).status();
            panic!(
                "{what}: not within {LIMIT:?}; job state {}; job output:\n{}",
                job_field(job, "JobState"),
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_preempted_batch_job_checkpoints_requeues_and_ends_in_the_uninterrupted_weights() {
    if !slurm_available() {
        return;
    }
    const STEPS: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let base = with(&prepare(dir.path()), &["--batch-size", "2"]);
    let (r, sr) = out_dir(dir.path(), "reference");
    let local = train_args(&base, &sr, STEPS, &["--comm", "local", "--ranks", "2"]);
    ok(&run(ffn(&local), LIMIT), "uninterrupted run");
    let (o, so) = out_dir(dir.path(), "batch");
    let args = train_args(
        &base,
        &so,
        STEPS,
        &["--comm", "shm", "--resume", "--checkpoint-every", "5"],
    );
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let script = dir.path().join("job.sh");
    let log = dir.path().join("job.out");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\n\
             #SBATCH --ntasks=2\n#SBATCH --requeue\n#SBATCH --open-mode=append\n\
             #SBATCH --output={log}\n\
             trap 'echo \"batch script: SIGUSR1\"; scancel --signal=USR1 $SLURM_JOB_ID' USR1\n\
             export RAYON_NUM_THREADS=1\n\
             srun '{FFN}' {args} &\n\
             wait $!; rc=$?\n\
             [ $rc -eq 138 ] && {{ wait $!; rc=$?; }}\n\
             echo \"step ended with $rc (restart ${{SLURM_RESTART_COUNT:-0}})\"\n\
             if [ $rc -eq 75 ]; then scontrol requeue $SLURM_JOB_ID; exit 0; fi\n\
             exit $rc\n",
            log = log.display(),
            args = quoted.join(" ")
        ),
    )
    .unwrap();
    let sub = Command::new("sbatch")
        .arg("--parsable")
        .arg(format!("--chdir={}", dir.path().display()))
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        sub.status.success(),
        "{}",
        String::from_utf8_lossy(&sub.stderr)
    );
    let job = String::from_utf8_lossy(&sub.stdout).trim().to_string();
    let train_log = o.join("train_log.csv");
    wait_for("training under sbatch", &job, &log, || {
        std::fs::read_to_string(&train_log).map_or(0, |t| t.lines().count()) >= 3
    });
    let sent = Command::new("scancel")
        .args(["--signal=USR1", "--batch", &job])
        .status()
        .unwrap();
    assert!(sent.success());
    wait_for("the requeue", &job, &log, || {
        job_field(&job, "Restarts") == "1"
    });
    let requeued = Instant::now();
    wait_for("the requeued job", &job, &log, || {
        let state = job_field(&job, "JobState");
        // A requeued job waits two minutes (BeginTime); let it start now, but not within the
        // second of its requeue: slurmd refuses a launch whose credential is from the second in
        // which it revoked the job's old one ("Job credential revoked"), which fails the job.
        if state == "PENDING" && requeued.elapsed() > Duration::from_secs(2) {
            let _ = Command::new("scontrol")
                .args(["update", &format!("JobId={job}"), "StartTime=now"])
                .status();
            std::thread::sleep(Duration::from_millis(500));
        }
        // The old run's end can show as COMPLETED for a moment after its requeue: done when the
        // requeued run has also written its last line.
        state == "COMPLETED"
            && std::fs::read_to_string(&log).is_ok_and(|t| t.contains("(restart 1)"))
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        // "stopped by SIGUSR1 at step ..." or, when rank 1 had the signal before rank 0's step
        // boundary, "stopped by SIGUSR1 on rank 1 at step ...".
        text.contains("stopped by SIGUSR1")
            && text.contains("step ended with 75 (restart 0)")
            && text.contains("step ended with 0 (restart 1)"),
        "{text}"
    );
    assert_bitwise(
        &checkpoint(&o, STEPS).params,
        &checkpoint(&r, STEPS).params,
        "weights after preemption and requeue",
    );
}
