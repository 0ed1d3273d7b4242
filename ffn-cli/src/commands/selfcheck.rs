//! `ffn selfcheck`: a fast check that the build works on this machine.

use anyhow::{Result, ensure};
use ffn_core::conv::Simd;
use ffn_core::model_spec::ModelConfig;

/// Arguments of `ffn selfcheck`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print the report as one JSON line.
    #[arg(long)]
    json: bool,
}

/// Runs the self-check and prints what it found.
pub fn run(args: Args) -> Result<()> {
    let fib25 = ModelConfig {
        depth: 12,
        ..ModelConfig::default()
    };
    let params = fib25.num_params();
    ensure!(
        params == 638_433,
        "FIB-25 model: expected 638433 parameters, found {params}"
    );
    let mut rng = ffn_core::rng::Rng::new(0);
    let draw = rng.truncated_normal(0.01);
    ensure!(
        draw.abs() <= 0.02,
        "RNG: truncated normal out of range: {draw}"
    );
    let simd = Simd::active();
    let supported: Vec<&str> = Simd::ALL
        .into_iter()
        .filter(|s| s.supported())
        .map(Simd::name)
        .collect();
    let mpi = cfg!(feature = "mpi");
    let zmq = cfg!(feature = "zmq");
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "version": ffn_core::VERSION,
                "fib25_params": params,
                "mpi": mpi,
                "zmq": zmq,
                "threads": rayon::current_num_threads(),
                "simd": simd.name(),
                "simd_supported": supported,
            })
        );
    } else {
        println!("ffn {} self-check passed", ffn_core::VERSION);
        println!("  FIB-25 convstack_3d (depth 12, FOV 33^3): {params} parameters");
        println!(
            "  backends compiled in: local, shm{}{}",
            if mpi { ", mpi" } else { "" },
            if zmq { ", zmq, hier" } else { "" }
        );
        println!("  threads: {}", rayon::current_num_threads());
        println!(
            "  SIMD kernels: {simd} (this CPU runs: {})",
            supported.join(", ")
        );
    }
    Ok(())
}
