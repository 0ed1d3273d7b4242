//! `ffn inspect CHECKPOINT`: what a checkpoint holds, for ffn-rs `.safetensors` checkpoints and
//! google/ffn TensorFlow checkpoints (`model.ckpt-N`, its `.index` or its data file).

use anyhow::Result;
use ffn_io::checkpoint::inspect_checkpoint;
use serde_json::json;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

/// Arguments of `ffn inspect`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Checkpoint: an ffn-rs .safetensors file or a TF checkpoint prefix / .index file.
    checkpoint: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `ffn inspect`. A closed stdout (`ffn inspect X | head`) ends the listing quietly.
pub fn run(args: Args) -> Result<()> {
    let text = render(&args)?;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn render(args: &Args) -> Result<String> {
    let mut o = String::new();
    let listing = inspect_checkpoint(&args.checkpoint)?;
    let model = listing.model.as_ref().ok();
    if args.json {
        let tensors: Vec<_> = listing
            .tensors
            .iter()
            .map(|t| json!({ "name": t.name, "dtype": t.dtype, "shape": t.shape }))
            .collect();
        let model = model.map(|m| {
            json!({ "depth": m.depth, "features": m.features, "fov": m.fov, "deltas": m.deltas,
                    "num_params": m.num_params() })
        });
        writeln!(
            o,
            "{}",
            json!({ "path": args.checkpoint.display().to_string(), "format": listing.format,
                    "metadata": listing.metadata, "model": model, "tensors": tensors })
        )?;
        return Ok(o);
    }
    writeln!(o, "{}: {}", args.checkpoint.display(), listing.format)?;
    for (k, v) in &listing.metadata {
        if k != "model" {
            writeln!(o, "  {k}: {v}")?;
        }
    }
    match &listing.model {
        Ok(m) => writeln!(
            o,
            "  model: convstack_3d depth {}, {} features, FOV {:?}, deltas {:?}{}, {} parameters",
            m.depth,
            m.features,
            m.fov,
            m.deltas,
            if listing.format.starts_with("TensorFlow") {
                " (FOV/deltas not stored: defaults)"
            } else {
                ""
            },
            m.num_params()
        )?,
        Err(e) => writeln!(o, "  model: not loadable as an FFN network: {e}")?,
    }
    let width = listing
        .tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        o,
        "  {:<width$}  {:<8}  {:>10}  shape",
        "name", "dtype", "elements"
    )?;
    for t in &listing.tensors {
        let n: usize = t.shape.iter().product();
        writeln!(
            o,
            "  {:<width$}  {:<8}  {:>10}  {:?}",
            t.name, t.dtype, n, t.shape
        )?;
    }
    Ok(o)
}
