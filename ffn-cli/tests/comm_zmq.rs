//! The ZeroMQ backend with ranks started as separate processes (torchrun-style variables), and
//! under `ffn launch`.
#![cfg(feature = "zmq")]

mod support;

use std::process::Command;
use std::time::Duration;
use support::comm::*;
use support::*;

const LIMIT: Duration = Duration::from_secs(120);
const TOKEN: &str = "cli-test-secret-0123456789";

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
        .map(|r| spawn(rank(r, n, port, TOKEN, extra)))
        .collect();
    finish_all(children, LIMIT, "zmq")
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
    let c0 = spawn(rank(0, 3, port, TOKEN, &args));
    let mut c1 = spawn(rank(1, 3, port, TOKEN, &args));
    let c2 = spawn(rank(2, 3, port, TOKEN, &args));
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
    let c0 = spawn(rank(
        0,
        2,
        port,
        "the-right-secret-0123",
        &["--timeout", "3"],
    ));
    let c1 = spawn(rank(
        1,
        2,
        port,
        "the-wrong-secret-0123",
        &["--timeout", "3"],
    ));
    let f1 = finish(c1, LIMIT, "zmq rank with a wrong token");
    let f0 = finish(c0, LIMIT, "zmq rank 0 waiting");
    assert_eq!(f1.code, 1);
    assert!(
        f1.stderr.contains("rendezvous refused: job token mismatch"),
        "{}",
        f1.stderr
    );
    assert!(
        !f1.stderr.contains("secret-0123"),
        "the token must not be printed: {}",
        f1.stderr
    );
    assert_eq!(f0.code, 1);
    assert!(
        f0.stderr.contains("did not prove the job secret"),
        "{}",
        f0.stderr
    );
    assert!(
        f0.stderr.contains("timed out") && f0.stderr.contains("rank(s) [1]"),
        "{}",
        f0.stderr
    );
}

#[test]
fn ranks_without_a_secret_do_not_start() {
    let port = free_port();
    let mut c = rank(0, 2, port, "", &["--timeout", "3"]);
    c.env_remove("FFN_COMM_TOKEN");
    let f = finish(spawn(c), LIMIT, "zmq rank without FFN_COMM_TOKEN");
    assert_eq!(f.code, 1, "{}", f.stderr);
    assert!(
        f.stderr.contains("FFN_COMM_TOKEN") && f.stderr.contains("at least 16 characters"),
        "{}",
        f.stderr
    );
    assert!(f.elapsed < Duration::from_secs(3), "took {:?}", f.elapsed);
}

/// A plain ZMTP 3.0 client (NULL mechanism, no secret) that sends `hello` as one message.
fn plain_zmtp_hello(port: u16, hello: &[u8]) -> std::net::TcpStream {
    use std::io::Write;
    let mut t = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut greeting = vec![0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0];
    greeting.extend_from_slice(b"NULL");
    greeting.resize(64, 0);
    let mut ready = vec![0x04, 0];
    ready.extend_from_slice(b"\x05READY\x0bSocket-Type\0\0\0\x06DEALER");
    ready[1] = (ready.len() - 2) as u8;
    let mut msg = vec![0x02];
    msg.extend_from_slice(&(hello.len() as u64).to_be_bytes());
    msg.extend_from_slice(hello);
    for part in [greeting, ready, msg] {
        let _ = t.write_all(&part);
    }
    t
}

#[test]
fn a_stranger_without_the_secret_cannot_take_a_rank() {
    let port = free_port();
    let c0 = spawn(rank(0, 2, port, TOKEN, &[]));
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < LIMIT, "rank 0 never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A hello rank 0 would accept from rank 1 if it came over an authenticated connection.
    let hello = b"ffn-comm-zmq\nversion=2\nsize=2\nrank=1\nblock=1048576\nep=0 tcp://127.0.0.1:9\n";
    let _stranger = plain_zmtp_hello(port, hello);
    std::thread::sleep(Duration::from_millis(300));
    let c1 = spawn(rank(1, 2, port, TOKEN, &[]));
    let (f0, f1) = (
        finish(c0, LIMIT, "zmq rank 0"),
        finish(c1, LIMIT, "zmq rank 1"),
    );
    let want = local_digest(2, false);
    assert_eq!(f0.code, 0, "{}", f0.stderr);
    assert_eq!(f1.code, 0, "{}", f1.stderr);
    assert_eq!(digests(&(f0.stdout + &f1.stdout)), vec![want; 2]);
    assert!(
        f0.stderr.contains("did not prove the job secret"),
        "{}",
        f0.stderr
    );
}

/// The rendezvous port of a job started by `ffn launch` (from a rank's environment; the test
/// runs as the same user, as a stranger on the host could look it up with `ss`).
fn launched_master_port(launcher: &std::process::Child) -> Option<u16> {
    let out = Command::new("pgrep")
        .args(["-P", &launcher.id().to_string()])
        .output()
        .ok()?;
    let pid = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()?
        .to_string();
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"MASTER_PORT="))
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
}

/// A stranger on loopback cannot take a rank of a job started by `ffn launch` (whose ranks hold
/// the launcher's fresh secret): rank 0 refuses its connection and the job completes.
#[test]
fn a_stranger_cannot_join_a_job_under_ffn_launch() {
    let mut cmd = Command::new(FFN);
    cmd.args([
        "launch",
        "-n",
        "2",
        "--",
        "comm-selftest",
        "--backend",
        "zmq",
        "--large",
    ]);
    let job = spawn(cmd);
    let start = std::time::Instant::now();
    let port = loop {
        if let Some(p) = launched_master_port(&job)
            && std::net::TcpStream::connect(("127.0.0.1", p)).is_ok()
        {
            break p;
        }
        assert!(
            start.elapsed() < LIMIT,
            "the launched rank 0 never listened"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let hello = b"ffn-comm-zmq\nversion=2\nsize=2\nrank=1\nblock=1048576\nep=0 tcp://127.0.0.1:9\n";
    let _stranger = plain_zmtp_hello(port, hello);
    let f = finish(job, LIMIT, "ffn launch zmq with a stranger");
    assert_suite_passed(&f, 2, true, "ffn launch -n 2 zmq --large with a stranger");
    assert!(
        f.stderr.contains("did not prove the job secret"),
        "{}",
        f.stderr
    );
}
