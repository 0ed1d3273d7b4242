//! The measurement behind `ffn bench scaling`: one rank's training steps on synthetic examples,
//! timed phase by phase ([`measure_rank`]), and a least-squares fit of the allreduce cost
//! `t = a + b * bytes` on the group ([`fit_allreduce`]); [`ring_allreduce_seconds`] projects it to
//! more ranks, and [`hier_allreduce_seconds`] to more hosts of `K` ranks each. [`weak_scaling`] runs
//! the whole benchmark: for every rank count it starts the ranks (threads for `local`, processes
//! with the `ffn launch` environment for `shm` / `zmq` / `hier`, `mpirun` for `mpi`), collects rank
//! 0's measurement and returns the report of [`weak_scaling_report`].

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use ffn_core::bench::median;
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::ConvStack3d;
use ffn_core::optim::{Optimizer, Sgd};
use ffn_core::rng::Rng;
use ffn_core::synth::{SynthConfig, generate};
use ffn_core::training::coordinates::Coordinate;
use ffn_core::training::distributed::LrScaling;
use ffn_core::training::examples::ExampleConfig;
use ffn_core::training::schedule::LrSchedule;
use ffn_core::training::step::{StepBuffers, StepOptions};
use ffn_core::training::trainer::{Trainer, TrainerConfig, TrainingVolume};
use serde_json::{Value, json};

use super::step::Phases;
use super::{DataParallel, DataParallelOptions};
use crate::{Backend, CommOptions, Communicator};

/// What one measurement runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalingOptions {
    /// The network.
    pub model: ModelConfig,
    /// Examples per step and rank.
    pub batch: usize,
    /// Untimed steps first.
    pub warmup: usize,
    /// Timed steps (medians are reported).
    pub steps: usize,
}

/// The prefix of the result line a worker prints ([`worker_result_line`]) and the driver looks for.
pub const RESULT_MARKER: &str = "ffn-bench-scaling-result ";

/// What [`weak_scaling`] measures (the `ffn bench scaling` flags).
#[derive(Clone, Debug, PartialEq)]
pub struct WeakScalingOptions {
    /// Communicator backend.
    pub backend: Backend,
    /// Rank counts to measure (the first is the baseline), e.g. from [`parse_rank_counts`].
    pub ranks: Vec<usize>,
    /// Kernel threads per rank.
    pub threads_per_rank: usize,
    /// What every rank trains.
    pub run: ScalingOptions,
    /// Minimum bucket size in KiB.
    pub bucket_kib: usize,
    /// Overlap the bucket allreduces with backward.
    pub overlap: bool,
    /// Project with this latency (s per ring step) instead of the measured one.
    pub alpha_s: Option<f64>,
    /// Project with this bandwidth (bytes/s) instead of the measured one.
    pub bandwidth: Option<f64>,
    /// Seconds before a stalled rank is an error.
    pub comm_timeout: f64,
    /// Ranks per host `K`: the ranks started here are presented as hosts of `K` ranks
    /// (`LOCAL_RANK = r % K`, `LOCAL_WORLD_SIZE = K`, for `hier`), and with `K > 1` the report adds
    /// the hierarchical projection (the run at `K` ranks gives the intra-host fit). `None`: one host.
    pub ranks_per_host: Option<usize>,
    /// The arguments that run one rank of a measurement as this executable (`shm`, `zmq`, `mpi`
    /// with more than one rank); that rank calls [`worker_result_line`].
    pub worker_args: Vec<String>,
}

impl WeakScalingOptions {
    /// Checks `threads_per_rank`, `batch` and `steps` (>= 1) and the model.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.threads_per_rank >= 1 && self.run.batch >= 1 && self.run.steps >= 1,
            "bench scaling: --threads-per-rank, --batch and --steps must be >= 1"
        );
        self.run
            .model
            .validate()
            .map_err(|e| anyhow::anyhow!("bench scaling: {e}"))
    }

    /// The data-parallel options of every rank: no learning-rate scaling, no checksums, no
    /// timeline.
    pub fn data_parallel_options(&self) -> DataParallelOptions {
        DataParallelOptions {
            lr_scaling: LrScaling::None,
            lr_scaling_warmup: 0,
            bucket_kib: self.bucket_kib,
            overlap: self.overlap,
            checksum_every: 0,
            timeline: None,
            timeline_steps: 0,
            comm_timeout: Some(self.comm_timeout),
            ..DataParallelOptions::over(self.backend, 1)
        }
    }
}

/// Parses `--ranks` text such as "1,2,4" (each 1..=4096).
pub fn parse_rank_counts(text: &str) -> Result<Vec<usize>> {
    text.split(',')
        .map(|s| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| (1..=4096).contains(&n))
        })
        .collect::<Option<_>>()
        .with_context(|| format!("--ranks {text:?}: expected rank counts 1..=4096, e.g. 1,2,4"))
}

/// Measures every rank count of `o` (calling `on_start(n)` before each) and returns
/// [`weak_scaling_report`] of the runs.
///
/// # Errors
/// Invalid options, no rank count, a backend not compiled in, a rank that fails.
pub fn weak_scaling(o: &WeakScalingOptions, on_start: &mut dyn FnMut(usize)) -> Result<Value> {
    o.validate()?;
    ensure!(
        !o.ranks.is_empty(),
        "--ranks: expected at least one rank count"
    );
    o.backend.ensure_compiled_in()?;
    if let Some(k) = o.ranks_per_host {
        ensure!(
            k >= 1 && o.ranks.iter().all(|&n| n == 1 || n.is_multiple_of(k)),
            "--ranks-per-host {k}: every rank count of --ranks but 1 must be a multiple of it"
        );
        ensure!(
            k == 1 || o.ranks.contains(&k),
            "--ranks-per-host {k}: --ranks must include {k} (the one-host run that gives the \
             intra-host allreduce fit)"
        );
    }
    let mut runs = Vec::new();
    for &n in &o.ranks {
        on_start(n);
        runs.push(measure_ranks(o, n)?);
    }
    Ok(weak_scaling_report(o, &runs))
}

/// One rank of a measurement started by [`measure_ranks`] (the communicator from the
/// environment): rank 0's result line, to print on stdout; `None` on the other ranks.
pub fn worker_result_line(o: &WeakScalingOptions) -> Result<Option<String>> {
    let backend = o.backend;
    let opts = CommOptions::from_env()?;
    let dist = DataParallel::connect(
        &o.data_parallel_options(),
        Box::new(move || crate::connect(backend, &opts)),
    )?;
    Ok(measure_rank(&o.run, &dist)?.map(|v| format!("{RESULT_MARKER}{v}")))
}

/// One measurement at `n` ranks: rank 0's [`measure_rank`] result. One rank and the local backend
/// run as threads of this process, each with a pool of its own; the other backends as processes.
pub fn measure_ranks(o: &WeakScalingOptions, n: usize) -> Result<Value> {
    if n == 1 || o.backend == Backend::Local {
        let group = crate::local::LocalComm::group(n)?;
        let results: Vec<Result<Option<Value>>> = std::thread::scope(|s| {
            let hs: Vec<_> = group
                .into_iter()
                .map(|c| {
                    s.spawn(move || -> Result<Option<Value>> {
                        ffn_core::parallel::with_threads(o.threads_per_rank, || {
                            let dp = o.data_parallel_options();
                            let dist = if n == 1 {
                                DataParallel::single_measured(&dp)
                            } else {
                                DataParallel::connect(
                                    &dp,
                                    Box::new(move || Ok(Box::new(c) as Box<dyn Communicator>)),
                                )?
                            };
                            measure_rank(&o.run, &dist)
                        })?
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let token = crate::secret::random_hex(32).context("making the job secret")?;
    let env = |c: &mut Command| {
        c.env("RAYON_NUM_THREADS", o.threads_per_rank.to_string())
            .env("FFN_COMM_TOKEN", &token)
            .env("WORLD_SIZE", n.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env(
                "FFN_SHM_NAME",
                format!("ffn-bench-scaling-{}-{port}", std::process::id()),
            )
            .env("FFN_COMM_STALL_WARNING", "0");
    };
    let outputs: Vec<std::process::Output> = if o.backend == Backend::Mpi {
        let mut c = Command::new("mpirun");
        c.args([
            "--oversubscribe",
            "-n",
            &n.to_string(),
            "-x",
            "RAYON_NUM_THREADS",
        ])
        .arg(&exe)
        .args(&o.worker_args);
        c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        env(&mut c);
        vec![
            c.output()
                .context("starting mpirun (is Open MPI installed?)")?,
        ]
    } else {
        let per_host = o.ranks_per_host.unwrap_or(n);
        let children: Vec<_> = (0..n)
            .map(|r| {
                let mut c = Command::new(&exe);
                c.args(&o.worker_args)
                    .env("RANK", r.to_string())
                    .env("LOCAL_RANK", (r % per_host).to_string())
                    .env("LOCAL_WORLD_SIZE", per_host.to_string())
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
    for (r, out) in outputs.iter().enumerate() {
        if !out.status.success() {
            bail!(
                "rank {r} of the {n}-rank measurement failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    let line = outputs
        .iter()
        .flat_map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .find_map(|l| l.strip_prefix(RESULT_MARKER).map(str::to_string))
        .context("no result line from rank 0")?;
    serde_json::from_str(&line).context("result line of rank 0")
}

/// The report of `ffn bench scaling --json`: the options, the [`weak_scaling_summary`] of `runs`
/// (`runs`, `comm_model`, `projection`).
pub fn weak_scaling_report(o: &WeakScalingOptions, runs: &[Value]) -> Value {
    let cfg = &o.run.model;
    let (rows, model, projection) = weak_scaling_summary(
        runs,
        o.run.batch,
        o.overlap,
        o.alpha_s,
        o.bandwidth,
        o.ranks_per_host,
    );
    json!({
        "backend": o.backend.name(), "threads_per_rank": o.threads_per_rank,
        "ranks_per_host": o.ranks_per_host,
        "model": {"depth": cfg.depth, "fov": cfg.fov, "features": cfg.features, "batch_per_rank": o.run.batch, "params": cfg.num_params()},
        "overlap": o.overlap, "bucket_kib": o.bucket_kib, "steps": o.run.steps,
        "runs": rows, "comm_model": model, "projection": projection,
    })
}

/// Trains `warmup + steps` steps on synthetic examples as one rank of `dist` (collective); rank 0
/// returns the medians of the phases (and, with more than one rank, the fitted allreduce cost).
pub fn measure_rank(o: &ScalingOptions, dist: &DataParallel) -> Result<Option<Value>> {
    let cfg = &o.model;
    let ex = ExampleConfig::new(cfg.fov, cfg.deltas);
    let patch = ex.patch_shape();
    let shape = patch.map(|p| p + 6);
    let v = generate(&SynthConfig {
        shape,
        neurites: 8,
        ..SynthConfig::default()
    })
    .map_err(|e| anyhow::anyhow!("synthetic volume: {e}"))?;
    let image = v.image.mapv(|g| (g as f32 - 128.0) / 33.0);
    let vols = vec![TrainingVolume {
        name: "synth".into(),
        image,
        labels: v.labels,
    }];
    let c = patch.map(|p| (p / 2) as u32);
    let coords: Vec<Coordinate> = (0..27u32)
        .map(|i| Coordinate {
            volume: 0,
            zyx: [c[0] + 1 + i % 3, c[1] + 1 + (i / 3) % 3, c[2] + 1 + i / 9],
        })
        .collect();
    let mut trainer = Trainer::new(
        dist.trainer_config(TrainerConfig::new(ex, o.batch, 1)),
        vols,
        coords,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut net = ConvStack3d::new(*cfg, 0.01, &mut Rng::new(1));
    let mut opt = Sgd;
    dist.broadcast_initial(&mut net, &mut opt, 0)?;
    let mut bufs = StepBuffers::new(&net, &trainer);
    let opts = StepOptions {
        schedule: LrSchedule::constant(1e-4),
        clip: Some(0.7),
    };
    let mut phases = Vec::new();
    for i in 0..o.warmup + o.steps {
        dist.step(&mut trainer, &mut net, &mut bufs, &opts, |p, g, lr| {
            opt.step(p, g, lr)
        })?;
        if i >= o.warmup {
            phases.push(dist.last_phases());
        }
    }
    let med = |f: fn(&Phases) -> f64| median(&mut phases.iter().map(f).collect::<Vec<_>>());
    let comm_model = if dist.size() > 1 {
        Some(fit_allreduce(dist)?)
    } else {
        None
    };
    let last_bucket = net.grad_ready_order().last().map_or(0, |r| r.len()) * 4;
    if !dist.is_root() {
        return Ok(None);
    }
    Ok(Some(json!({
        "ranks": dist.size(),
        "step_s": med(|p| p.total),
        "prepare_s": med(|p| p.prepare),
        "forward_s": med(|p| p.forward),
        "backward_s": med(|p| p.backward),
        "exposed_comm_s": med(|p| p.wait),
        "compute_s": med(|p| p.total - p.wait),
        "optimizer_s": med(|p| p.optimizer),
        "comm_busy_s": med(|p| p.comm_busy),
        "gradient_bytes": net.params().len() * 4,
        "last_bucket_bytes": last_bucket,
        "allreduce_fit": comm_model,
    })))
}

/// Times allreduces of several sizes and fits `t = a + b * bytes` (least squares on medians).
pub fn fit_allreduce(dist: &DataParallel) -> Result<Value> {
    let sizes = [1usize, 256, 4096, 65536, 262_144, 1 << 20];
    let mut points = Vec::new();
    for &floats in &sizes {
        let reps = if floats >= 1 << 18 { 5 } else { 20 };
        let mut times = Vec::new();
        let mut buf = vec![1.0f32; floats];
        for _ in 0..reps + 2 {
            let t = Instant::now();
            buf = dist.sum(buf)?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.drain(..2);
        points.push(((floats * 4) as f64, median(&mut times)));
    }
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let b = (sxy / sxx).max(1e-15);
    let a0 = (my - b * mx).max(points[0].1.min(my));
    Ok(
        json!({ "a_s": a0, "b_s_per_byte": b, "points": points.iter().map(|(x, y)| json!([x, y])).collect::<Vec<_>>() }),
    )
}

/// Ring allreduce time of `bytes` on `p` ranks with latency `alpha` (s per step) and bandwidth
/// `bw` (bytes/s).
pub fn ring_allreduce_seconds(alpha: f64, bw: f64, p: usize, bytes: f64) -> f64 {
    let p = p as f64;
    2.0 * (p - 1.0) * alpha + 2.0 * (p - 1.0) / p * bytes / bw
}

/// Hierarchical allreduce time of `bytes` on `p` ranks placed as hosts of `k`: the intra-host
/// allreduce `intra(bytes)` (fitted on one host of `k` ranks), the ring among the `p / k` host
/// leaders (latency `alpha`, bandwidth `bw`, as [`ring_allreduce_seconds`]) and the intra-host
/// broadcast of the result, estimated as `intra(bytes) / 2` (the shm broadcast takes one barrier
/// and one pass through the segment per round, the allreduce two):
/// `t_hier(P, S) = t_intra(k, S) + t_ring(P/k, S) + t_bcast_intra(k, S)`.
pub fn hier_allreduce_seconds(
    intra: impl Fn(f64) -> f64,
    alpha: f64,
    bw: f64,
    p: usize,
    k: usize,
    bytes: f64,
) -> f64 {
    let t_intra = intra(bytes);
    t_intra + ring_allreduce_seconds(alpha, bw, p / k, bytes) + t_intra / 2.0
}

/// The weak-scaling table of `runs` (the [`measure_rank`] results, the first the baseline): per
/// run its step time, examples/s (`batch` per rank), efficiency against the baseline, compute and
/// exposed communication; the communication model fitted on the largest multi-rank run
/// (`alpha_s` latency and `bandwidth` in bytes/s override the fit); and the projection of the
/// exposed allreduce to 16..2048 ranks (with `overlap`, only what backward does not hide). With
/// `ranks_per_host` `K > 1` the model gets a `hier` part (the intra-host fit of the run at `K`
/// ranks) and every projected rank count divisible by `K` the hierarchical figures
/// (`hier_allreduce_s`, `hier_exposed_s`, `hier_efficiency`, [`hier_allreduce_seconds`] with
/// the network model between hosts).
pub fn weak_scaling_summary(
    runs: &[Value],
    batch: usize,
    overlap: bool,
    alpha_s: Option<f64>,
    bandwidth: Option<f64>,
    ranks_per_host: Option<usize>,
) -> (Vec<Value>, Value, Vec<Value>) {
    let g = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let base = &runs[0];
    let t1 = g(base, "step_s");
    let rows: Vec<Value> = runs
        .iter()
        .map(|r| {
            let (t, n) = (g(r, "step_s"), g(r, "ranks"));
            // Weak scaling: the same work per rank, so efficiency = T_step(baseline) / T_step(n).
            let eff = if t > 0.0 { t1 / t } else { 0.0 };
            json!({
                "ranks": r["ranks"], "step_s": t, "examples_per_s": n * batch as f64 / t.max(1e-12),
                "efficiency": eff,
                "compute_s": g(r, "compute_s"),
                "exposed_comm_s": g(r, "exposed_comm_s").max(0.0), "comm_busy_s": g(r, "comm_busy_s").max(0.0),
                "phases": {"prepare_s": r["prepare_s"], "forward_s": r["forward_s"], "backward_s": r["backward_s"], "wait_s": r["exposed_comm_s"], "optimizer_s": r["optimizer_s"]},
            })
        })
        .collect();
    // The comm model from the largest multi-rank run.
    let fit = runs
        .iter()
        .rev()
        .find(|r| r.get("allreduce_fit").is_some_and(|f| !f.is_null()));
    let mut model = Value::Null;
    let mut projection = Vec::new();
    if let Some(r) = fit {
        let p = g(r, "ranks").max(2.0);
        let f = &r["allreduce_fit"];
        let alpha = alpha_s.unwrap_or(g(f, "a_s") / (2.0 * (p - 1.0)));
        let bw = bandwidth.unwrap_or(2.0 * (p - 1.0) / p / g(f, "b_s_per_byte"));
        let (s, last) = (g(r, "gradient_bytes"), g(r, "last_bucket_bytes"));
        let bwd = g(base, "backward_s");
        let exposed = |t: &dyn Fn(f64) -> f64| {
            let all = t(s);
            if overlap { t(last).max(all - bwd) } else { all }
        };
        // The intra-host fit: the allreduce of the one-host run at K ranks, t = a + b S.
        let k = ranks_per_host.filter(|&k| k > 1);
        let intra_run = k.and_then(|k| {
            runs.iter().find(|r| {
                g(r, "ranks") as usize == k && r.get("allreduce_fit").is_some_and(|f| !f.is_null())
            })
        });
        let intra = intra_run.map(|r| {
            let f = &r["allreduce_fit"];
            (g(f, "a_s"), g(f, "b_s_per_byte"))
        });
        for pr in [16usize, 32, 64, 128, 256, 512, 1024, 2048] {
            let t = ring_allreduce_seconds(alpha, bw, pr, s);
            let e = exposed(&|x| ring_allreduce_seconds(alpha, bw, pr, x));
            let mut row =
                json!({"ranks": pr, "allreduce_s": t, "exposed_s": e, "efficiency": t1 / (t1 + e)});
            if let (Some(k), Some((a, b))) = (k, intra)
                && pr.is_multiple_of(k)
            {
                let hier = |x: f64| hier_allreduce_seconds(|y| a + b * y, alpha, bw, pr, k, x);
                let e = exposed(&hier);
                row["hosts"] = json!(pr / k);
                row["hier_allreduce_s"] = json!(hier(s));
                row["hier_exposed_s"] = json!(e);
                row["hier_efficiency"] = json!(t1 / (t1 + e));
            }
            projection.push(row);
        }
        model = json!({
            "alpha_s": alpha, "bandwidth_bytes_per_s": bw, "measured_at_ranks": p as usize,
            "alpha_source": if alpha_s.is_some() { "--alpha-us" } else { "measured" },
            "bandwidth_source": if bandwidth.is_some() { "--bandwidth-gbs" } else { "measured" },
            "formula": "t_allreduce(P,S) = 2(P-1) alpha + 2(P-1)/P * S/B (ring); exposed(P) = max(t(P, S_last_bucket), t(P, S_gradient) - T_backward(1 rank)); efficiency(P) = T_step(1 rank) / (T_step(1 rank) + exposed(P))",
            "fit": r["allreduce_fit"],
        });
        if let (Some(k), Some(r)) = (k, intra_run) {
            model["hier"] = json!({
                "ranks_per_host": k,
                "intra_fit": r["allreduce_fit"],
                "intra_source": format!("allreduce fit of the {k}-rank (one-host) run"),
                "formula": "t_hier(P,S) = t_intra(K,S) + t_ring(P/K hosts, S) + t_bcast_intra(K,S); t_intra(K,S) = a_K + b_K S (fit at K ranks); t_ring with the alpha and B above; t_bcast_intra = t_intra / 2 (estimate); exposed and efficiency as for the ring",
            });
        }
    }
    (rows, model, projection)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(ranks: Vec<usize>) -> WeakScalingOptions {
        WeakScalingOptions {
            backend: Backend::Local,
            ranks,
            threads_per_rank: 1,
            run: ScalingOptions {
                model: ModelConfig {
                    depth: 1,
                    features: 2,
                    fov: [5; 3],
                    deltas: [2; 3],
                },
                batch: 1,
                warmup: 0,
                steps: 2,
            },
            bucket_kib: 256,
            overlap: true,
            alpha_s: None,
            bandwidth: None,
            comm_timeout: 60.0,
            worker_args: Vec::new(),
            ranks_per_host: None,
        }
    }

    #[test]
    fn local_weak_scaling_reports_every_rank_count_and_a_projection() {
        let mut started = Vec::new();
        let o = tiny(vec![1, 2]);
        let v = weak_scaling(&o, &mut |n| started.push(n)).unwrap();
        assert_eq!(started, [1, 2]);
        assert_eq!(v["backend"], "local");
        assert_eq!(v["model"]["params"], o.run.model.num_params());
        let runs = v["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0]["efficiency"], 1.0);
        for r in runs {
            let t = r["step_s"].as_f64().unwrap();
            assert!(t.is_finite() && t > 0.0, "{r}");
        }
        assert_eq!(v["projection"].as_array().unwrap().len(), 8);
        assert_eq!(v["comm_model"]["measured_at_ranks"], 2);
    }

    #[test]
    fn ranks_per_host_adds_the_hierarchical_projection() {
        let o = WeakScalingOptions {
            ranks_per_host: Some(2),
            ..tiny(vec![1, 2, 4])
        };
        let v = weak_scaling(&o, &mut |_| {}).unwrap();
        let hier = &v["comm_model"]["hier"];
        assert_eq!(hier["ranks_per_host"], 2, "{v}");
        assert!(
            hier["formula"]
                .as_str()
                .unwrap()
                .contains("t_ring(P/K hosts, S)")
        );
        for p in v["projection"].as_array().unwrap() {
            let (ring, h) = (
                p["allreduce_s"].as_f64().unwrap(),
                p["hier_allreduce_s"].as_f64(),
            );
            assert!(ring > 0.0 && h.is_some_and(|h| h > 0.0), "{p}");
            assert_eq!(
                p["hosts"].as_u64().unwrap() * 2,
                p["ranks"].as_u64().unwrap()
            );
            let e = p["hier_efficiency"].as_f64().unwrap();
            assert!(e > 0.0 && e <= 1.0, "{p}");
        }
        // Without --ranks-per-host, no hierarchical figures.
        let v = weak_scaling(&tiny(vec![1, 2]), &mut |_| {}).unwrap();
        assert!(v["comm_model"]["hier"].is_null());
        assert!(v["projection"][0]["hier_allreduce_s"].is_null());
        // The formula itself: one host of K is the intra part plus its broadcast estimate.
        let t = hier_allreduce_seconds(|s| 1.0 + s, 0.5, 1.0, 8, 8, 2.0);
        assert_eq!(t, 3.0 + 0.0 + 1.5);
        let t = hier_allreduce_seconds(|_| 0.0, 0.5, 1.0, 8, 2, 2.0);
        assert_eq!(t, ring_allreduce_seconds(0.5, 1.0, 4, 2.0));
    }

    #[test]
    fn bad_scaling_options_are_errors_naming_the_flag() {
        assert_eq!(parse_rank_counts(" 1, 2,4").unwrap(), [1, 2, 4]);
        for bad in ["0", "x", "1,,2", "4097"] {
            let e = parse_rank_counts(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--ranks {bad:?}")), "{e}");
        }
        let mut o = tiny(vec![1]);
        o.run.steps = 0;
        let e = weak_scaling(&o, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("--steps must be >= 1"), "{e}");
        for (ranks, what) in [
            (vec![1, 3], "multiple of it"),
            (vec![1, 4], "must include 2"),
        ] {
            let o = WeakScalingOptions {
                ranks_per_host: Some(2),
                ..tiny(ranks)
            };
            let e = weak_scaling(&o, &mut |_| {}).unwrap_err().to_string();
            assert!(
                e.starts_with("--ranks-per-host 2") && e.contains(what),
                "{e}"
            );
        }
        let e = weak_scaling(&tiny(Vec::new()), &mut |_| {}).unwrap_err();
        assert_eq!(e.to_string(), "--ranks: expected at least one rank count");
    }
}
