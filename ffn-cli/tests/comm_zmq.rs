//! The ZeroMQ backend with ranks started as separate processes (torchrun-style variables), and
//! under `ffn launch`.
#![cfg(feature = "zmq")]

mod support;

use std::process::Command;
use std::time::Duration;
use support::comm::*;
use support::*;

const LIMIT: Duration = Duration::from_secs(120);

fn rank(r: usize, n: usize, port: u16, token: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(FFN);
    cmd.args(["comm-selftest", "--backend", "zmq"]).args(extra);
    cmd.env("RANK", r.to_string())
        .env("WORLD_SIZE", n.to_string());
    cmd.env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("FFN_COMM_TOKEN", token);
    cmd
}

fn run_ranks(n: usize, extra: &[&str]) -> Finished {
    let port = free_port();
    let children: Vec<_> = (0..n)
        .map(|r| spawn(rank(r, n, port, "tok", extra)))
        .collect();
    let mut all = Finished {
        code: 0,
        stdout: String::new(),
        stderr: String::new(),
        elapsed: Duration::ZERO,
    };
    for (r, c) in children.into_iter().enumerate() {
        let f = finish(c, LIMIT, &format!("zmq rank {r}"));
        all.code = all.code.max(f.code);
        all.stdout.push_str(&f.stdout);
        all.stderr.push_str(&f.stderr);
    }
    all
}

#[test]
fn zmq_suite_passes_on_2_separate_processes_with_64_mib() {
    let f = run_ranks(2, &["--large"]);
    assert_suite_passed(&f, 2, true, "zmq n=2 --large");
}

#[test]
fn zmq_suite_passes_on_3_separate_processes() {
    let f = run_ranks(3, &[]);
    assert_suite_passed(&f, 3, false, "zmq n=3");
}

#[test]
fn zmq_under_ffn_launch() {
    let mut cmd = Command::new(FFN);
    cmd.args([
        "launch",
        "-n",
        "3",
        "--",
        "comm-selftest",
        "--backend",
        "zmq",
    ]);
    assert_suite_passed(
        &run_named(cmd, LIMIT, "launch zmq"),
        3,
        false,
        "ffn launch -n 3 zmq",
    );
}

#[test]
fn a_killed_peer_is_an_error_naming_it() {
    let port = free_port();
    let args = ["--fail-rank", "1", "--fail-mode", "stall", "--timeout", "3"];
    let c0 = spawn(rank(0, 3, port, "t", &args));
    let mut c1 = spawn(rank(1, 3, port, "t", &args));
    let c2 = spawn(rank(2, 3, port, "t", &args));
    wait_for_stderr(&mut c1, "fails now", LIMIT);
    kill9(&mut c1);
    let _ = c1.wait();
    for (r, c) in [(0, c0), (2, c2)] {
        let f = finish(c, LIMIT, &format!("zmq rank {r} after rank 1 was killed"));
        assert_eq!(f.code, 1, "rank {r}: {}", f.stderr);
        assert!(f.stderr.contains("rank(s) [1]"), "rank {r}: {}", f.stderr);
        assert!(
            f.elapsed < Duration::from_secs(20),
            "rank {r} took {:?}",
            f.elapsed
        );
    }
}

#[test]
fn a_peer_with_the_wrong_token_is_refused() {
    let port = free_port();
    let c0 = spawn(rank(0, 2, port, "right", &["--timeout", "3"]));
    let c1 = spawn(rank(1, 2, port, "wrong", &["--timeout", "3"]));
    let f1 = finish(c1, LIMIT, "zmq rank with a wrong token");
    let f0 = finish(c0, LIMIT, "zmq rank 0 waiting");
    assert_eq!(f1.code, 1);
    assert!(
        f1.stderr.contains("rendezvous refused: job token mismatch"),
        "{}",
        f1.stderr
    );
    assert!(
        !f1.stderr.contains("right"),
        "the token must not be printed: {}",
        f1.stderr
    );
    assert_eq!(f0.code, 1);
    assert!(
        f0.stderr.contains("refused a peer claiming rank 1"),
        "{}",
        f0.stderr
    );
    assert!(
        f0.stderr.contains("timed out") && f0.stderr.contains("rank(s) [1]"),
        "{}",
        f0.stderr
    );
}
