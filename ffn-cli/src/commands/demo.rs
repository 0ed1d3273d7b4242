//! `ffn demo`: the product on real electron microscopy, in one command, on data that ships with the
//! repository (FIB-25 `training_sample2`, `data/fib25/`). The work is [`ffn_io::demo`]; this module
//! turns flags into its options and prints.
//!
//! 1. data: the image and ground truth imported; z < 150 is the training part, a box in z >= 150
//!    is held out;
//! 2. partitions and class-balanced coordinates of the training part;
//! 3. a short training run from fresh weights on the training part, for `--train-minutes`: its
//!    curve shows the network learning;
//! 4. the held-out box segmented by flood filling (PolicyPeaks seeds, on a context region around
//!    the box within the held-out part) with the model trained by ffn-rs that ships in `models/`;
//!    Google's published segmentation of the volume (and optionally a live run of a reference
//!    model such as Google's) for comparison;
//! 5. all scored on the box against the ground truth (VI split / merge, adapted Rand error,
//!    unsegmented voxels), a PNG of the box's middle slice (image | truth | each segmentation).

use std::path::PathBuf;

use anyhow::{Context, Result};
use ffn_core::model_spec::ModelConfig;
use ffn_io::demo::{DemoEvent, DemoOptions, run_demo};

use crate::args::parse_xyz;

/// Arguments of `ffn demo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output folder.
    #[arg(long, default_value = "demo_out")]
    pub out: PathBuf,
    /// The FIB-25 folder: `grayscale_maps/*.png` and `groundtruth.h5.gz`.
    #[arg(long, default_value = "data/fib25")]
    pub data: PathBuf,
    /// The model trained by ffn-rs that segments the held-out box.
    #[arg(long, default_value = "models/ffn-rs-fib25/model.safetensors")]
    pub model: PathBuf,
    /// Google's published segmentation of the whole volume, FILE:DATASET, scored on the same box
    /// (`none` skips it).
    #[arg(long, default_value = "data/google-fib25/segmentation.h5:segmentation")]
    pub reference: String,
    /// Also run this model live on the box, with the same context as the ffn-rs model (e.g.
    /// Google's `data/google-fib25/model.ckpt-27465036`; about 5 minutes on 2 cores).
    #[arg(long)]
    pub reference_model: Option<PathBuf>,
    /// Inference runs on the box grown by this many voxels on every side (within z >= --train-z).
    #[arg(long, default_value_t = 24)]
    pub context: usize,
    /// Training part: z below this slice.
    #[arg(long, default_value_t = 150)]
    pub train_z: usize,
    /// First voxel x,y,z of the held-out box (z >= --train-z).
    #[arg(long, default_value = "140,30,160")]
    pub offset: String,
    /// Size x,y,z of the held-out box.
    #[arg(long, default_value = "80,80,80")]
    pub size: String,
    /// Training time budget of the short run, in minutes.
    #[arg(long, default_value_t = ffn_io::demo::DEFAULT_TRAIN_MINUTES)]
    pub train_minutes: f64,
    /// Step limit of the short run (the time budget usually ends it first).
    #[arg(long, default_value_t = 100_000)]
    pub max_steps: u64,
    /// Network depth of the short run.
    #[arg(long, default_value_t = 5)]
    pub depth: usize,
    /// Feature maps of the short run.
    #[arg(long, default_value_t = 32)]
    pub features: usize,
    /// FOV x,y,z of the short run.
    #[arg(long, default_value = "17,17,17")]
    pub fov: String,
    /// FOV movement step x,y,z of the short run.
    #[arg(long, default_value = "4,4,4")]
    pub deltas: String,
    /// Batch size of the short run.
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Adam learning rate of the short run (weights drawn Glorot-uniform, as the shipped model's).
    #[arg(long, default_value_t = 0.0003)]
    pub learning_rate: f32,
    /// Smallest segment kept by inference, voxels [each model's recorded inference settings, else
    /// google/ffn's 1000].
    #[arg(long)]
    pub min_segment_size: Option<usize>,
    /// Seed of weights and sampling.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs `ffn demo`.
pub fn run(args: Args) -> Result<()> {
    let opts = options(args)?;
    let report = run_demo(&opts, &mut |event| match event {
        DemoEvent::Note(line) => println!("{line}"),
        DemoEvent::TrainRow(row) => eprintln!("{}", row.csv()),
    })?;
    println!();
    println!("{}", report.text(&opts));
    Ok(())
}

/// The library's options from the flags.
fn options(args: Args) -> Result<DemoOptions> {
    let reference = match args.reference.as_str() {
        "none" => None,
        text => Some(text.parse().context("--reference")?),
    };
    Ok(DemoOptions {
        data: args.data,
        model: args.model,
        reference,
        reference_model: args.reference_model,
        context: args.context,
        train_z: args.train_z,
        offset: parse_xyz(&args.offset, "--offset")?,
        size: parse_xyz(&args.size, "--size")?,
        train_minutes: args.train_minutes,
        max_steps: args.max_steps,
        model_config: ModelConfig {
            depth: args.depth,
            features: args.features,
            fov: parse_xyz(&args.fov, "--fov")?,
            deltas: parse_xyz(&args.deltas, "--deltas")?,
        },
        batch_size: args.batch_size,
        learning_rate: args.learning_rate,
        min_segment_size: args.min_segment_size,
        seed: args.seed,
        ..DemoOptions::new(args.out)
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn the_flags_default_to_the_librarys_options() {
        let cli = Cli::try_parse_from(["demo"]).unwrap();
        assert_eq!(options(cli.args).unwrap(), DemoOptions::new("demo_out"));
    }

    #[test]
    fn flags_reach_the_options_in_x_y_z_order() {
        let cli =
            Cli::try_parse_from(["demo", "--offset", "1,2,160", "--reference", "none"]).unwrap();
        let opts = options(cli.args).unwrap();
        assert_eq!(opts.offset, [160, 2, 1]);
        assert_eq!(opts.reference, None);
    }
}
