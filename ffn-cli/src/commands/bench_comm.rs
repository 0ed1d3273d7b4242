//! `ffn bench comm`: allreduce time and bandwidth of a communicator backend, reported like
//! nccl-tests (algbw = bytes / time, busbw = algbw * 2(n-1)/n).
//!
//! * `local` runs the ranks as threads of this process.
//! * `shm` and `zmq` start `--ranks` copies of `ffn` through the `ffn launch` machinery, unless this
//!   process already is a rank (`RANK` is set, e.g. under `ffn launch -n 2 -- bench comm ...`).
//! * `mpi` (this crate's MPI backend) and `mpi-raw` (a plain `MPI_Allreduce` into a separate buffer,
//!   the baseline) run under `mpirun`; started outside `mpirun`, the command re-runs itself as
//!   `mpirun --oversubscribe -n RANKS ffn bench comm ...`.
//!
//! Rank 0 prints one line (or one JSON object per line with `--json`) per size.

use anyhow::{Context, Result, bail, ensure};
use ffn_comm::bench::{AllreduceSample, time_allreduce};
use ffn_comm::{Backend, CommOptions, Communicator};

/// Arguments of `ffn bench comm`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Backend: local, shm, mpi, zmq, or mpi-raw (plain MPI_Allreduce, the baseline).
    #[arg(long)]
    backend: String,
    /// Number of ranks.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// Message sizes in bytes, comma-separated, with optional K/M/G suffixes (powers of 1024);
    /// multiples of 4 (f32 values). 4 bytes measures the small-message latency.
    #[arg(long, default_value = "4,1K,64K,1M,16M,64M")]
    sizes: String,
    /// Target time per size in seconds (the number of iterations is chosen to fill it).
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Print one JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Runs the benchmark (spawning ranks when needed).
pub fn run(args: Args) -> Result<()> {
    ensure!(
        args.ranks >= 1 && args.ranks <= 1024,
        "bench comm --ranks {}: expected 1..=1024",
        args.ranks
    );
    ensure!(
        args.seconds.is_finite() && args.seconds > 0.0,
        "bench comm --seconds {}: expected a positive number",
        args.seconds
    );
    let sizes = parse_sizes(&args.sizes)?;
    match args.backend.as_str() {
        "mpi-raw" => run_mpi(&args, &sizes, true),
        name => {
            let backend: Backend = name.parse().context("bench comm --backend (or mpi-raw)")?;
            backend.ensure_compiled_in()?;
            match backend {
                Backend::Local => {
                    let results = ffn_comm::local::LocalComm::run(args.ranks, |c| {
                        time_allreduce(c, &sizes, args.seconds)
                    })?;
                    report(&args, &results[0]);
                    Ok(())
                }
                Backend::Mpi => run_mpi(&args, &sizes, false),
                _ => run_env_ranks(&args, backend, &sizes),
            }
        }
    }
}

/// shm / zmq: be a rank if the environment says so, otherwise start the ranks.
fn run_env_ranks(args: &Args, backend: Backend, sizes: &[usize]) -> Result<()> {
    if std::env::var_os("RANK").is_none() {
        let exe = std::env::current_exe().context("bench comm: the path of this executable")?;
        let code = ffn_comm::launch::launch(&ffn_comm::launch::LaunchOptions::new(
            exe,
            self_args(args),
            args.ranks,
        ))?;
        if code != 0 {
            std::process::exit(code);
        }
        return Ok(());
    }
    let opts = CommOptions::from_env().context("bench comm: reading the environment")?;
    let mut comm = ffn_comm::connect(backend, &opts)
        .with_context(|| format!("bench comm: connecting ({backend})"))?;
    ensure!(
        comm.size() == args.ranks,
        "bench comm --ranks {}: the environment says WORLD_SIZE={}",
        args.ranks,
        comm.size()
    );
    let samples = time_allreduce(comm.as_mut(), sizes, args.seconds)?;
    if comm.rank() == 0 {
        report(args, &samples);
    }
    Ok(())
}

/// This command's arguments, to start it again as a rank.
fn self_args(args: &Args) -> Vec<String> {
    let mut v: Vec<String> = [
        "bench",
        "comm",
        "--backend",
        &args.backend,
        "--ranks",
        &args.ranks.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend([
        "--sizes".into(),
        args.sizes.clone(),
        "--seconds".into(),
        args.seconds.to_string(),
    ]);
    if args.json {
        v.push("--json".into());
    }
    v
}

#[cfg(feature = "mpi")]
fn run_mpi(args: &Args, sizes: &[usize], raw: bool) -> Result<()> {
    let under_mpirun = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !under_mpirun {
        let exe = std::env::current_exe().context("bench comm: finding the ffn executable")?;
        let status = std::process::Command::new("mpirun")
            .args(["--oversubscribe", "-n", &args.ranks.to_string()])
            .arg(&exe)
            .args(self_args(args))
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .status()
            .context("bench comm: starting mpirun (is Open MPI installed? or run `mpirun -n 2 ffn bench comm ...`)")?;
        if !status.success() {
            std::process::exit(status.code().unwrap_or(1));
        }
        return Ok(());
    }
    let opts = CommOptions::from_env().context("bench comm: reading the environment")?;
    let mut comm = ffn_comm::mpi_backend::MpiComm::init(&opts)?;
    ensure!(
        comm.size() == args.ranks,
        "bench comm --ranks {}: mpirun started {} ranks",
        args.ranks,
        comm.size()
    );
    let samples = if raw {
        ffn_comm::bench::time_raw_mpi_allreduce(&mut comm, sizes, args.seconds)?
    } else {
        time_allreduce(&mut comm, sizes, args.seconds)?
    };
    if comm.rank() == 0 {
        report(args, &samples);
    }
    Ok(())
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(_args: &Args, _sizes: &[usize], _raw: bool) -> Result<()> {
    Err(ffn_comm::CommError::NotCompiled {
        backend: "MPI",
        feature: "mpi",
    }
    .into())
}

fn report(args: &Args, samples: &[AllreduceSample]) {
    let n = args.ranks as f64;
    if !args.json {
        println!(
            "# ffn bench comm: backend {} with {} ranks (allreduce sum of f32)",
            args.backend, args.ranks
        );
        println!(
            "{:>12} {:>8} {:>12} {:>11} {:>11}",
            "bytes", "iters", "time_us", "algbw_GB/s", "busbw_GB/s"
        );
    }
    for s in samples {
        let algbw = s.bytes as f64 / s.time_s / 1e9;
        let busbw = if args.ranks > 1 {
            algbw * 2.0 * (n - 1.0) / n
        } else {
            0.0
        };
        if args.json {
            println!(
                "{}",
                serde_json::json!({
                    "bench": "comm",
                    "backend": args.backend,
                    "ranks": args.ranks,
                    "bytes": s.bytes,
                    "iters": s.iters,
                    "time_s": s.time_s,
                    "time_us": s.time_s * 1e6,
                    "algbw_gbs": algbw,
                    "busbw_gbs": busbw,
                })
            );
        } else {
            println!(
                "{:>12} {:>8} {:>12.2} {:>11.3} {:>11.3}",
                s.bytes,
                s.iters,
                s.time_s * 1e6,
                algbw,
                busbw
            );
        }
    }
}

/// Parses "4,1K,1M,64M" into byte counts (multiples of 4).
fn parse_sizes(text: &str) -> Result<Vec<usize>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(
            parse_sizes("4, 1K,1M,64MiB,2G").unwrap(),
            vec![4, 1024, 1 << 20, 64 << 20, 2 << 30]
        );
        assert!(
            parse_sizes("3")
                .unwrap_err()
                .to_string()
                .contains("multiple of 4")
        );
        assert!(
            parse_sizes("1X")
                .unwrap_err()
                .to_string()
                .contains("\"1X\"")
        );
        assert!(parse_sizes("").is_err());
    }
}
