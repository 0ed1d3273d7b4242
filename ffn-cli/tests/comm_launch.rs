//! `ffn launch` with the shm backend: real rank processes, exit codes, timeouts.

mod support;

use std::process::Command;
use std::time::Duration;
use support::comm::*;
use support::*;

const LIMIT: Duration = Duration::from_secs(120);

fn launch(args: &[&str]) -> Command {
    let mut cmd = Command::new(FFN);
    cmd.arg("launch").args(args);
    cmd
}

#[test]
fn shm_suite_passes_on_2_ranks_with_64_mib() {
    let f = run_named(
        launch(&[
            "-n",
            "2",
            "--",
            "comm-selftest",
            "--backend",
            "shm",
            "--large",
        ]),
        LIMIT,
        "shm n=2",
    );
    assert_suite_passed(&f, 2, true, "ffn launch -n 2 shm --large");
}

#[test]
fn shm_suite_passes_on_3_ranks_and_is_deterministic_across_runs() {
    let first = run_named(
        launch(&["-n", "3", "--", "comm-selftest", "--backend", "shm"]),
        LIMIT,
        "shm n=3",
    );
    assert_suite_passed(&first, 3, false, "ffn launch -n 3 shm");
    let second = run_named(
        launch(&["-n", "3", "--", "comm-selftest", "--backend", "shm"]),
        LIMIT,
        "shm n=3 again",
    );
    assert_eq!(digests(&first.stdout), digests(&second.stdout));
}

#[test]
fn a_failing_rank_stops_the_job_and_its_exit_code_is_forwarded() {
    let args = [
        "-n",
        "3",
        "--",
        "comm-selftest",
        "--backend",
        "shm",
        "--fail-rank",
        "1",
        "--timeout",
        "30",
    ];
    let f = run_named(launch(&args), LIMIT, "launch with a failing rank");
    assert_eq!(f.code, 3, "stderr:\n{}", f.stderr);
    assert!(f.stderr.contains("rank 1 failed"), "stderr:\n{}", f.stderr);
    // The others were stopped by the launcher, long before their own 30 s timeout.
    assert!(f.elapsed < Duration::from_secs(20), "took {:?}", f.elapsed);
}

#[test]
fn the_launch_timeout_stops_a_stalled_job() {
    let args = [
        "-n",
        "2",
        "--timeout",
        "2",
        "--",
        "comm-selftest",
        "--backend",
        "shm",
        "--fail-rank",
        "0",
        "--fail-mode",
        "stall",
        "--timeout",
        "60",
    ];
    let f = run_named(launch(&args), LIMIT, "launch --timeout");
    assert_eq!(f.code, 124, "stderr:\n{}", f.stderr);
    assert!(
        f.stderr.contains("did not finish within 2.0 s"),
        "stderr:\n{}",
        f.stderr
    );
    assert!(f.elapsed < Duration::from_secs(15), "took {:?}", f.elapsed);
}

#[test]
fn bad_launch_arguments_are_clear_errors() {
    let f = run_named(
        launch(&["-n", "0", "--", "selfcheck"]),
        LIMIT,
        "launch -n 0",
    );
    assert_ne!(f.code, 0);
    assert!(f.stderr.contains("-n 0"), "stderr:\n{}", f.stderr);
    let f = run_named(
        launch(&["-n", "2", "--", "comm-selftest", "--backend", "nccl"]),
        LIMIT,
        "unknown backend",
    );
    assert_ne!(f.code, 0);
    assert!(
        f.stderr.contains("unknown communicator backend \"nccl\""),
        "stderr:\n{}",
        f.stderr
    );
}
