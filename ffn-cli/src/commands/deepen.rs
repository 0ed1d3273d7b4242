//! `ffn deepen`: a trained model with identity residual modules added, to fine-tune at a greater
//! depth ([`ffn_io::deepen`] does the work).

use std::path::PathBuf;

use anyhow::Result;
use ffn_io::deepen::{DeepenOptions, write_deepened};

/// Arguments of `ffn deepen`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The trained model: an ffn-rs checkpoint (or a run folder: its newest) or a google/ffn TF
    /// checkpoint.
    model: PathBuf,
    /// The new depth (conv0 plus depth - 1 residual modules); above the model's.
    #[arg(long)]
    depth: usize,
    /// Seed of the Glorot-uniform first convolutions of the new modules.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where to write the deepened model (.safetensors; written atomically).
    #[arg(long)]
    out: PathBuf,
}

/// Runs `ffn deepen`.
pub fn run(args: Args) -> Result<()> {
    let opts = DeepenOptions {
        model: args.model,
        depth: args.depth,
        seed: args.seed,
    };
    let deeper = write_deepened(&opts, &args.out)?;
    let from = &deeper.training_config["deepened"];
    println!(
        "wrote {}: depth {} -> {} ({} parameters), the same outputs until trained; no optimiser \
         state (start a run with --depth {} --init-checkpoint {})",
        args.out.display(),
        from["from_depth"],
        deeper.model.depth,
        deeper.params.len(),
        deeper.model.depth,
        args.out.display()
    );
    Ok(())
}
