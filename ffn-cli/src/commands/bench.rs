//! `ffn bench ...`: throughput benchmarks that print the figure users care about, optionally as one
//! JSON line. Each kind of benchmark is one variant of [`Kind`]; add new ones there.

use anyhow::{Result, anyhow};
use clap::Subcommand;
use ffn_core::CoreError;
use ffn_core::bench::{NetworkBenchOptions, measure_network};
use ffn_core::conv::Simd;
use ffn_core::conv::winograd::ConvAlgorithm;
use ffn_core::model_spec::ModelConfig;

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
    Learn(Box<super::bench_learn::Args>),
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
    /// Convolution algorithm of the 3x3x3 layers: `winograd3d` (the default: forward convs and
    /// input gradients by Winograd over all three axes, weight gradients by F(4x4,3x3)),
    /// `winograd` (F(4x4,3x3) in y and x for all three), `winograd1d` (F(4,3) along x), `direct`
    /// or `bf16` (`winograd`, but the forward convs with 32k channels computed directly from
    /// inputs and weights rounded to bfloat16: AMX where the CPU has it, else emulated; `bench
    /// train` computes it as `winograd`). With a Winograd algorithm or `bf16` the result is also
    /// compared with `direct`.
    #[arg(long, default_value = "winograd3d", value_parser = crate::args::parse_conv_algorithm)]
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
        Kind::Learn(a) => super::bench_learn::run(*a),
    }
}

fn run_net(a: &NetArgs, train: bool) -> Result<()> {
    let o = NetworkBenchOptions {
        model: ModelConfig {
            depth: a.depth,
            features: a.features,
            fov: [a.fov; 3],
            ..ModelConfig::default()
        },
        train,
        batch: a.batch,
        threads: a.threads,
        reps: a.reps,
        warmup: a.warmup,
        seed: a.seed,
        conv: a.conv,
        compare: !a.no_compare,
        simd: Simd::active(),
    };
    let r = measure_network(&o).map_err(|e| match e {
        CoreError::InvalidConfig(e) => anyhow!("bench: {e}"),
        e => anyhow!("bench: {e}"),
    })?;
    let (per_s, gflops, med, min) = (r.examples_per_s, r.gflops, r.median_s, r.min_s);
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
                "flops_per_example": r.flops_per_example,
                "conv": a.conv.name(),
                "simd": r.simd.name(),
                "bf16_products": (a.conv == ConvAlgorithm::Bf16 && !train)
                    .then(ffn_core::conv::bf16::products_name),
                "vs_direct": r.vs_direct.map(|d| serde_json::json!({
                    "max_abs_diff": d.max_abs,
                    "relative_l2": d.relative_l2,
                })),
            })
        );
        return Ok(());
    }
    println!(
        "{kind}: {per_s:.3} examples/s, {gflops:.1} GFLOP/s (depth {}, FOV {}^3, {} features, batch {}, \
         {} threads; median of {} calls {med:.3} s, min {min:.3} s)",
        a.depth, a.fov, a.features, a.batch, a.threads, a.reps
    );
    println!(
        "conv algorithm: {}, SIMD kernels: {}{}",
        a.conv.name(),
        r.simd,
        algorithm_note(a.conv, train)
    );
    if let Some(d) = r.vs_direct {
        let what = if train { "gradients" } else { "logits" };
        println!(
            "{what} vs direct convolution: max |diff| {:.3e}, relative L2 {:.3e}",
            d.max_abs, d.relative_l2
        );
    }
    Ok(())
}

/// What ran the products of `--conv bf16`, and that training computes it in float32 (empty for
/// the other algorithms).
fn algorithm_note(conv: ConvAlgorithm, train: bool) -> String {
    match conv {
        ConvAlgorithm::Bf16 if train => " (training computes in float32)".into(),
        ConvAlgorithm::Bf16 => format!(
            ", bfloat16 products: {}",
            ffn_core::conv::bf16::products_name()
        ),
        _ => String::new(),
    }
}
