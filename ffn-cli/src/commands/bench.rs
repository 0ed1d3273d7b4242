//! `ffn bench ...`: throughput benchmarks that print the figure users care about, optionally as one
//! JSON line. Each kind of benchmark is one variant of [`Kind`]; add new ones there.

use anyhow::{Context, Result, bail, ensure};
use clap::Subcommand;
use ffn_core::conv::winograd::ConvAlgorithm;
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::{ConvStack3d, analytic_flops};
use ffn_core::optim::{Optimizer, Sgd, clip_by_value};
use ffn_core::rng::Rng;
use std::time::Instant;

/// Arguments of `ffn bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// What to measure.
    #[command(subcommand)]
    kind: Kind,
}

/// The benchmarks.
#[derive(Subcommand, Debug)]
pub enum Kind {
    /// Training steps of the FFN (forward, loss, backward, clip, SGD): examples/s and GFLOP/s.
    Train(NetArgs),
    /// Forward passes of the FFN (inference): FOVs/s and GFLOP/s.
    Forward(NetArgs),
    /// Allreduce time and bus bandwidth of a communicator backend (and of raw MPI_Allreduce).
    Comm(super::bench_comm::Args),
    /// Weak scaling of data-parallel training: examples/s per rank count, efficiency, compute vs
    /// exposed communication, projected efficiency at 16..2048 ranks.
    Scaling(super::bench_scaling::Args),
    /// How a training run learns: each checkpoint segments a held-out box and is scored against
    /// the ground truth, beside a reference model; a table and a curve against CPU-hours and examples.
    Learn(super::bench_learn::Args),
}

/// Network and timing options shared by `bench train` and `bench forward`.
#[derive(clap::Args, Debug)]
pub struct NetArgs {
    /// Network depth (TF-style: conv0 + depth-1 residual modules).
    #[arg(long, default_value_t = 9)]
    depth: usize,
    /// FOV edge (cubic FOV, odd).
    #[arg(long, default_value_t = 33)]
    fov: usize,
    /// Feature maps per hidden layer.
    #[arg(long, default_value_t = 32)]
    features: usize,
    /// FOVs per call.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Worker threads (a local thread pool of this size runs the kernels).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Timed calls; the median is reported.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Untimed calls before timing.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Seed of the weights and the synthetic batch.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Convolution algorithm of the 3x3x3 layers: `winograd` (F(4,3) along x, fewer
    /// multiply-adds) or `direct`. With `winograd` the result is also compared with `direct`.
    #[arg(long, default_value = "winograd", value_parser = super::parse_conv_algorithm)]
    conv: ConvAlgorithm,
    /// Skip the comparison with `direct` (e.g. when profiling the timed calls alone).
    #[arg(long)]
    no_compare: bool,
    /// Print one JSON line instead of a sentence.
    #[arg(long)]
    json: bool,
}

/// Runs one benchmark.
pub fn run(args: Args) -> Result<()> {
    match args.kind {
        Kind::Train(a) => run_net(&a, true),
        Kind::Forward(a) => run_net(&a, false),
        Kind::Comm(a) => super::bench_comm::run(a),
        Kind::Scaling(a) => super::bench_scaling::run(a),
        Kind::Learn(a) => super::bench_learn::run(a),
    }
}

/// A synthetic batch like the PyTorch peer's `make_batch`: normalised uniform image, seed at
/// logit(0.05) with logit(0.95) at each FOV centre, random 0.05/0.95 labels.
fn make_batch(cfg: &ModelConfig, batch: usize, rng: &mut Rng) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let v: usize = cfg.fov.iter().product();
    let n = batch * v;
    let image: Vec<f32> = (0..n)
        .map(|_| (rng.next_f32() * 255.0 - 128.0) / 33.0)
        .collect();
    let logit = |p: f32| (p / (1.0 - p)).ln();
    let mut seed = vec![logit(0.05); n];
    let [_, fy, fx] = cfg.fov;
    let centre = (cfg.fov[0] / 2 * fy + fy / 2) * fx + fx / 2;
    for b in 0..batch {
        seed[b * v + centre] = logit(0.95);
    }
    let labels = (0..n)
        .map(|_| if rng.next_f32() > 0.5 { 0.95 } else { 0.05 })
        .collect();
    (image, seed, labels)
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        0.5 * (xs[n / 2 - 1] + xs[n / 2])
    }
}

fn run_net(a: &NetArgs, train: bool) -> Result<()> {
    let cfg = ModelConfig {
        depth: a.depth,
        features: a.features,
        fov: [a.fov; 3],
        ..ModelConfig::default()
    };
    if let Err(e) = cfg.validate() {
        bail!("bench: {e}");
    }
    ensure!(a.batch >= 1, "bench: --batch must be >= 1, found 0");
    ensure!(a.threads >= 1, "bench: --threads must be >= 1, found 0");
    ensure!(a.reps >= 1, "bench: --reps must be >= 1, found 0");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(a.threads)
        .build()
        .context("bench: cannot start the thread pool")?;
    let mut times = pool.install(|| {
        let mut rng = Rng::new(a.seed);
        let mut net = ConvStack3d::new(cfg, 0.01, &mut rng);
        net.set_conv_algorithm(a.conv);
        let (image, seed, labels) = make_batch(&cfg, a.batch, &mut rng);
        let mut logits = vec![0.0f32; image.len()];
        let mut grads = vec![0.0f32; net.params().len()];
        let mut opt = Sgd;
        let mut once = |net: &mut ConvStack3d| {
            if train {
                net.forward_backward(&image, &seed, &labels, a.batch, &mut logits, &mut grads);
                clip_by_value(&mut grads, 0.7);
                opt.step(net.params_mut(), &grads, 1e-3);
            } else {
                net.forward(&image, &seed, a.batch, &mut logits);
            }
        };
        for _ in 0..a.warmup {
            once(&mut net);
        }
        (0..a.reps)
            .map(|_| {
                let t = Instant::now();
                once(&mut net);
                t.elapsed().as_secs_f64()
            })
            .collect::<Vec<f64>>()
    });
    let deviation = match a.conv {
        ConvAlgorithm::Winograd if !a.no_compare => {
            Some(pool.install(|| deviation_from_direct(a, &cfg, train)))
        }
        _ => None,
    };
    let min = times.iter().cloned().fold(f64::INFINITY, f64::min);
    let med = median(&mut times);
    let flops = analytic_flops(&cfg);
    let per_example = if train { flops.train } else { flops.forward };
    let per_s = a.batch as f64 / med;
    let gflops = per_example as f64 * per_s / 1e9;
    let kind = if train { "train" } else { "forward" };
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "kind": kind,
                "examples_per_s": per_s,
                "gflops": gflops,
                "threads": a.threads,
                "depth": a.depth,
                "fov": a.fov,
                "features": a.features,
                "batch": a.batch,
                "median_s": med,
                "min_s": min,
                "reps": a.reps,
                "flops_per_example": per_example,
                "conv": a.conv.name(),
                "vs_direct": deviation.map(|d| serde_json::json!({
                    "max_abs_diff": d.max_abs,
                    "relative_l2": d.relative_l2,
                })),
            })
        );
    } else {
        println!(
            "{kind}: {per_s:.3} examples/s, {gflops:.1} GFLOP/s (depth {}, FOV {}^3, {} features, batch {}, \
             {} threads; median of {} calls {med:.3} s, min {min:.3} s)",
            a.depth, a.fov, a.features, a.batch, a.threads, a.reps
        );
        println!("conv algorithm: {}", a.conv.name());
        if let Some(d) = deviation {
            let what = if train { "gradients" } else { "logits" };
            println!(
                "{what} vs direct convolution: max |diff| {:.3e}, relative L2 {:.3e}",
                d.max_abs, d.relative_l2
            );
        }
    }
    Ok(())
}

/// How far one algorithm's result is from the direct one's.
#[derive(Clone, Copy, Debug)]
struct Deviation {
    max_abs: f64,
    relative_l2: f64,
}

/// Runs the benchmark's first call (same weights and batch) with `a.conv` and with the direct
/// algorithm and compares the logits (forward) or the gradients (train).
fn deviation_from_direct(a: &NetArgs, cfg: &ModelConfig, train: bool) -> Deviation {
    let result = |conv: ConvAlgorithm| {
        let mut rng = Rng::new(a.seed);
        let mut net = ConvStack3d::new(*cfg, 0.01, &mut rng);
        net.set_conv_algorithm(conv);
        let (image, seed, labels) = make_batch(cfg, a.batch, &mut rng);
        let mut logits = vec![0.0f32; image.len()];
        if train {
            let mut grads = vec![0.0f32; net.params().len()];
            net.forward_backward(&image, &seed, &labels, a.batch, &mut logits, &mut grads);
            grads
        } else {
            net.forward(&image, &seed, a.batch, &mut logits);
            logits
        }
    };
    let (got, want) = (result(a.conv), result(ConvAlgorithm::Direct));
    let mut max_abs = 0.0f64;
    let (mut diff2, mut norm2) = (0.0f64, 0.0f64);
    for (x, y) in got.iter().zip(&want) {
        let d = (*x as f64 - *y as f64).abs();
        max_abs = max_abs.max(d);
        diff2 += d * d;
        norm2 += (*y as f64).powi(2);
    }
    Deviation {
        max_abs,
        relative_l2: (diff2 / norm2.max(f64::MIN_POSITIVE)).sqrt(),
    }
}
