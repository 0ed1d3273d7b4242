//! The launcher of `ffn launch -n N -- <ffn subcommand args>`: starts N ranks of a program on this
//! host, alone or as one host of a job that spans several ([`HostGroup`], torchrun's `--nnodes` /
//! `--node-rank`: every host runs its own launcher with the same rendezvous and secret).
//!
//! Each rank is a process of the program with the environment that the `shm` and `zmq`
//! backends read: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE` (one host of N ranks, or
//! hosts of [`LaunchOptions::ranks_per_host`] ranks), `MASTER_ADDR`,
//! `MASTER_PORT` (a free loopback port), `FFN_SHM_NAME` (a fresh random segment name, unrelated
//! to the token) and `FFN_COMM_TOKEN` (a random 256-bit job secret from getrandom(2); the zmq
//! backend derives its CURVE keys from it; one in the launcher's own environment is replaced). Over
//! several hosts, `RANK` counts from `host * N`, `WORLD_SIZE` is `hosts * N`, `GROUP_RANK` is the host
//! index, and the rendezvous and the secret are the group's (see [`HostGroup`]). The launcher waits for all ranks; when one fails it stops the others and
//! exits with the failed rank's status, so a crashed rank never leaves the job hanging. With
//! a timeout the whole job is stopped after that long (exit status 124).
//!
//! SIGTERM or SIGUSR1 sent to the launcher (a scheduler's preemption warning) is forwarded once
//! to every rank; ranks that stop cleanly exit with [`STOPPED_EXIT_CODE`], which the launcher
//! does not treat as a failure: it waits for the other ranks (which stop at the same step) and
//! exits with that status too.

use crate::stop::{self, STOPPED_EXIT_CODE};
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Where rank processes may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bind {
    /// One CPU per rank.
    Core,
    /// No pinning.
    None,
}

/// A job of `nproc` ranks of one program on this host.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchOptions {
    /// The program every rank runs.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Number of ranks (processes), 1..=4096.
    pub nproc: usize,
    /// Stop every rank and fail (exit status 124) when the job runs longer than this.
    pub timeout: Option<Duration>,
    /// Pinning; `None`: one CPU per rank when there are at most as many ranks as CPUs (like
    /// mpirun), else unpinned.
    pub bind: Option<Bind>,
    /// After a failed rank, start all ranks again (a fresh job: new port, segment and token) up to
    /// this many times. Not after a clean stop on a signal ([`STOPPED_EXIT_CODE`]) or the timeout.
    pub max_restarts: usize,
    /// Arguments added to `args` on a restart where not already there (`--resume` for
    /// `ffn train`, so that the ranks continue from the newest valid checkpoint).
    pub restart_args: Vec<String>,
    /// This host's place in a job over several hosts; `None`: the job is this host's alone.
    pub hosts: Option<HostGroup>,
    /// Present the ranks as hosts of this many ranks each (for the `hier` backend on one machine):
    /// rank r gets `LOCAL_RANK = r % k` and `LOCAL_WORLD_SIZE = k`; `k` must divide `nproc`.
    /// `None`: one host of `nproc` ranks. (The `hier` backend names each host's segment after
    /// `FFN_SHM_NAME` and the host, so all ranks keep the job's one `FFN_SHM_NAME`.)
    pub ranks_per_host: Option<usize>,
}

/// One host's part of a job that spans `hosts` hosts with the same number of ranks on each: this
/// host's ranks are `host * nproc .. (host + 1) * nproc`. Every host's launcher is given the same
/// rendezvous (`master_addr:master_port`, on host 0) and the job secret in `FFN_COMM_TOKEN`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostGroup {
    /// Number of hosts, 1..=4096.
    pub hosts: usize,
    /// This host's index, `0..hosts`.
    pub host: usize,
    /// Host 0's address as the other hosts reach it (never a wildcard).
    pub master_addr: String,
    /// Host 0's rendezvous port.
    pub master_port: u16,
    /// The job secret, the same on every host (at least 16 characters).
    pub token: String,
}

impl HostGroup {
    /// Checks the host index and count, the address and the secret; errors name the flag or the
    /// variable.
    pub fn validate(&self) -> Result<()> {
        if self.hosts == 0 || self.hosts > 4096 {
            bail!(
                "ffn launch --nnodes {}: expected 1..=4096 hosts",
                self.hosts
            );
        }
        if self.host >= self.hosts {
            bail!(
                "ffn launch --node-rank {}: expected 0..{} (one less than --nnodes)",
                self.host,
                self.hosts
            );
        }
        let addr = self.master_addr.trim();
        if addr.is_empty() || crate::env::is_wildcard(addr) || addr.contains(['/', ' ']) {
            bail!(
                "ffn launch --master-addr {:?}: expected host 0's address as the other hosts \
                 reach it (not a wildcard)",
                self.master_addr
            );
        }
        if self.master_port == 0 {
            bail!("ffn launch --master-port 0: expected a TCP port 1..65535");
        }
        crate::secret::check_token(&self.token)
            .with_context(|| format!("ffn launch --nnodes {}", self.hosts))?;
        Ok(())
    }
}

impl LaunchOptions {
    /// `nproc` ranks of `program args`, no timeout, default pinning.
    pub fn new(program: impl Into<PathBuf>, args: Vec<String>, nproc: usize) -> Self {
        Self {
            program: program.into(),
            args,
            nproc,
            timeout: None,
            bind: None,
            max_restarts: 0,
            restart_args: Vec::new(),
            hosts: None,
            ranks_per_host: None,
        }
    }
}

/// How one start of the ranks ended.
#[derive(Clone, Debug, PartialEq, Eq)]
struct JobEnd {
    /// The job's exit status.
    code: i32,
    /// Why it failed (a rank's status), `None` when it did not fail.
    failure: Option<String>,
}

/// Starts the ranks and waits for them, restarting them after a failure up to
/// `opts.max_restarts` times (each restart logged with its cause); returns the job's exit status
/// (0 when all succeeded; the first failing rank's status, after stopping the others; 124 on the
/// timeout; [`STOPPED_EXIT_CODE`] after a stop on a signal).
pub fn launch(opts: &LaunchOptions) -> Result<i32> {
    if opts.nproc == 0 || opts.nproc > 4096 {
        bail!("ffn launch: -n {}: expected 1..=4096 ranks", opts.nproc);
    }
    if let Some(group) = &opts.hosts {
        group.validate()?;
    }
    if let Some(k) = opts.ranks_per_host
        && (k == 0 || !opts.nproc.is_multiple_of(k))
    {
        bail!(
            "ffn launch: --ranks-per-host {k}: expected a divisor of the {} ranks",
            opts.nproc
        );
    }
    stop::install_stop_signals()
        .context("ffn launch: installing the SIGTERM / SIGUSR1 handlers")?;
    let mut args = opts.args.clone();
    let mut end = start_ranks(opts, &args)?;
    for restart in 1..=opts.max_restarts {
        let Some(cause) = end.failure.take() else {
            break;
        };
        if stop::stop_requested().is_some() {
            break;
        }
        for extra in &opts.restart_args {
            if !args.contains(extra) {
                args.push(extra.clone());
            }
        }
        eprintln!(
            "ffn launch: restart {restart}/{} of all {} ranks after {cause}: {}",
            opts.max_restarts,
            opts.nproc,
            args.join(" ")
        );
        end = start_ranks(opts, &args)?;
    }
    Ok(end.code)
}

/// One start of the job: `opts.nproc` ranks of `opts.program args`.
fn start_ranks(opts: &LaunchOptions, args: &[String]) -> Result<JobEnd> {
    let exe = &opts.program;
    let env = job_env(opts.nproc, opts.hosts.as_ref())?;
    let first_rank = opts.hosts.as_ref().map_or(0, |g| g.host * opts.nproc);
    let cpus = allowed_cpus();
    let bind = match opts.bind {
        Some(b) => b == Bind::Core,
        None => opts.nproc <= cpus.len(),
    };
    let mut children: Vec<Option<Child>> = Vec::with_capacity(opts.nproc);
    for rank in 0..opts.nproc {
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let per_host = opts.ranks_per_host.unwrap_or(opts.nproc);
        cmd.env("RANK", (first_rank + rank).to_string())
            .env("LOCAL_RANK", (rank % per_host).to_string())
            .env("LOCAL_WORLD_SIZE", per_host.to_string());
        if bind && !cpus.is_empty() {
            let cpu = cpus[rank % cpus.len()];
            let mut mask = [0u64; 16];
            mask[cpu / 64] |= 1 << (cpu % 64);
            use std::os::unix::process::CommandExt;
            // SAFETY: only an async-signal-safe system call runs between fork and exec; a failure
            // to pin is harmless (the rank runs unpinned).
            unsafe {
                cmd.pre_exec(move || {
                    sched_setaffinity(0, std::mem::size_of_val(&mask), mask.as_ptr());
                    Ok(())
                });
            }
        }
        match cmd.spawn() {
            Ok(child) => children.push(Some(child)),
            Err(e) => {
                stop_all(&mut children);
                return Err(e).with_context(|| {
                    format!(
                        "ffn launch: starting rank {} ({})",
                        first_rank + rank,
                        exe.display()
                    )
                });
            }
        }
    }
    supervise(&mut children, opts.timeout, first_rank)
}

/// The environment shared by this host's ranks of one job: a fresh loopback port and secret for a
/// job of this host alone, the group's rendezvous and secret for a job over several hosts.
fn job_env(n: usize, hosts: Option<&HostGroup>) -> Result<Vec<(String, String)>> {
    let (world, addr, port, token, host) = match hosts {
        Some(g) => (
            g.hosts * n,
            g.master_addr.trim().to_string(),
            g.master_port,
            g.token.clone(),
            g.host,
        ),
        None => {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .context("ffn launch: finding a free TCP port on 127.0.0.1 for the rendezvous")?
                .port();
            let token =
                crate::secret::random_hex(32).context("ffn launch: making the job secret")?;
            (n, "127.0.0.1".to_string(), port, token, 0)
        }
    };
    let name = format!(
        "ffn-shm-{}",
        crate::secret::random_hex(16).context("ffn launch: naming the shm segment")?
    );
    Ok(vec![
        ("WORLD_SIZE".into(), world.to_string()),
        ("GROUP_RANK".into(), host.to_string()),
        ("MASTER_ADDR".into(), addr),
        ("MASTER_PORT".into(), port.to_string()),
        ("FFN_SHM_NAME".into(), name),
        ("FFN_COMM_TOKEN".into(), token),
    ])
}

/// `n` random bytes from the OS ([`crate::secret::os_random`]), or, if the OS has none, from the
/// clock and the process id: run ids, not secrets (secrets use `os_random` and fail instead).
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    if crate::secret::os_random(&mut buf).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let seed = t ^ ((std::process::id() as u128) << 64);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (seed >> ((i % 16) * 8)) as u8;
        }
    }
    buf
}

/// Waits for every rank (`children[i]` is rank `first_rank + i`); on the first failure (or the
/// timeout) stops the rest.
fn supervise(
    children: &mut [Option<Child>],
    timeout: Option<Duration>,
    first_rank: usize,
) -> Result<JobEnd> {
    let start = Instant::now();
    let mut remaining = children.len();
    let mut forwarded = false;
    let mut stopped = false;
    while remaining > 0 {
        if !forwarded && let Some(signal) = stop::stop_requested() {
            forwarded = true;
            eprintln!(
                "ffn launch: {}: asking the {remaining} running rank(s) to stop with a checkpoint",
                stop::signal_name(signal)
            );
            signal_all(children, signal);
        }
        let mut failed: Option<(usize, ExitStatus)> = None;
        for (index, slot) in children.iter_mut().enumerate() {
            let rank = first_rank + index;
            let Some(child) = slot else { continue };
            match child.try_wait() {
                Ok(Some(status)) => {
                    *slot = None;
                    remaining -= 1;
                    if status.code() == Some(STOPPED_EXIT_CODE) {
                        stopped = true;
                    } else if !status.success() && failed.is_none() {
                        failed = Some((rank, status));
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    stop_all(children);
                    return Err(e).with_context(|| format!("ffn launch: waiting for rank {rank}"));
                }
            }
        }
        if let Some((rank, status)) = failed {
            let running = children.iter().filter(|c| c.is_some()).count();
            eprintln!(
                "ffn launch: rank {rank} failed ({status}); stopping the {running} other running rank(s)"
            );
            stop_all(children);
            return Ok(JobEnd {
                code: exit_code(status),
                failure: Some(format!("rank {rank} failed ({status})")),
            });
        }
        if let Some(t) = timeout
            && start.elapsed() >= t
        {
            eprintln!(
                "ffn launch: the job did not finish within {:.1} s; stopping all ranks",
                t.as_secs_f64()
            );
            stop_all(children);
            return Ok(JobEnd {
                code: 124,
                failure: None,
            });
        }
        if remaining > 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(JobEnd {
        code: if stopped { STOPPED_EXIT_CODE } else { 0 },
        failure: None,
    })
}

/// Sends `signal` to every running rank.
fn signal_all(children: &[Option<Child>], signal: i32) {
    for child in children.iter().flatten() {
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: signalling our own child, whose pid cannot be reused before we reap it.
            unsafe { libc_kill(pid, signal) };
        }
    }
}

/// The shell-style exit code of a finished rank (128 + signal when it was killed).
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    }
}

/// Asks every running rank to stop (SIGTERM), waits up to 2 s, then kills what is left.
fn stop_all(children: &mut [Option<Child>]) {
    signal_all(children, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(2);
    for slot in children.iter_mut() {
        if let Some(child) = slot {
            while Instant::now() < deadline {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        *slot = None;
    }
}

/// The CPUs this process may run on, in increasing order (empty if the OS does not say).
fn allowed_cpus() -> Vec<usize> {
    let mut mask = [0u64; 16];
    // SAFETY: the kernel writes at most `size_of_val(&mask)` bytes into `mask`.
    let rc = unsafe { sched_getaffinity(0, std::mem::size_of_val(&mask), mask.as_mut_ptr()) };
    if rc != 0 {
        return Vec::new();
    }
    (0..1024)
        .filter(|&c| mask[c / 64] & (1 << (c % 64)) != 0)
        .collect()
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
    fn sched_setaffinity(pid: i32, size: usize, mask: *const u64) -> i32;
    fn sched_getaffinity(pid: i32, size: usize, mask: *mut u64) -> i32;
}
