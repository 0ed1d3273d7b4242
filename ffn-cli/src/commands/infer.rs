//! `ffn infer`: flood-filling inference of one volume (or a crop of it) with a trained model.
//!
//! The work is [`ffn_io::infer_volume`] (read, normalise, [`ffn_core::inference::segment`],
//! write); this module turns flags and the request into its options and prints the summary.
//!
//! Settings come from flags, optionally over a google/ffn `InferenceRequest` (`--request
//! file.pbtxt`): flags win. Outputs: the segmentation (smallest unsigned type that fits), a JSON
//! file with origins and counters, and optionally the quantised probability map.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use ffn_core::inference::seeds::PeaksOptions;
use ffn_core::inference::{Counters, InferenceOptions, SeedPolicy, SegmentOptions};
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::ConvStack3d;
use ffn_io::tile_store::write_atomic;
use ffn_io::{
    InferEvent, InferOptions, InferenceRequest, NormalisationChoice, VolumeSpec, infer_volume,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use crate::args::parse_xyz;

/// Arguments of `ffn infer`.
#[derive(clap::Args, Debug)]
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
    /// Probability needed to move the FOV [request, else 0.9].
    #[arg(long)]
    move_threshold: Option<f32>,
    /// Probability at which voxels join the segment [request, else 0.6].
    #[arg(long)]
    segment_threshold: Option<f32>,
    /// Smallest segment kept, voxels [request, else 1000].
    #[arg(long)]
    min_segment_size: Option<usize>,
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
    /// Convolution algorithm of the 3x3x3 layers: `winograd` (F(4,3) along x, about 1.8x fewer
    /// multiply-adds, rounding differences of order 1e-7; on AVX2 CPUs for layers of 32k channels,
    /// the others run direct) or `direct`.
    #[arg(long, default_value = "winograd", value_parser = super::parse_conv_algorithm)]
    pub conv: ffn_core::conv::winograd::ConvAlgorithm,
}

fn policy_args_usize(req: Option<&InferenceRequest>, key: &str) -> Result<Option<usize>> {
    let Some(v) = req
        .and_then(|r| r.seed_policy_args.as_ref())
        .and_then(|a| a.get(key))
    else {
        return Ok(None);
    };
    let n = v.as_u64().with_context(|| {
        format!("request seed_policy_args.{key}: expected a non-negative integer, found {v}")
    })?;
    Ok(Some(n as usize))
}

fn read_seed_list(path: &Path, offset: [usize; 3], shape: [usize; 3]) -> Result<Vec<[usize; 3]>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading seeds from {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let p = parse_xyz(l, &format!("{}:{}", path.display(), n + 1))?;
        if (0..3).any(|a| p[a] < offset[a] || p[a] >= offset[a] + shape[a]) {
            bail!(
                "{}:{}: seed {l} lies outside the segmented box {},{},{} + {} x {} x {} (x,y,z)",
                path.display(),
                n + 1,
                offset[2],
                offset[1],
                offset[0],
                shape[2],
                shape[1],
                shape[0]
            );
        }
        out.push([p[0] - offset[0], p[1] - offset[1], p[2] - offset[2]]);
    }
    Ok(out)
}

fn default_info_path(out: &VolumeSpec) -> PathBuf {
    let stem = out
        .path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ds = out.dataset.trim_matches('/').replace('/', "_");
    out.path.with_file_name(format!("{stem}.{ds}.json"))
}

fn counters_json(c: &Counters) -> Value {
    json!({
        "predict_calls": c.predict_calls,
        "seeds_total": c.seeds_total,
        "seeds_done": c.seeds_done,
        "seeds_invalid": c.seeds_invalid,
        "seeds_marked_failed": c.seeds_marked_failed,
        "seeds_near_segment": c.seeds_near_segment,
        "seeds_weak": c.seeds_weak,
        "seeds_too_small": c.seeds_too_small,
        "seeds_no_iterations": c.seeds_no_iterations,
        "segments": c.segments,
        "voxels_segmented": c.voxels_segmented,
        "voxels_overlapping": c.voxels_overlapping,
        "skip_threshold": c.skip_threshold,
        "skip_invalid_pos": c.skip_invalid_pos,
        "seed_got_too_weak": c.seed_got_too_weak,
    })
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
    let image_spec: VolumeSpec = match (
        &args.image,
        req.as_ref().and_then(|r| r.image_hdf5.as_ref()),
    ) {
        (Some(s), _) => s.parse().context("--image")?,
        (None, Some(s)) => s.parse().context("request image.hdf5")?,
        (None, None) => bail!(
            "no image: give --image FILE.h5:DATASET (or a request with image {{ hdf5: ... }})"
        ),
    };
    let ckpt: PathBuf = match (
        &args.checkpoint,
        req.as_ref().and_then(|r| r.model_checkpoint_path.as_ref()),
    ) {
        (Some(p), _) => p.clone(),
        (None, Some(p)) => PathBuf::from(p),
        (None, None) => {
            bail!("no model: give --checkpoint PATH (or a request with model_checkpoint_path)")
        }
    };
    let out_spec: VolumeSpec = args.out.parse().context("--out")?;
    let prob_spec: Option<VolumeSpec> = args
        .prob_out
        .as_deref()
        .map(str::parse)
        .transpose()
        .context("--prob-out")?;

    // Model.
    let loaded = ffn_io::load_model(&ckpt)
        .with_context(|| format!("loading the model {}", ckpt.display()))?;
    let (ck_cfg, params, trained_norm) = (loaded.config, loaded.params, loaded.normalisation);
    let cfg: ModelConfig = match (&req, &args.request) {
        (Some(r), Some(p)) => {
            let c = r.model_config(ck_cfg, p)?;
            if c.depth != ck_cfg.depth {
                bail!(
                    "request {}: model_args.depth is {} but the checkpoint {} holds a depth-{} network",
                    p.display(),
                    c.depth,
                    ckpt.display(),
                    ck_cfg.depth
                );
            }
            c
        }
        _ => ck_cfg,
    };
    let mut net = ConvStack3d::from_params(cfg, params)
        .map_err(|e| anyhow::anyhow!("{}: {e}", ckpt.display()))?;
    net.set_conv_algorithm(args.conv);

    // The box, the options (defaults < request < flags) and the seeds.
    let full = ffn_io::dataset_shape(&image_spec)?;
    let (offset, shape) = parse_box(
        args.offset.as_deref(),
        args.size.as_deref(),
        full,
        &image_spec,
    )?;
    let mut opts = req.as_ref().map(|r| r.options.clone()).unwrap_or_default();
    if let Some(v) = args.init_activation {
        opts.init_activation = v;
    }
    if let Some(v) = args.pad_value {
        opts.pad_value = v;
    }
    if let Some(v) = args.move_threshold {
        opts.move_threshold = v;
    }
    if let Some(v) = args.segment_threshold {
        opts.segment_threshold = v;
    }
    if let Some(v) = args.min_segment_size {
        opts.min_segment_size = v;
    }
    if let Some(v) = &args.min_boundary_dist {
        opts.min_boundary_dist = parse_xyz(v, "--min-boundary-dist")?;
    }
    if args.no_disco {
        opts.disco_seed_threshold = -1.0;
    }
    let opts_json = options_json(&opts);
    let policy = match (
        &args.seeds,
        &args.seed_policy,
        req.as_ref().and_then(|r| r.seed_policy.as_deref()),
    ) {
        (Some(_), _, _) => "list".to_string(),
        (None, Some(p), _) => p.clone(),
        (None, None, Some(p)) => p.to_string(),
        _ => "peaks".to_string(),
    };
    let seed_policy = match policy.as_str() {
        "peaks" | "PolicyPeaks" => SeedPolicy::Peaks(PeaksOptions::default()),
        "grid" | "PolicyGrid3d" => {
            let step = args
                .grid_step
                .or(policy_args_usize(req.as_ref(), "step")?)
                .unwrap_or(16);
            if step == 0 {
                bail!("--grid-step 0 (or request seed_policy_args.step): expected at least 1");
            }
            SeedPolicy::Grid { step }
        }
        "list" => {
            let p = args
                .seeds
                .as_ref()
                .context("--seed-policy list needs --seeds FILE")?;
            SeedPolicy::List(read_seed_list(p, offset, shape)?)
        }
        other => bail!(
            "seed policy {other:?}: expected peaks (PolicyPeaks), grid (PolicyGrid3d) or list"
        ),
    };
    let infer_opts = InferOptions {
        image: image_spec.clone(),
        out: out_spec.clone(),
        prob_out: prob_spec,
        region: Some((offset, shape)),
        normalisation: NormalisationChoice {
            given: (args.image_mean, args.image_stddev),
            request: (
                req.as_ref().and_then(|r| r.image_mean),
                req.as_ref().and_then(|r| r.image_stddev),
            ),
            trained: trained_norm,
        },
        segment: SegmentOptions {
            deltas: cfg.deltas,
            seeds: seed_policy,
            inference: opts,
        },
        seeds_out: args.seeds_out.clone(),
        seeds_only: args.seeds_only,
    };

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
    let done = infer_volume(&infer_opts, &mut net, &mut on_event)?;
    bar.finish_and_clear();
    let (seeds, seeds_s) = (done.seeds.len(), done.seed_seconds);
    let Some(seg) = done.segmentation else {
        if let Some(p) = &args.seeds_out {
            println!(
                "{seeds} seeds ({policy}, {seeds_s:.1} s) written to {}",
                p.display()
            );
        }
        return Ok(());
    };
    let (wall, norm) = (done.seconds, &done.normalisation);

    // Outputs.
    let c = seg.counters;
    let xyz = |p: [usize; 3]| json!([p[2] + offset[2], p[1] + offset[1], p[0] + offset[0]]);
    let origins: Vec<Value> = seg
        .origins
        .iter()
        .map(|o| json!({"id": o.id, "seed_xyz": xyz(o.seed), "iterations": o.iterations, "time_s": o.time_s, "voxels": o.voxels}))
        .collect();
    let summary = json!({
        "image": image_spec.to_string(),
        "checkpoint": ckpt.display().to_string(),
        "output": out_spec.to_string(),
        "conv": args.conv.name(),
        "model": {"depth": cfg.depth, "features": cfg.features,
                  "fov_xyz": [cfg.fov[2], cfg.fov[1], cfg.fov[0]], "deltas_xyz": [cfg.deltas[2], cfg.deltas[1], cfg.deltas[0]]},
        "offset_xyz": [offset[2], offset[1], offset[0]],
        "size_xyz": [shape[2], shape[1], shape[0]],
        "image_mean": norm.mean,
        "image_stddev": norm.stddev,
        "image_normalisation_source": norm.source,
        "options": opts_json,
        "seed_policy": policy,
        "seeds": seeds,
        "seed_policy_s": seeds_s,
        "segments": c.segments,
        "voxels_segmented_fraction": c.voxels_segmented as f64 / total_voxels,
        "predict_calls": c.predict_calls,
        "wall_time_s": wall,
        "predict_calls_per_s": c.predict_calls as f64 / wall.max(1e-9),
        "counters": counters_json(&c),
        "ignored_request_fields": req.as_ref().map(|r| r.ignored.clone()).unwrap_or_default(),
    });
    let info_path = args
        .info_out
        .clone()
        .unwrap_or_else(|| default_info_path(&out_spec));
    let mut info = summary.clone();
    info["origins"] = Value::Array(origins);
    write_atomic(
        &info_path,
        (serde_json::to_string_pretty(&info)? + "\n").as_bytes(),
    )?;
    if args.json {
        println!("{summary}");
    } else {
        println!(
            "{out_spec}: {} segments covering {:.1}% of {} x {} x {} voxels (x,y,z)",
            c.segments,
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
    }
    Ok(())
}

fn options_json(o: &InferenceOptions) -> Value {
    json!({
        "init_activation": o.init_activation,
        "pad_value": o.pad_value,
        "move_threshold": o.move_threshold,
        "segment_threshold": o.segment_threshold,
        "min_segment_size": o.min_segment_size,
        "min_boundary_dist_xyz": [o.min_boundary_dist[2], o.min_boundary_dist[1], o.min_boundary_dist[0]],
        "disco_seed_threshold": o.disco_seed_threshold,
    })
}

/// The box `(offset, size)` (z,y,x) of `--offset X,Y,Z --size X,Y,Z` inside a volume of shape
/// `full`; the whole volume without either flag. One flag without the other, an empty box or a
/// box that does not fit is an error naming the flags and the volume.
pub(crate) fn parse_box(
    offset: Option<&str>,
    size: Option<&str>,
    full: [usize; 3],
    volume: &dyn std::fmt::Display,
) -> Result<([usize; 3], [usize; 3])> {
    match (offset, size) {
        (Some(o), Some(s)) => {
            let o = parse_xyz(o, "--offset")?;
            let s = parse_xyz(s, "--size")?;
            if (0..3).any(|a| o[a] + s[a] > full[a] || s[a] == 0) {
                bail!(
                    "--offset/--size: the box {:?} + {:?} (z,y,x) does not fit in {volume} of shape {:?} (z,y,x)",
                    o,
                    s,
                    full
                );
            }
            Ok((o, s))
        }
        (None, None) => Ok(([0; 3], full)),
        _ => bail!("--offset and --size go together: give both or neither"),
    }
}
