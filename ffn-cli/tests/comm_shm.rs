//! The shm backend with rank processes started one by one (as any launcher that sets RANK and
//! WORLD_SIZE would): dead and stalled peers must give errors naming the rank, never a hang.

mod support;

use std::process::Command;
use std::time::Duration;
use support::comm::*;
use support::*;

const LIMIT: Duration = Duration::from_secs(60);

fn rank(r: usize, n: usize, name: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(FFN);
    cmd.args(["comm-selftest", "--backend", "shm"]).args(extra);
    cmd.env("RANK", r.to_string())
        .env("WORLD_SIZE", n.to_string())
        .env("FFN_SHM_NAME", name);
    cmd.env_remove("SLURM_PROCID")
        .env_remove("OMPI_COMM_WORLD_RANK");
    cmd
}

#[test]
fn ranks_started_separately_pass_the_suite_and_leave_no_segment() {
    let name = unique("sep");
    let children: Vec<_> = (0..3).map(|r| spawn(rank(r, 3, &name, &[]))).collect();
    let mut out = String::new();
    for (r, c) in children.into_iter().enumerate() {
        let f = finish(c, LIMIT, &format!("shm rank {r}"));
        assert_eq!(f.code, 0, "rank {r}: {}", f.stderr);
        out.push_str(&f.stdout);
    }
    let want = local_digest(3, false);
    assert_eq!(digests(&out), vec![want; 3]);
    assert!(
        !std::path::Path::new("/dev/shm").join(&name).exists(),
        "segment left behind"
    );
}

#[test]
fn a_peer_that_exits_is_an_error_naming_it() {
    let name = unique("exit");
    let args = ["--fail-rank", "1", "--timeout", "30"];
    let c0 = spawn(rank(0, 2, &name, &args));
    let c1 = spawn(rank(1, 2, &name, &args));
    let f1 = finish(c1, LIMIT, "failing rank");
    assert_eq!(f1.code, 3);
    let f0 = finish(c0, LIMIT, "surviving rank");
    assert_eq!(f0.code, 1);
    assert!(
        f0.stderr.contains("peer rank 1 is gone") && f0.stderr.contains("exited"),
        "{}",
        f0.stderr
    );
    // Noticed from the process table, long before the 30 s timeout.
    assert!(
        f0.elapsed < Duration::from_secs(10),
        "took {:?}",
        f0.elapsed
    );
}

#[test]
fn a_killed_peer_is_an_error_not_a_hang() {
    let name = unique("kill");
    let args = [
        "--fail-rank",
        "2",
        "--fail-mode",
        "stall",
        "--timeout",
        "30",
    ];
    let c0 = spawn(rank(0, 3, &name, &args));
    let c1 = spawn(rank(1, 3, &name, &args));
    let mut c2 = spawn(rank(2, 3, &name, &args));
    wait_for_stderr(&mut c2, "fails now", LIMIT);
    kill9(&mut c2);
    let _ = c2.wait();
    for (r, c) in [(0, c0), (1, c1)] {
        let f = finish(c, LIMIT, &format!("rank {r} after rank 2 was killed"));
        assert_eq!(f.code, 1, "rank {r}: {}", f.stderr);
        assert!(f.stderr.contains("rank 2"), "rank {r}: {}", f.stderr);
    }
}

#[test]
fn a_stalled_peer_times_out_naming_it() {
    let name = unique("stall");
    let args = ["--fail-rank", "1", "--fail-mode", "stall", "--timeout", "3"];
    let c0 = spawn(rank(0, 2, &name, &args));
    let mut c1 = spawn(rank(1, 2, &name, &args));
    let f0 = finish(c0, LIMIT, "rank 0 waiting for a stalled peer");
    kill9(&mut c1);
    let _ = c1.wait();
    assert_eq!(f0.code, 1);
    assert!(
        f0.stderr
            .contains("timed out after 3.0 s waiting for rank(s) [1]"),
        "{}",
        f0.stderr
    );
    assert!(
        f0.elapsed < Duration::from_secs(20),
        "took {:?}",
        f0.elapsed
    );
}
