//! `ffn average`: the weight average of checkpoints of one training run ([`ffn_io::average`] does
//! the work), a model for inference and fine-tuning.

use std::path::PathBuf;

use anyhow::Result;

/// Arguments of `ffn average`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Checkpoints of one run (ffn-rs .safetensors, the same architecture and training
    /// configuration); one alone gives its weights without the optimiser state.
    #[arg(required = true, num_args = 1..)]
    checkpoints: Vec<PathBuf>,
    /// Where to write the averaged model (.safetensors; written atomically).
    #[arg(long)]
    out: PathBuf,
}

/// Runs `ffn average`.
pub fn run(args: Args) -> Result<()> {
    let avg = ffn_io::average::write_average(&args.checkpoints, &args.out)?;
    let steps = avg.training_config["averaged"]["steps"].clone();
    if args.checkpoints.len() == 1 {
        println!(
            "wrote {}: the weights of step {}, no optimiser state",
            args.out.display(),
            avg.step
        );
    } else {
        println!(
            "wrote {}: the mean weights of {} checkpoints (steps {}), step {} for its metadata, no optimiser state",
            args.out.display(),
            args.checkpoints.len(),
            steps,
            avg.step
        );
    }
    Ok(())
}
