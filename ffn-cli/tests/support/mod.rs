//! Helpers of the CLI tests: start `ffn` processes and never wait forever ([`run`], [`finish`]);
//! [`comm`]: the communicator suites; [`dist`]: data and runs of the data-parallel training tests;
//! [`tiled`]: volumes and runs of the tiled-inference tests; [`interop`]: the reference Python
//! clients; [`train_data`]: synthetic training data and the tiny network of the training tests.

#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod comm;
pub mod dist;
pub mod hosts;
pub mod interop;
pub mod tiled;
pub mod train_data;

/// The `ffn` binary under test.
pub const FFN: &str = env!("CARGO_BIN_EXE_ffn");

/// What a finished process left behind.
#[derive(Debug)]
pub struct Finished {
    /// Exit code (128 + signal when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
}

/// Starts `cmd` with its output captured.
pub fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"))
}

/// Waits for `child` at most `limit`; kills it and panics (naming `what`) if it is still running.
pub fn finish(mut child: Child, limit: Duration, what: &str) -> Finished {
    use std::os::unix::process::ExitStatusExt;
    let start = Instant::now();
    // Drain the pipes on threads so that a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().expect("stdout is piped");
    let mut err = child.stderr.take().expect("stderr is piped");
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
        if let Some(status) = child.try_wait().expect("waiting for a child") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = t_err.join().unwrap_or_default();
            panic!("{what}: still running after {limit:?} (a hang); stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1);
    Finished {
        code,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
        elapsed: start.elapsed(),
    }
}

/// Runs `cmd` to the end within `limit`; `what` names it in a failure.
pub fn run_named(cmd: Command, limit: Duration, what: &str) -> Finished {
    finish(spawn(cmd), limit, what)
}

/// Runs `cmd` to the end within `limit` (a failure names the command line).
pub fn run(cmd: Command, limit: Duration) -> Finished {
    let what = format!("{cmd:?}");
    run_named(cmd, limit, &what)
}

/// Asserts success, printing the output otherwise.
pub fn ok(f: &Finished, what: &str) {
    assert_eq!(
        f.code, 0,
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        f.code, f.stdout, f.stderr
    );
}

/// The JSON object on every line of `stdout` (the `--json` output of the bench commands); a line
/// that is not JSON fails the test, naming it.
pub fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// `ffn ARGS` as a command whose process may use at most `limit` bytes of address space
/// (`RLIMIT_AS`), with few malloc arenas (each thread's arena reserves address space).
pub fn ffn_with_address_limit(args: &[&str], limit: u64) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(FFN);
    cmd.args(args).env("MALLOC_ARENA_MAX", "2");
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// `mpirun --allow-run-as-root --oversubscribe -n N MPIRUN_ARGS.. PROGRAM`, with its own Open MPI
/// session-directory base (`OMPI_MCA_orte_tmpdir_base`, a fresh directory under the system temp
/// directory): mpiruns started at the same moment, as the tests of one binary are, otherwise race
/// to create the shared one under /tmp and one fails ("orte_session_dir failed", "File exists").
pub fn mpirun_command(n: usize, mpirun_args: &[&str], program: &str) -> Command {
    let base = tempfile::Builder::new()
        .prefix("ffn-ompi-")
        .tempdir()
        .expect("a temporary directory for Open MPI")
        .keep();
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        &n.to_string(),
    ])
    .args(mpirun_args)
    .arg(program)
    .env("OMPI_MCA_orte_tmpdir_base", base)
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c
}
