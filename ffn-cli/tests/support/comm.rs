//! The communicator conformance suites run by `ffn comm-selftest`: digests and their checks.

use std::process::Child;
use std::time::{Duration, Instant};

use super::{Finished, finish};

/// The digests printed by `ffn comm-selftest` lines in `stdout`, in the order they appear.
pub fn digests(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("comm-selftest:"))
        .filter_map(|l| l.rsplit_once("digest ").map(|(_, d)| d.trim().to_string()))
        .collect()
}

/// The digest that the in-process `local` backend gives for the same suite: every backend must
/// print exactly this.
pub fn local_digest(ranks: usize, large: bool) -> String {
    let opts = ffn_comm::conformance::SuiteOptions {
        large,
        ..ffn_comm::conformance::SuiteOptions::quick()
    };
    let reports =
        ffn_comm::local::LocalComm::run(ranks, |c| ffn_comm::conformance::run_all(c, &opts))
            .expect("local backend conformance");
    format!("{:016x}", reports[0].digest)
}

/// Checks that a run of `ranks` ranks passed the suite on every rank with the local backend's digest.
pub fn assert_suite_passed(f: &Finished, ranks: usize, large: bool, what: &str) {
    assert_eq!(
        f.code, 0,
        "{what}: exit code {}; stdout:\n{}\nstderr:\n{}",
        f.code, f.stdout, f.stderr
    );
    let d = digests(&f.stdout);
    assert_eq!(
        d.len(),
        ranks,
        "{what}: expected one result line per rank; stdout:\n{}",
        f.stdout
    );
    let want = local_digest(ranks, large);
    assert!(
        d.iter().all(|x| *x == want),
        "{what}: digests {d:?}, local backend gives {want}"
    );
}

/// A free TCP port on the loopback interface.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Sends SIGKILL to `child` (the test's own child process).
pub fn kill9(child: &mut Child) {
    let _ = child.kill();
}

/// A unique name for per-test resources (shm segments).
pub fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("ffn-test-{name}-{}-{nanos}", std::process::id())
}

/// Reads `child`'s stderr until a line contains `needle`; panics after `limit`. The rest of its
/// stderr is drained in the background.
pub fn wait_for_stderr(child: &mut Child, needle: &str, limit: Duration) {
    use std::io::BufRead;
    let err = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + limit;
    let mut seen = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return,
            Ok(line) => seen.push_str(&line),
            Err(_) => panic!("no stderr line containing {needle:?} within {limit:?}; saw: {seen}"),
        }
    }
}

/// Waits for every rank process (at most `limit` each) and merges their results: the largest exit
/// code, and all their stdout and stderr in rank order. `what` names them in a timeout panic.
pub fn finish_all(children: Vec<Child>, limit: Duration, what: &str) -> Finished {
    let mut all = Finished {
        code: 0,
        stdout: String::new(),
        stderr: String::new(),
        elapsed: Duration::ZERO,
    };
    for (r, c) in children.into_iter().enumerate() {
        let f = finish(c, limit, &format!("{what} rank {r}"));
        all.code = all.code.max(f.code);
        all.stdout.push_str(&f.stdout);
        all.stderr.push_str(&f.stderr);
    }
    all
}
