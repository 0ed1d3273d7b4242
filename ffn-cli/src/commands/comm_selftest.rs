//! `ffn comm-selftest` (hidden): runs the communicator conformance suite inside one rank process.
//!
//! Used by the multi-process tests: start it under `ffn launch -n N`, `mpirun -n N`, or as N
//! processes with `RANK`/`WORLD_SIZE` set. Every rank prints one line
//! `comm-selftest: backend B rank R of N: K checks passed, digest D`; the digest is identical on all
//! ranks, in every run and for every backend. `--fail-rank` makes one rank die or stall after a few
//! collectives so that the tests can check that the others fail with an error instead of hanging.

use anyhow::{Context, Result, bail};
use ffn_comm::conformance::{self, SuiteOptions};
use ffn_comm::{Backend, CommOptions};
use std::time::Duration;

/// How the failing rank fails.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailMode {
    /// Exit at once with status 3, skipping all clean-up.
    Exit,
    /// Stop taking part (sleep) until killed.
    Stall,
}

/// Arguments of `ffn comm-selftest`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Backend: local, shm, mpi, zmq or hier.
    #[arg(long)]
    backend: String,
    /// Also reduce a 64 MiB buffer.
    #[arg(long)]
    large: bool,
    /// Seed of the inputs (default: FFN_TEST_SEED or 7).
    #[arg(long)]
    seed: Option<u64>,
    /// Collective timeout in seconds (default: FFN_COMM_TIMEOUT or 60).
    #[arg(long)]
    timeout: Option<f64>,
    /// This rank fails after `--fail-after` allreduces instead of running the suite.
    #[arg(long)]
    fail_rank: Option<usize>,
    /// Number of allreduces before the failing rank fails.
    #[arg(long, default_value_t = 3)]
    fail_after: usize,
    /// How the failing rank fails.
    #[arg(long, value_enum, default_value_t = FailMode::Exit)]
    fail_mode: FailMode,
}

/// Runs the suite (or the failure scenario) on this rank.
pub fn run(args: Args) -> Result<()> {
    let backend: Backend = args.backend.parse().context("comm-selftest --backend")?;
    let mut opts = CommOptions::from_env().context("comm-selftest: reading the environment")?;
    if let Some(t) = args.timeout {
        if !(t.is_finite() && t > 0.0) {
            bail!("comm-selftest --timeout {t}: expected a positive number of seconds");
        }
        opts.timeout = Duration::from_secs_f64(t);
    }
    let seed = match (args.seed, std::env::var("FFN_TEST_SEED")) {
        (Some(s), _) => s,
        (None, Ok(v)) => v
            .parse()
            .with_context(|| format!("FFN_TEST_SEED={v:?}: expected an integer"))?,
        (None, Err(_)) => SuiteOptions::quick().seed,
    };
    let mut comm = ffn_comm::connect(backend, &opts)
        .with_context(|| format!("connecting with backend {backend}"))?;
    let (rank, size) = (comm.rank(), comm.size());
    if let Some(fail_rank) = args.fail_rank {
        let mut buf = vec![1.0f32; 1000];
        for i in 0..args.fail_after {
            comm.allreduce_sum(&mut buf)
                .with_context(|| format!("rank {rank}: allreduce {i} before the failure"))?;
        }
        if rank == fail_rank {
            eprintln!(
                "comm-selftest: rank {rank} fails now ({:?})",
                args.fail_mode
            );
            match args.fail_mode {
                FailMode::Exit => std::process::exit(3),
                FailMode::Stall => loop {
                    std::thread::sleep(Duration::from_secs(3600));
                },
            }
        }
        let mut i = 0u64;
        loop {
            comm.allreduce_sum(&mut buf).with_context(|| {
                format!("rank {rank}: allreduce {i} after rank {fail_rank} failed")
            })?;
            i += 1;
        }
    }
    let suite = SuiteOptions {
        seed,
        large: args.large,
        ..SuiteOptions::quick()
    };
    let report = conformance::run_all(comm.as_mut(), &suite)
        .with_context(|| format!("conformance suite, backend {backend}"))?;
    println!(
        "comm-selftest: backend {backend} rank {rank} of {size}: {} checks passed, digest {:016x}",
        report.checks, report.digest
    );
    Ok(())
}
