//! `ffn bench learn`: how well a training run's checkpoints segment a fixed held-out box, against
//! training CPU-hours and examples, next to a reference model (Google's) on the same box
//! ([`ffn_io::learning`] does the work). Outputs: `learning.csv` (a cache: running it again while
//! training goes on evaluates only the new checkpoints), `learning.md` and `learning_curve.png`.

use std::path::PathBuf;

use anyhow::Result;
use ffn_core::inference::InferenceOptions;
use ffn_io::VolumeSpec;
use ffn_io::learning::{LearningOptions, evaluate_run};

/// Arguments of `ffn bench learn`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The training run's output folder (as given to `ffn train --out`).
    #[arg(long)]
    run: PathBuf,
    /// Image volume FILE:DATASET that holds the held-out box.
    #[arg(long)]
    image: VolumeSpec,
    /// Ground-truth labels FILE:DATASET, same shape as --image.
    #[arg(long)]
    labels: VolumeSpec,
    /// First voxel of the held-out box, x,y,z.
    #[arg(long, value_name = "X,Y,Z")]
    offset: String,
    /// Size of the held-out box, x,y,z.
    #[arg(long, value_name = "X,Y,Z")]
    size: String,
    /// A reference model run on the same box and context (e.g. Google's `model.ckpt-27465036`).
    #[arg(long)]
    reference: Option<PathBuf>,
    /// A reference segmentation of the whole volume FILE:DATASET (e.g. Google's published one),
    /// scored on the box.
    #[arg(long)]
    reference_segmentation: Option<VolumeSpec>,
    /// Inference runs on the box grown by this many voxels on every side (clamped to the volume
    /// and to z >= --heldout-z), so that objects reaching into the box from outside are seeded.
    #[arg(long, default_value_t = 24)]
    context: usize,
    /// The held-out part starts at this z: inference never reads the image below it.
    #[arg(long, default_value_t = 0)]
    heldout_z: usize,
    /// Evaluate every N-th checkpoint (the newest always).
    #[arg(long, default_value_t = 1)]
    every: usize,
    /// Smallest segment kept by inference (voxels).
    #[arg(long, default_value_t = 1000)]
    min_segment_size: usize,
    /// Probability needed to move the FOV (google/ffn's default 0.9).
    #[arg(long, default_value_t = 0.9)]
    move_threshold: f32,
    /// Probability at which voxels join the segment (google/ffn's default 0.6).
    #[arg(long, default_value_t = 0.6)]
    segment_threshold: f32,
    /// Test-time augmentation: average the predictions over these symmetries (`none`, `all`, or
    /// a list of `flip-z`, `flip-y`, `flip-x`, `swap-xy`; see `ffn infer`).
    #[arg(long, default_value = "none", value_parser = crate::args::parse_symmetries)]
    symmetries: ffn_core::inference::Symmetries,
    #[command(flatten)]
    agglomerate: crate::args::AgglomerateFlags,
    /// Output folder for learning.csv, learning.md and learning_curve.png.
    #[arg(long)]
    out: PathBuf,
}

/// Runs `ffn bench learn`.
pub fn run(args: Args) -> Result<()> {
    let full = ffn_io::dataset_shape(&args.image)?;
    let (offset, size) = crate::args::parse_box(
        Some(args.offset.as_str()),
        Some(args.size.as_str()),
        full,
        &args.image,
    )?;
    let opts = LearningOptions {
        run: args.run,
        image: args.image,
        labels: args.labels,
        offset,
        size,
        reference: args.reference,
        reference_segmentation: args.reference_segmentation,
        context: args.context,
        heldout_z: args.heldout_z,
        every: args.every,
        inference: InferenceOptions {
            min_segment_size: args.min_segment_size,
            move_threshold: args.move_threshold,
            segment_threshold: args.segment_threshold,
            symmetries: args.symmetries,
            ..InferenceOptions::default()
        },
        agglomerate: args.agglomerate.options(),
        out: args.out,
    };
    let report = evaluate_run(&opts, |row| eprintln!("bench learn: {}", row.csv()))?;
    print!("{}", report.table);
    println!(
        "wrote {}, learning.md and learning_curve.png",
        report.csv.display()
    );
    Ok(())
}
