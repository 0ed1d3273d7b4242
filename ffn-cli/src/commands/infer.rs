//! `ffn infer`: flood-filling inference of one volume (or a crop of it) with a trained model.
//!
//! The work is [`ffn_io::infer`]: [`resolve_infer`] layers the flags over a google/ffn
//! `InferenceRequest` (`--request file.pbtxt`) over the defaults, [`infer_volume`] reads,
//! normalises, segments and writes, [`InferReport`] is the JSON summary and info file. This module
//! parses flags, draws the progress bar and prints. Outputs: the segmentation (smallest unsigned
//! type that fits), a JSON file with origins and counters, and optionally the quantised
//! probability map.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use ffn_io::infer::{InferOutputs, InferOverrides, InferReport, default_info_path, resolve_infer};
use ffn_io::{InferEvent, infer_volume};
use indicatif::{ProgressBar, ProgressStyle};

/// Arguments of `ffn infer`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Thresholds (--move-threshold, --segment-threshold, --min-segment-size): the command line, else a request (which replaces the settings of the model as a whole), else the settings recorded with the model (ffn set-inference), else the defaults of google/ffn."
)]
pub struct Args {
    /// Image volume, FILE.h5:DATASET (uint8 or float32, z,y,x). Default: the request's image.
    #[arg(long)]
    image: Option<String>,
    /// Model: an ffn-rs checkpoint (.safetensors or a folder of them) or google/ffn's TF
    /// checkpoint (model.ckpt-N). Default: the request's model_checkpoint_path.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Output segmentation, FILE.h5:DATASET (other datasets of the file are kept).
    #[arg(long)]
    out: String,
    /// google/ffn InferenceRequest in protobuf text format; flags override its fields.
    #[arg(long)]
    request: Option<PathBuf>,
    /// Segment only the box starting here, x,y,z (with --size).
    #[arg(long, value_name = "X,Y,Z", requires = "size")]
    offset: Option<String>,
    /// Size of the box to segment, x,y,z (with --offset).
    #[arg(long, value_name = "X,Y,Z", requires = "offset")]
    size: Option<String>,
    /// Image normalisation: (x - mean) / stddev [request, else the checkpoint's training
    /// normalisation, else 128].
    #[arg(long)]
    image_mean: Option<f32>,
    /// Image normalisation stddev [request, else the checkpoint's, else 33].
    #[arg(long)]
    image_stddev: Option<f32>,
    /// Seed policy: peaks (google/ffn PolicyPeaks), grid (PolicyGrid3d), or list (--seeds)
    /// [request, else peaks].
    #[arg(long)]
    seed_policy: Option<String>,
    /// Text file with one seed per line, x,y,z in volume coordinates (also with --offset); implies
    /// --seed-policy list.
    #[arg(long)]
    seeds: Option<PathBuf>,
    /// Grid step of the grid policy [request seed_policy_args.step, else 16].
    #[arg(long)]
    grid_step: Option<usize>,
    /// Object probability at a new seed [request, else 0.95].
    #[arg(long)]
    init_activation: Option<f32>,
    /// Probability fed for unvisited voxels [request, else 0.05].
    #[arg(long)]
    pad_value: Option<f32>,
    /// Flood-fill thresholds [a request's, else the model's recorded settings (`ffn
    /// set-inference`), else google/ffn's defaults].
    #[command(flatten)]
    thresholds: crate::args::ThresholdFlags,
    #[command(flatten)]
    agglomerate: crate::args::AgglomerateFlags,
    /// Seeds closer than this to a segment are skipped, x,y,z [request, else 1,1,1].
    #[arg(long, value_name = "X,Y,Z")]
    min_boundary_dist: Option<String>,
    /// Disable the "disco" rule (voxels below 0.5 may be raised again).
    #[arg(long)]
    no_disco: bool,
    /// Write the seed points (x,y,z per line, volume coordinates) to this file.
    #[arg(long)]
    seeds_out: Option<PathBuf>,
    /// Stop after computing (and writing, with --seeds-out) the seed points.
    #[arg(long, requires = "seeds_out")]
    seeds_only: bool,
    /// Also write the quantised probability map (uint8, 0 = unassigned), FILE.h5:DATASET.
    #[arg(long)]
    prob_out: Option<String>,
    /// Where to write origins and counters as JSON [default: next to the output,
    /// <file stem>.<dataset>.json].
    #[arg(long)]
    info_out: Option<PathBuf>,
    /// Print the summary as one JSON line.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    pub conv: crate::args::InferenceConvFlag,
}

/// Runs `ffn infer`.
pub fn run(args: Args) -> Result<()> {
    let req = match &args.request {
        Some(p) => Some(
            ffn_io::load_inference_request(p)
                .with_context(|| format!("reading the request {}", p.display()))?,
        ),
        None => None,
    };
    if let Some(r) = &req
        && !r.ignored.is_empty()
    {
        eprintln!(
            "note: request fields not used by ffn infer: {}",
            r.ignored.join(", ")
        );
    }
    let given = InferOverrides {
        image: args.image,
        checkpoint: args.checkpoint,
        offset: args.offset,
        size: args.size,
        image_mean: args.image_mean,
        image_stddev: args.image_stddev,
        seed_policy: args.seed_policy,
        seeds_file: args.seeds,
        grid_step: args.grid_step,
        init_activation: args.init_activation,
        pad_value: args.pad_value,
        move_threshold: args.thresholds.move_threshold,
        segment_threshold: args.thresholds.segment_threshold,
        min_segment_size: args.thresholds.min_segment_size,
        symmetries: args.thresholds.symmetries,
        min_boundary_dist: args.min_boundary_dist,
        no_disco: args.no_disco,
        conv: args.conv.conv,
    };
    let outputs = InferOutputs {
        out: args.out,
        prob_out: args.prob_out,
        seeds_out: args.seeds_out,
        seeds_only: args.seeds_only,
    };
    let request = args.request.as_deref().zip(req.as_ref());
    let mut run = resolve_infer(&given, &outputs, request)?;
    run.options.segment.agglomerate = args.agglomerate.options();
    let (shape, policy) = (run.shape, run.seed_policy.clone());
    if run.net.conv_algorithm() == ffn_core::conv::winograd::ConvAlgorithm::Bf16 {
        eprintln!(
            "precision: bfloat16 products ({}); the segmentation differs from float32's",
            ffn_core::conv::bf16::products_name()
        );
    }
    if let Some(d) = &run.model_defaults {
        eprintln!(
            "inference settings recorded with the model: {d} (the command line overrides them)"
        );
    }

    // Inference, with a progress bar.
    let total_voxels = (shape[0] * shape[1] * shape[2]) as f64;
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] seeds {pos}/{len} {msg}")
            .map_err(|e| anyhow::anyhow!("progress bar template: {e}"))?
            .progress_chars("=> "),
    );
    let t0 = Instant::now();
    let mut last_seeds = u64::MAX;
    let mut on_event = |e: InferEvent<'_>| match e {
        InferEvent::Normalised(n) => eprintln!(
            "image normalisation: (x - {}) / {}, {}",
            n.mean, n.stddev, n.source
        ),
        InferEvent::Seeds { count, .. } => bar.set_length(count as u64),
        InferEvent::Progress(c) => {
            // Called after every prediction and every seed: redraw on new seeds and every 8 calls.
            if c.seeds_done == last_seeds && !c.predict_calls.is_multiple_of(8) {
                return;
            }
            last_seeds = c.seeds_done;
            let secs = t0.elapsed().as_secs_f64().max(1e-9);
            bar.set_position(c.seeds_done);
            bar.set_message(format!(
                "segments {} covered {:.1}% predict {} ({:.1}/s)",
                c.segments,
                100.0 * c.voxels_segmented as f64 / total_voxels,
                c.predict_calls,
                c.predict_calls as f64 / secs
            ));
        }
        _ => {}
    };
    let done = infer_volume(&run.options, &mut run.net, &mut on_event)?;
    bar.finish_and_clear();
    let (seeds, seeds_s) = (done.seeds.len(), done.seed_seconds);
    let Some(seg) = &done.segmentation else {
        if let Some(p) = &run.options.seeds_out {
            println!(
                "{seeds} seeds ({policy}, {seeds_s:.1} s) written to {}",
                p.display()
            );
        }
        return Ok(());
    };

    // Outputs.
    let (c, wall, out_spec) = (&seg.counters, done.seconds, &run.options.out);
    let report = InferReport::new(&run, &done, seg);
    let info_path = args.info_out.unwrap_or_else(|| default_info_path(out_spec));
    report.write_info(&info_path)?;
    if args.json {
        println!("{}", report.summary);
    } else {
        println!(
            "{out_spec}: {} segments covering {:.1}% of {} x {} x {} voxels (x,y,z)",
            seg.agglomeration
                .as_ref()
                .map_or(c.segments, |a| a.segments_after),
            100.0 * c.voxels_segmented as f64 / total_voxels,
            shape[2],
            shape[1],
            shape[0]
        );
        println!(
            "  {seeds} seeds ({policy}, {seeds_s:.1} s): {} tried, {} too small, {} weak, {} near a segment, {} invalid",
            c.seeds_done - c.seeds_invalid - c.seeds_near_segment - c.seeds_marked_failed,
            c.seeds_too_small,
            c.seeds_weak,
            c.seeds_near_segment,
            c.seeds_invalid
        );
        println!(
            "  {} predict calls in {:.1} s ({:.2}/s); origins and counters in {}",
            c.predict_calls,
            wall,
            c.predict_calls as f64 / wall.max(1e-9),
            info_path.display()
        );
        if let Some(a) = &seg.agglomeration {
            println!(
                "  agglomeration: {} of {} tested pairs joined ({} touching, {} already joined through others), {} segments -> {}, {} predict calls",
                a.joined_pairs,
                a.tested_pairs,
                a.touching_pairs,
                a.already_joined_pairs,
                a.segments_before,
                a.segments_after,
                a.predictions
            );
        }
    }
    Ok(())
}
