//! `ffn bench comm`: allreduce time and bandwidth of a communicator backend, reported like
//! nccl-tests (algbw = bytes / time, busbw = algbw * 2(n-1)/n).
//!
//! * `local` runs the ranks as threads of this process.
//! * `shm`, `zmq` and `hier` start `--ranks` copies of `ffn` through the `ffn launch` machinery,
//!   unless this process already is a rank (`RANK` is set, e.g. under `ffn launch -n 2 -- bench
//!   comm ...`); `--ranks-per-host K` presents them as hosts of K ranks (for `hier`).
//! * `mpi` (this crate's MPI backend) and `mpi-raw` (a plain `MPI_Allreduce` into a separate buffer,
//!   the baseline) run under `mpirun`; started outside `mpirun`, the command re-runs itself as
//!   `mpirun --oversubscribe -n RANKS ffn bench comm ...`.
//!
//! Rank 0 prints one line (or one JSON object per line with `--json`) per size.

use anyhow::Result;
use ffn_comm::bench::{
    AllreduceBenchOptions, AllreduceBenchOutcome, AllreduceSample, parse_sizes, run_allreduce_bench,
};

/// Arguments of `ffn bench comm`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Backend: local, shm, mpi, zmq, hier, or mpi-raw (plain MPI_Allreduce, the baseline).
    #[arg(long)]
    backend: String,
    /// Number of ranks.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// Present the ranks started here as hosts of K ranks each (LOCAL_RANK = rank % K,
    /// LOCAL_WORLD_SIZE = K), for `--backend hier` on one machine; K must divide --ranks.
    #[arg(long, value_name = "K")]
    ranks_per_host: Option<usize>,
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

/// Runs the benchmark (spawning ranks when needed); rank 0 prints.
pub fn run(args: Args) -> Result<()> {
    let ranks = args.ranks.to_string();
    let mut rank_args: Vec<String> = ["bench", "comm", "--backend", &args.backend]
        .into_iter()
        .chain(["--ranks", &ranks, "--sizes", &args.sizes])
        .map(String::from)
        .chain(["--seconds".into(), args.seconds.to_string()])
        .collect();
    if args.json {
        rank_args.push("--json".into());
    }
    if let Some(k) = args.ranks_per_host {
        rank_args.extend(["--ranks-per-host".into(), k.to_string()]);
    }
    let o = AllreduceBenchOptions {
        backend: args.backend.clone(),
        ranks: args.ranks,
        sizes: Vec::new(),
        seconds: args.seconds,
        rank_args,
        ranks_per_host: args.ranks_per_host,
    };
    o.validate()?;
    let o = AllreduceBenchOptions {
        sizes: parse_sizes(&args.sizes)?,
        ..o
    };
    match run_allreduce_bench(&o)? {
        AllreduceBenchOutcome::Samples(samples) => report(&args, &samples),
        AllreduceBenchOutcome::Launched(code) if code != 0 => std::process::exit(code),
        _ => {}
    }
    Ok(())
}

fn report(args: &Args, samples: &[AllreduceSample]) {
    if !args.json {
        let layout = args
            .ranks_per_host
            .map(|k| format!(" as {} host(s) of {k}", args.ranks / k.max(1)))
            .unwrap_or_default();
        println!(
            "# ffn bench comm: backend {} with {} ranks{layout} (allreduce sum of f32)",
            args.backend, args.ranks
        );
        println!(
            "{:>12} {:>8} {:>12} {:>11} {:>11}",
            "bytes", "iters", "time_us", "algbw_GB/s", "busbw_GB/s"
        );
    }
    for s in samples {
        if args.json {
            let mut row = s.to_json(&args.backend, args.ranks);
            if let Some(k) = args.ranks_per_host {
                row["ranks_per_host"] = k.into();
            }
            println!("{row}");
        } else {
            println!(
                "{:>12} {:>8} {:>12.2} {:>11.3} {:>11.3}",
                s.bytes,
                s.iters,
                s.time_s * 1e6,
                s.algbw_gbs(),
                s.busbw_gbs(args.ranks)
            );
        }
    }
}
