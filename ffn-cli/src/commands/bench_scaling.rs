//! `ffn bench scaling --backend B --ranks 1,2,.. --threads-per-rank T [--json]`: weak scaling of
//! synchronous data-parallel training, measured by `ffn_comm::data_parallel::scaling::weak_scaling`
//! (which documents the method and the projection); this module parses the flags and prints the
//! tables.

use anyhow::Result;
use ffn_comm::Backend;
use ffn_comm::data_parallel::scaling::{
    ScalingOptions, WeakScalingOptions, parse_rank_counts, weak_scaling, worker_result_line,
};
use ffn_core::model_spec::ModelConfig;
use serde_json::Value;

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
    /// Present the ranks as hosts of K ranks each (LOCAL_RANK = rank % K, LOCAL_WORLD_SIZE = K;
    /// for --backend hier) and, with K > 1, add the hierarchical projection (--ranks must include
    /// K: that one-host run gives the intra-host fit).
    #[arg(long, value_name = "K")]
    ranks_per_host: Option<usize>,
    /// One JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Internal: run as one rank of a measurement (started by the driver).
    #[arg(long, hide = true)]
    worker: bool,
}

/// Runs the benchmark (driver) or one rank of it (`--worker`).
pub fn run(a: Args) -> Result<()> {
    let model = ModelConfig {
        depth: a.depth,
        features: a.features,
        fov: [a.fov; 3],
        deltas: [8.min(a.fov / 2).max(1); 3],
    };
    let mut o = WeakScalingOptions {
        backend: a.backend,
        ranks: Vec::new(),
        threads_per_rank: a.threads_per_rank,
        run: ScalingOptions {
            model,
            batch: a.batch,
            warmup: a.warmup,
            steps: a.steps,
        },
        bucket_kib: a.bucket_kib,
        overlap: !a.no_overlap,
        alpha_s: a.alpha_us.map(|x| x * 1e-6),
        bandwidth: a.bandwidth_gbs.map(|x| x * 1e9),
        comm_timeout: a.comm_timeout,
        ranks_per_host: a.ranks_per_host,
        worker_args: std::env::args()
            .skip(1)
            .filter(|x| x != "--json")
            .chain(["--worker".into()])
            .collect(),
    };
    o.validate()?;
    if a.worker {
        if let Some(line) = worker_result_line(&o)? {
            println!("{line}");
        }
        return Ok(());
    }
    o.ranks = parse_rank_counts(&a.ranks)?;
    let out = weak_scaling(&o, &mut |n| {
        if !a.json {
            eprintln!("measuring {n} rank(s) on {} ...", a.backend);
        }
    })?;
    if a.json {
        println!("{out}");
        return Ok(());
    }
    report(&a, &out);
    Ok(())
}

/// The tables of a [`weak_scaling`] report.
fn report(a: &Args, out: &Value) {
    let g = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let list = |k: &str| out[k].as_array().cloned().unwrap_or_default();
    let (rows, model, projection) = (list("runs"), &out["comm_model"], list("projection"));
    println!(
        "weak scaling, {} backend, {} thread(s)/rank, depth {} FOV {} features {}, batch {}/rank, median of {} steps",
        a.backend, a.threads_per_rank, a.depth, a.fov, a.features, a.batch, a.steps
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
        return;
    }
    println!(
        "model: alpha {:.2} µs ({}), bandwidth {:.2} GB/s ({}), fitted at {} ranks",
        g(model, "alpha_s") * 1e6,
        model["alpha_source"].as_str().unwrap_or(""),
        g(model, "bandwidth_bytes_per_s") / 1e9,
        model["bandwidth_source"].as_str().unwrap_or(""),
        model["measured_at_ranks"]
    );
    println!("       {}", model["formula"].as_str().unwrap_or(""));
    let hier = &model["hier"];
    if !hier.is_null() {
        let fit = &hier["intra_fit"];
        println!(
            "hier:  {} ranks/host, intra-host allreduce {:.2} µs + {:.3} ns/byte ({})",
            hier["ranks_per_host"],
            g(fit, "a_s") * 1e6,
            g(fit, "b_s_per_byte") * 1e9,
            hier["intra_source"].as_str().unwrap_or("")
        );
        println!("       {}", hier["formula"].as_str().unwrap_or(""));
    }
    let cell = |p: &Value, k: &str, scale: f64, width: usize, digits: usize| {
        p.get(k)
            .and_then(Value::as_f64)
            .map_or(format!("{:>width$}", "-"), |x| {
                format!("{:>width$.digits$}", x * scale)
            })
    };
    println!(
        "{:>6} {:>12} {:>12} {:>10}{}",
        "ranks",
        "allreduce s",
        "exposed s",
        "efficiency",
        if hier.is_null() {
            String::new()
        } else {
            format!(
                " {:>6} {:>12} {:>12} {:>10}",
                "hosts", "hier s", "hier exp s", "hier eff"
            )
        }
    );
    for p in &projection {
        let hier_cols = if hier.is_null() {
            String::new()
        } else {
            format!(
                " {:>6} {} {} {}%",
                p["hosts"].as_u64().map_or("-".into(), |h| h.to_string()),
                cell(p, "hier_allreduce_s", 1.0, 12, 5),
                cell(p, "hier_exposed_s", 1.0, 12, 5),
                cell(p, "hier_efficiency", 100.0, 9, 1)
            )
        };
        println!(
            "{:>6} {:>12.5} {:>12.5} {:>9.1}%{hier_cols}",
            p["ranks"].as_u64().unwrap_or(0),
            g(p, "allreduce_s"),
            g(p, "exposed_s"),
            100.0 * g(p, "efficiency")
        );
    }
}
