//! The MPI backend under `mpirun -n 2` and `-n 3` (as root and oversubscribed, as in CI).
#![cfg(feature = "mpi")]

mod support;

use std::process::Command;
use std::time::Duration;
use support::comm::*;
use support::*;

const LIMIT: Duration = Duration::from_secs(180);

fn mpirun(n: usize, args: &[&str]) -> Command {
    let mut cmd = mpirun_command(n, &[], FFN);
    cmd.args(args);
    cmd
}

#[test]
fn mpi_suite_passes_on_2_ranks_with_64_mib() {
    let f = run_named(
        mpirun(2, &["comm-selftest", "--backend", "mpi", "--large"]),
        LIMIT,
        "mpirun -n 2",
    );
    assert_suite_passed(
        &f,
        2,
        true,
        "mpirun -n 2 comm-selftest --backend mpi --large",
    );
}

#[test]
fn mpi_suite_passes_on_3_ranks_with_the_same_bits_as_local() {
    let f = run_named(
        mpirun(3, &["comm-selftest", "--backend", "mpi"]),
        LIMIT,
        "mpirun -n 3",
    );
    assert_suite_passed(&f, 3, false, "mpirun -n 3 comm-selftest --backend mpi");
}

#[test]
fn a_dead_rank_aborts_the_job() {
    let f = run_named(
        mpirun(
            2,
            &[
                "comm-selftest",
                "--backend",
                "mpi",
                "--fail-rank",
                "1",
                "--timeout",
                "30",
            ],
        ),
        LIMIT,
        "dead rank",
    );
    assert_ne!(f.code, 0);
    assert!(f.elapsed < Duration::from_secs(25), "took {:?}", f.elapsed);
}

#[test]
fn a_stalled_rank_trips_the_watchdog_which_names_a_waiting_rank() {
    let args = [
        "comm-selftest",
        "--backend",
        "mpi",
        "--fail-rank",
        "2",
        "--fail-mode",
        "stall",
        "--timeout",
        "3",
    ];
    let f = run_named(mpirun(3, &args), LIMIT, "stalled rank");
    assert_ne!(f.code, 0);
    let all = format!("{}{}", f.stdout, f.stderr);
    // Ranks 0 and 1 wait for the stalled rank 2; whichever watchdog fires first ends the job.
    let named = ["rank 0", "rank 1"]
        .iter()
        .any(|r| all.contains(&format!("{r}: MPI allreduce did not finish within 3.0 s")));
    assert!(named, "{all}");
    assert!(f.elapsed < Duration::from_secs(30), "took {:?}", f.elapsed);
}
