//! `ffn bench scaling --backend B --ranks 1,2,.. --threads-per-rank T [--json]`: weak scaling of
//! synchronous data-parallel training.
//!
//! For every rank count the driver starts that many ranks (threads for `local`, processes with the
//! `ffn launch` environment for `shm` / `zmq`, `mpirun` for `mpi`), each training on its own
//! synthetic examples with batch `--batch` through the real data-parallel step (bucketed allreduce
//! overlapped with backward). It reports examples/s, the efficiency against one rank, and the split
//! of a step into compute and exposed communication (time the training thread waits after backward).
//!
//! From the largest measured run it also fits the backend's allreduce cost `t(S) = a + b S` over
//! message sizes and turns it into the ring model `t(P, S) = 2 (P-1) alpha + 2 (P-1)/P S / B`, then
//! projects the efficiency at 16 .. 2048 ranks: `E(P) = T1 / (T1 + exposed(P))` with
//! `exposed(P) = max(t(P, S_last), t(P, S) - T_backward)` (the whole gradient must be reduced; only
//! the part that fits behind the backward pass hides, and the last bucket never does).

use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use ffn_comm::{Backend, Communicator};
use ffn_core::model_spec::ModelConfig;
use serde_json::{Value, json};

use ffn_comm::data_parallel::scaling::{ScalingOptions, measure_rank, weak_scaling_summary};
use ffn_comm::data_parallel::{DataParallel, DataParallelOptions};
use ffn_core::training::distributed::LrScaling;

/// Marker of the result line a worker prints.
const RESULT: &str = "ffn-bench-scaling-result ";

/// Arguments of `ffn bench scaling`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Communicator backend.
    #[arg(long, value_parser = |s: &str| s.parse::<Backend>().map_err(|e| e.to_string()), default_value = "shm")]
    backend: Backend,
    /// Rank counts to measure, comma separated (the first is the baseline; normally 1).
    #[arg(long, default_value = "1,2")]
    ranks: String,
    /// Kernel threads per rank.
    #[arg(long, default_value_t = 1)]
    threads_per_rank: usize,
    /// Network depth.
    #[arg(long, default_value_t = 9)]
    depth: usize,
    /// FOV edge (cubic, odd).
    #[arg(long, default_value_t = 33)]
    fov: usize,
    /// Feature maps.
    #[arg(long, default_value_t = 32)]
    features: usize,
    /// Examples per step and rank.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Timed steps (medians are reported).
    #[arg(long, default_value_t = 5)]
    steps: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Minimum bucket size in KiB.
    #[arg(long, default_value_t = 256)]
    bucket_kib: usize,
    /// Reduce after backward instead of overlapping.
    #[arg(long)]
    no_overlap: bool,
    /// Project with this allreduce latency (µs per ring step) instead of the measured one.
    #[arg(long)]
    alpha_us: Option<f64>,
    /// Project with this bandwidth (GB/s) instead of the measured one.
    #[arg(long)]
    bandwidth_gbs: Option<f64>,
    /// Seconds before a stalled rank is an error.
    #[arg(long, default_value_t = 120.0)]
    comm_timeout: f64,
    /// One JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Internal: run as one rank of a measurement (started by the driver).
    #[arg(long, hide = true)]
    worker: bool,
}

fn scaling_options(a: &Args, cfg: &ModelConfig) -> ScalingOptions {
    ScalingOptions {
        model: *cfg,
        batch: a.batch,
        warmup: a.warmup,
        steps: a.steps,
    }
}

fn dist_args(a: &Args) -> DataParallelOptions {
    DataParallelOptions {
        lr_scaling: LrScaling::None,
        lr_scaling_warmup: 0,
        bucket_kib: a.bucket_kib,
        overlap: !a.no_overlap,
        checksum_every: 0,
        timeline: None,
        timeline_steps: 0,
        comm_timeout: Some(a.comm_timeout),
        ..DataParallelOptions::over(a.backend, 1)
    }
}

/// Runs the benchmark (driver) or one rank of it (`--worker`).
pub fn run(a: Args) -> Result<()> {
    ensure!(
        a.threads_per_rank >= 1 && a.batch >= 1 && a.steps >= 1,
        "bench scaling: --threads-per-rank, --batch and --steps must be >= 1"
    );
    let cfg = ModelConfig {
        depth: a.depth,
        features: a.features,
        fov: [a.fov; 3],
        deltas: [8.min(a.fov / 2).max(1); 3],
    };
    cfg.validate()
        .map_err(|e| anyhow::anyhow!("bench scaling: {e}"))?;
    if a.worker {
        let dist = DataParallel::connect(&dist_args(&a), {
            let backend = a.backend;
            let opts = ffn_comm::CommOptions::from_env()?;
            Box::new(move || ffn_comm::connect(backend, &opts))
        })?;
        if let Some(v) = measure_rank(&scaling_options(&a, &cfg), &dist)? {
            println!("{RESULT}{v}");
        }
        return Ok(());
    }
    let ranks: Vec<usize> = a
        .ranks
        .split(',')
        .map(|s| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| (1..=4096).contains(&n))
        })
        .collect::<Option<_>>()
        .with_context(|| {
            format!(
                "--ranks {:?}: expected rank counts 1..=4096, e.g. 1,2,4",
                a.ranks
            )
        })?;
    ensure!(
        !ranks.is_empty(),
        "--ranks: expected at least one rank count"
    );
    a.backend.ensure_compiled_in()?;
    let mut runs = Vec::new();
    for &n in &ranks {
        if !a.json {
            eprintln!("measuring {n} rank(s) on {} ...", a.backend);
        }
        runs.push(measure(&a, &cfg, n)?);
    }
    report(&a, &cfg, &runs)
}

/// One measurement at `n` ranks: rank 0's result object.
fn measure(a: &Args, cfg: &ModelConfig, n: usize) -> Result<Value> {
    if n == 1 || a.backend == Backend::Local {
        // Threads in this process, each with a pool of its own.
        let group = ffn_comm::local::LocalComm::group(n)?;
        let results: Vec<Result<Option<Value>>> = std::thread::scope(|s| {
            let hs: Vec<_> = group
                .into_iter()
                .map(|c| {
                    s.spawn(move || -> Result<Option<Value>> {
                        let pool = rayon::ThreadPoolBuilder::new()
                            .num_threads(a.threads_per_rank)
                            .build()?;
                        pool.install(|| {
                            let dist = if n == 1 {
                                DataParallel::single_measured(&dist_args(a))
                            } else {
                                DataParallel::connect(
                                    &dist_args(a),
                                    Box::new(move || Ok(Box::new(c) as Box<dyn Communicator>)),
                                )?
                            };
                            measure_rank(&scaling_options(a, cfg), &dist)
                        })
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        let mut first = None;
        for r in results {
            if let Some(v) = r? {
                first = Some(v);
            }
        }
        return first.context("rank 0 reported nothing");
    }
    let exe = std::env::current_exe().context("finding the ffn executable")?;
    let mut worker_args: Vec<String> = std::env::args().skip(1).filter(|x| x != "--json").collect();
    worker_args.push("--worker".into());
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let env = |c: &mut Command| {
        c.env("RAYON_NUM_THREADS", a.threads_per_rank.to_string())
            .env("WORLD_SIZE", n.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env(
                "FFN_SHM_NAME",
                format!("ffn-bench-scaling-{}-{port}", std::process::id()),
            )
            .env("FFN_COMM_STALL_WARNING", "0");
    };
    let outputs: Vec<std::process::Output> = if a.backend == Backend::Mpi {
        let mut c = Command::new("mpirun");
        c.args([
            "--oversubscribe",
            "-n",
            &n.to_string(),
            "-x",
            "RAYON_NUM_THREADS",
        ])
        .arg(&exe)
        .args(&worker_args);
        c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        env(&mut c);
        vec![
            c.output()
                .context("starting mpirun (is Open MPI installed?)")?,
        ]
    } else {
        let children: Vec<_> = (0..n)
            .map(|r| {
                let mut c = Command::new(&exe);
                c.args(&worker_args)
                    .env("RANK", r.to_string())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                env(&mut c);
                c.spawn().with_context(|| format!("starting rank {r}"))
            })
            .collect::<Result<_>>()?;
        children
            .into_iter()
            .map(|c| c.wait_with_output())
            .collect::<std::io::Result<_>>()?
    };
    for (r, o) in outputs.iter().enumerate() {
        if !o.status.success() {
            bail!(
                "rank {r} of the {n}-rank measurement failed ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
    }
    let line = outputs
        .iter()
        .flat_map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .find_map(|l| l.strip_prefix(RESULT).map(str::to_string))
        .context("no result line from rank 0")?;
    serde_json::from_str(&line).context("result line of rank 0")
}

fn report(a: &Args, cfg: &ModelConfig, runs: &[Value]) -> Result<()> {
    let g = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let (rows, model, projection) = weak_scaling_summary(
        runs,
        a.batch,
        !a.no_overlap,
        a.alpha_us.map(|x| x * 1e-6),
        a.bandwidth_gbs.map(|x| x * 1e9),
    );
    let out = json!({
        "backend": a.backend.name(), "threads_per_rank": a.threads_per_rank,
        "model": {"depth": cfg.depth, "fov": cfg.fov, "features": cfg.features, "batch_per_rank": a.batch, "params": cfg.num_params()},
        "overlap": !a.no_overlap, "bucket_kib": a.bucket_kib, "steps": a.steps,
        "runs": rows, "comm_model": model, "projection": projection,
    });
    if a.json {
        println!("{out}");
        return Ok(());
    }
    println!(
        "weak scaling, {} backend, {} thread(s)/rank, depth {} FOV {} features {}, batch {}/rank, median of {} steps",
        a.backend, a.threads_per_rank, cfg.depth, a.fov, cfg.features, a.batch, a.steps
    );
    println!(
        "{:>6} {:>10} {:>12} {:>10} {:>11} {:>13} {:>11}",
        "ranks", "step s", "examples/s", "efficiency", "compute s", "exposed comm", "comm busy"
    );
    for r in &rows {
        println!(
            "{:>6} {:>10.4} {:>12.2} {:>9.1}% {:>11.4} {:>13.4} {:>11.4}",
            r["ranks"].as_u64().unwrap_or(0),
            g(r, "step_s"),
            g(r, "examples_per_s"),
            100.0 * g(r, "efficiency"),
            g(r, "compute_s"),
            g(r, "exposed_comm_s"),
            g(r, "comm_busy_s")
        );
    }
    if model.is_null() {
        println!("(no multi-rank run: no communication model, no projection)");
        return Ok(());
    }
    println!(
        "model: alpha {:.2} µs ({}), bandwidth {:.2} GB/s ({}), fitted at {} ranks",
        g(&model, "alpha_s") * 1e6,
        model["alpha_source"].as_str().unwrap_or(""),
        g(&model, "bandwidth_bytes_per_s") / 1e9,
        model["bandwidth_source"].as_str().unwrap_or(""),
        model["measured_at_ranks"]
    );
    println!("       {}", model["formula"].as_str().unwrap_or(""));
    println!(
        "{:>6} {:>12} {:>12} {:>10}",
        "ranks", "allreduce s", "exposed s", "efficiency"
    );
    for p in &projection {
        println!(
            "{:>6} {:>12.5} {:>12.5} {:>9.1}%",
            p["ranks"].as_u64().unwrap_or(0),
            g(p, "allreduce_s"),
            g(p, "exposed_s"),
            100.0 * g(p, "efficiency")
        );
    }
    Ok(())
}
