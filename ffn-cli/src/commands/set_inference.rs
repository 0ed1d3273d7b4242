//! `ffn set-inference`: records inference settings with a model, so that `ffn infer`, `ffn
//! infer-tiled` and `ffn demo` use them ([`ffn_io::inference_defaults`] does the work).

use std::path::PathBuf;

use anyhow::Result;
use ffn_io::inference_defaults::{InferenceDefaults, RecordOptions, write_with_defaults};

/// Arguments of `ffn set-inference`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model: an ffn-rs checkpoint (.safetensors).
    model: PathBuf,
    /// The settings to record (unset ones keep google/ffn's defaults).
    #[command(flatten)]
    thresholds: crate::args::ThresholdFlags,
    /// How the settings were chosen (recorded as text, e.g. the boxes they were scored on).
    #[arg(long)]
    chosen_on: Option<String>,
    /// Where to write the model with the settings (.safetensors; written atomically; may be
    /// MODEL itself).
    #[arg(long)]
    out: PathBuf,
}

/// Runs `ffn set-inference`.
pub fn run(args: Args) -> Result<()> {
    let opts = RecordOptions {
        model: args.model,
        defaults: InferenceDefaults {
            chosen_on: args.chosen_on,
            ..args.thresholds.settings()
        },
    };
    write_with_defaults(&opts, &args.out)?;
    println!(
        "wrote {}: the weights of {} with the inference settings {} (replacing any recorded \
         before); ffn infer, infer-tiled and demo start from them",
        args.out.display(),
        opts.model.display(),
        opts.defaults
    );
    Ok(())
}
