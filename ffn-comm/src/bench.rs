//! Allreduce timing behind `ffn bench comm` (reported like nccl-tests: algbw = bytes / time,
//! busbw = algbw * 2(n-1)/n), and [`run_allreduce_bench`], which starts the ranks it needs.

use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

use crate::{Backend, CommError, CommOptions, Communicator};

/// One measured message size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllreduceSample {
    /// Message size in bytes.
    pub bytes: usize,
    /// Timed iterations.
    pub iters: usize,
    /// Seconds per allreduce.
    pub time_s: f64,
}

impl AllreduceSample {
    /// Algorithm bandwidth in GB/s: bytes / time.
    pub fn algbw_gbs(&self) -> f64 {
        self.bytes as f64 / self.time_s / 1e9
    }

    /// Bus bandwidth in GB/s on `ranks` ranks: algbw * 2(n-1)/n (0 for one rank).
    pub fn busbw_gbs(&self, ranks: usize) -> f64 {
        let n = ranks as f64;
        if ranks > 1 {
            self.algbw_gbs() * 2.0 * (n - 1.0) / n
        } else {
            0.0
        }
    }

    /// The JSON row of `ffn bench comm --json` for this sample.
    pub fn to_json(&self, backend: &str, ranks: usize) -> Value {
        json!({
            "bench": "comm",
            "backend": backend,
            "ranks": ranks,
            "bytes": self.bytes,
            "iters": self.iters,
            "time_s": self.time_s,
            "time_us": self.time_s * 1e6,
            "algbw_gbs": self.algbw_gbs(),
            "busbw_gbs": self.busbw_gbs(ranks),
        })
    }
}

/// What [`run_allreduce_bench`] measures.
#[derive(Clone, Debug, PartialEq)]
pub struct AllreduceBenchOptions {
    /// `local`, `shm`, `mpi`, `zmq`, `hier`, or `mpi-raw` (plain `MPI_Allreduce`, the baseline).
    pub backend: String,
    /// Number of ranks, 1..=1024.
    pub ranks: usize,
    /// Message sizes in bytes (multiples of 4), e.g. from [`parse_sizes`].
    pub sizes: Vec<usize>,
    /// Target time per size in seconds.
    pub seconds: f64,
    /// The arguments that run this benchmark again as one rank of this executable (for `shm`,
    /// `zmq`, `hier` through [`crate::launch`], for `mpi` / `mpi-raw` through `mpirun`).
    pub rank_args: Vec<String>,
    /// Ranks started here are presented as hosts of this many ranks
    /// ([`crate::launch::LaunchOptions::ranks_per_host`]; for `hier`); `None`: one host.
    pub ranks_per_host: Option<usize>,
}

impl AllreduceBenchOptions {
    /// Checks `ranks` (1..=1024) and `seconds` (positive); errors name the `bench comm` flag.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            (1..=1024).contains(&self.ranks),
            "bench comm --ranks {}: expected 1..=1024",
            self.ranks
        );
        ensure!(
            self.seconds.is_finite() && self.seconds > 0.0,
            "bench comm --seconds {}: expected a positive number",
            self.seconds
        );
        if let Some(k) = self.ranks_per_host {
            ensure!(
                k >= 1 && self.ranks.is_multiple_of(k),
                "bench comm --ranks-per-host {k}: expected a divisor of --ranks {}",
                self.ranks
            );
        }
        Ok(())
    }
}

/// What this process did in [`run_allreduce_bench`].
#[derive(Clone, Debug, PartialEq)]
pub enum AllreduceBenchOutcome {
    /// Rank 0 (or the only process): the samples to report.
    Samples(Vec<AllreduceSample>),
    /// Another rank: nothing to report.
    NotRoot,
    /// This process started the ranks; their job's exit status (0: all succeeded).
    Launched(i32),
}

/// Runs the allreduce benchmark: `local` on threads of this process; `shm` / `zmq` / `hier` as one rank
/// when `RANK` is set, else by starting `ranks` copies of this executable with
/// [`AllreduceBenchOptions::rank_args`]; `mpi` / `mpi-raw` as one rank under `mpirun`, else by
/// re-running itself under `mpirun --oversubscribe -n RANKS`.
///
/// # Errors
/// `ranks` or `seconds` out of range ([`AllreduceBenchOptions::validate`]), an unknown or not compiled-in backend, a rank count that
/// differs from the environment's, a failed collective.
pub fn run_allreduce_bench(o: &AllreduceBenchOptions) -> Result<AllreduceBenchOutcome> {
    o.validate()?;
    if o.backend == "mpi-raw" {
        return run_mpi(o, true);
    }
    let backend: Backend = o
        .backend
        .parse()
        .context("bench comm --backend (or mpi-raw)")?;
    backend.ensure_compiled_in()?;
    match backend {
        Backend::Local => {
            let mut results =
                crate::local::LocalComm::run(o.ranks, |c| time_allreduce(c, &o.sizes, o.seconds))?;
            Ok(AllreduceBenchOutcome::Samples(results.swap_remove(0)))
        }
        Backend::Mpi => run_mpi(o, false),
        _ => run_env_ranks(o, backend),
    }
}

/// shm / zmq / hier: be a rank if the environment says so, otherwise start the ranks.
fn run_env_ranks(o: &AllreduceBenchOptions, backend: Backend) -> Result<AllreduceBenchOutcome> {
    if std::env::var_os("RANK").is_none() {
        let exe = std::env::current_exe().context("bench comm: the path of this executable")?;
        let opts = crate::launch::LaunchOptions {
            ranks_per_host: o.ranks_per_host,
            ..crate::launch::LaunchOptions::new(exe, o.rank_args.clone(), o.ranks)
        };
        return Ok(AllreduceBenchOutcome::Launched(crate::launch::launch(
            &opts,
        )?));
    }
    let opts = CommOptions::from_env().context("bench comm: reading the environment")?;
    let mut comm = crate::connect(backend, &opts)
        .with_context(|| format!("bench comm: connecting ({backend})"))?;
    ensure!(
        comm.size() == o.ranks,
        "bench comm --ranks {}: the environment says WORLD_SIZE={}",
        o.ranks,
        comm.size()
    );
    let samples = time_allreduce(comm.as_mut(), &o.sizes, o.seconds)?;
    Ok(root_outcome(comm.rank(), samples))
}

fn root_outcome(rank: usize, samples: Vec<AllreduceSample>) -> AllreduceBenchOutcome {
    if rank == 0 {
        AllreduceBenchOutcome::Samples(samples)
    } else {
        AllreduceBenchOutcome::NotRoot
    }
}

#[cfg(feature = "mpi")]
fn run_mpi(o: &AllreduceBenchOptions, raw: bool) -> Result<AllreduceBenchOutcome> {
    let under_mpirun = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !under_mpirun {
        let exe = std::env::current_exe().context("bench comm: finding the ffn executable")?;
        let status = std::process::Command::new("mpirun")
            .args(["--oversubscribe", "-n", &o.ranks.to_string()])
            .arg(&exe)
            .args(&o.rank_args)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .status()
            .context("bench comm: starting mpirun (is Open MPI installed? or run `mpirun -n 2 ffn bench comm ...`)")?;
        return Ok(AllreduceBenchOutcome::Launched(if status.success() {
            0
        } else {
            status.code().unwrap_or(1)
        }));
    }
    let opts = CommOptions::from_env().context("bench comm: reading the environment")?;
    let mut comm = crate::mpi_backend::MpiComm::init(&opts)?;
    ensure!(
        comm.size() == o.ranks,
        "bench comm --ranks {}: mpirun started {} ranks",
        o.ranks,
        comm.size()
    );
    let samples = if raw {
        time_raw_mpi_allreduce(&mut comm, &o.sizes, o.seconds)?
    } else {
        time_allreduce(&mut comm, &o.sizes, o.seconds)?
    };
    Ok(root_outcome(comm.rank(), samples))
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(_o: &AllreduceBenchOptions, _raw: bool) -> Result<AllreduceBenchOutcome> {
    Err(CommError::NotCompiled {
        backend: "MPI",
        feature: "mpi",
    }
    .into())
}

/// Parses `--sizes` text such as "4,1K,1M,64MiB" into byte counts (K, M, G: powers of 1024; every
/// size a multiple of 4, the size of an f32).
///
/// # Errors
/// An item that is not a number with an optional suffix, too large, not a multiple of 4; no item.
pub fn parse_sizes(text: &str) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (digits, unit) = match item.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
            Some((i, _)) => item.split_at(i),
            None => (item, ""),
        };
        let mult: usize = match unit
            .to_ascii_uppercase()
            .trim_end_matches("IB")
            .trim_end_matches('B')
        {
            "" => 1,
            "K" => 1 << 10,
            "M" => 1 << 20,
            "G" => 1 << 30,
            _ => bail!(
                "bench comm --sizes: {item:?}: expected a number of bytes with an optional K, M or G suffix"
            ),
        };
        let n: usize = digits
            .parse()
            .with_context(|| format!("bench comm --sizes: {item:?}: expected a number of bytes with an optional K, M or G suffix"))?;
        let bytes = n
            .checked_mul(mult)
            .with_context(|| format!("bench comm --sizes: {item:?} is too large"))?;
        ensure!(
            bytes % 4 == 0,
            "bench comm --sizes: {item:?} = {bytes} bytes: expected a multiple of 4 (f32 values)"
        );
        out.push(bytes);
    }
    ensure!(
        !out.is_empty(),
        "bench comm --sizes {text:?}: expected at least one size"
    );
    Ok(out)
}

/// Times `allreduce_sum` at every size (bytes, multiples of 4), each for about `seconds`.
pub fn time_allreduce<C: Communicator + ?Sized>(
    comm: &mut C,
    sizes: &[usize],
    seconds: f64,
) -> Result<Vec<AllreduceSample>, CommError> {
    let mut out = Vec::new();
    for &bytes in sizes {
        let mut buf = vec![1.0f32; bytes / 4];
        let mut op = |c: &mut C| c.allreduce_sum(&mut buf);
        out.push(time_op(comm, bytes, seconds, &mut op)?);
    }
    Ok(out)
}

/// Times the MPI library's own `MPI_Allreduce` (into a separate buffer) at every size: the
/// baseline of the MPI backend.
#[cfg(feature = "mpi")]
pub fn time_raw_mpi_allreduce(
    comm: &mut crate::mpi_backend::MpiComm,
    sizes: &[usize],
    seconds: f64,
) -> Result<Vec<AllreduceSample>, CommError> {
    let mut out = Vec::new();
    for &bytes in sizes {
        let send = vec![1.0f32; bytes / 4];
        let mut recv = vec![0.0f32; bytes / 4];
        let mut op = |c: &mut crate::mpi_backend::MpiComm| c.raw_allreduce(&send, &mut recv);
        out.push(time_op(comm, bytes, seconds, &mut op)?);
    }
    Ok(out)
}

/// Times one collective `op`: warms up, picks an iteration count (rank 0 decides, everyone follows), and times the loop.
pub fn time_op<C: Communicator + ?Sized>(
    comm: &mut C,
    bytes: usize,
    seconds: f64,
    op: &mut dyn FnMut(&mut C) -> Result<(), CommError>,
) -> Result<AllreduceSample, CommError> {
    op(comm)?;
    comm.barrier()?;
    let t = Instant::now();
    op(comm)?;
    let once = t.elapsed().as_secs_f64().max(1e-7);
    let mut iters = ((seconds / once).ceil() as u64)
        .clamp(3, 100_000)
        .to_le_bytes();
    comm.broadcast_bytes(&mut iters, 0)?;
    let iters = u64::from_le_bytes(iters);
    comm.barrier()?;
    let t = Instant::now();
    for _ in 0..iters {
        op(comm)?;
    }
    comm.barrier()?;
    let time_s = t.elapsed().as_secs_f64() / iters as f64;
    Ok(AllreduceSample {
        bytes,
        iters: iters as usize,
        time_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::LocalComm;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(
            parse_sizes("4, 1K,1M,64MiB,2G").unwrap(),
            vec![4, 1024, 1 << 20, 64 << 20, 2 << 30]
        );
        let err = |t: &str| parse_sizes(t).unwrap_err().to_string();
        assert!(err("3").contains("multiple of 4"));
        assert!(err("1X").contains("\"1X\""));
        assert!(err("").contains("at least one size"));
    }

    fn local(ranks: usize) -> AllreduceBenchOptions {
        AllreduceBenchOptions {
            backend: "local".into(),
            ranks,
            sizes: vec![4, 4096],
            seconds: 0.01,
            rank_args: Vec::new(),
            ranks_per_host: None,
        }
    }

    #[test]
    fn local_bench_returns_rank_0_samples_with_finite_bandwidths() {
        let AllreduceBenchOutcome::Samples(samples) = run_allreduce_bench(&local(2)).unwrap()
        else {
            panic!("local runs every rank in this process");
        };
        assert_eq!(
            samples.iter().map(|s| s.bytes).collect::<Vec<_>>(),
            [4, 4096]
        );
        for s in &samples {
            assert!(s.algbw_gbs().is_finite() && s.busbw_gbs(2) > 0.0);
            assert_eq!(s.busbw_gbs(1), 0.0);
            let row = s.to_json("local", 2);
            assert_eq!(row["ranks"], 2);
            assert_eq!(row["busbw_gbs"], s.busbw_gbs(2));
        }
    }

    #[test]
    fn bad_bench_options_are_errors_naming_the_flag() {
        let err = |o: AllreduceBenchOptions| run_allreduce_bench(&o).unwrap_err().to_string();
        assert_eq!(err(local(0)), "bench comm --ranks 0: expected 1..=1024");
        let slow = AllreduceBenchOptions {
            seconds: 0.0,
            ..local(2)
        };
        assert_eq!(
            err(slow),
            "bench comm --seconds 0: expected a positive number"
        );
        let nccl = AllreduceBenchOptions {
            backend: "nccl".into(),
            ..local(2)
        };
        assert!(err(nccl).starts_with("bench comm --backend (or mpi-raw)"));
        let uneven = AllreduceBenchOptions {
            ranks_per_host: Some(2),
            ..local(3)
        };
        assert_eq!(
            err(uneven),
            "bench comm --ranks-per-host 2: expected a divisor of --ranks 3"
        );
    }

    #[test]
    fn every_rank_times_every_size_with_the_same_iteration_count() {
        let results = LocalComm::run(3, |c| time_allreduce(c, &[4, 4096], 0.01)).unwrap();
        for samples in &results {
            assert_eq!(
                samples.iter().map(|s| s.bytes).collect::<Vec<_>>(),
                [4, 4096]
            );
            assert!(samples.iter().all(|s| s.iters >= 3 && s.time_s > 0.0));
        }
        // Rank 0 decides the iteration count; every rank follows (else the collectives mismatch).
        for (a, b) in results[0].iter().zip(&results[2]) {
            assert_eq!(a.iters, b.iters);
        }
    }
}
