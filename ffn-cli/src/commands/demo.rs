//! `ffn demo`: the product on real electron microscopy, in one command, on data that ships with the
//! repository (FIB-25 `training_sample2`, `data/fib25/`).
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

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use ffn_comm::data_parallel::DataParallelOptions;
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::ConvStack3d;
use ffn_core::training::coordinates::{CoordinateConfig, build_coordinates};
use ffn_core::training::partitions::{PartitionConfig, compute_partitions};
use ffn_io::VolumeSpec;
use ffn_io::coords::{CoordinateFile, write_coords};
use ffn_io::training::{OptimizerKind, TrainOptions};
use ndarray::s;

use crate::args::parse_xyz;
use ffn_io::heldout::{HeldOut, Scored, context_region};

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
    #[arg(long, default_value_t = 2.0)]
    pub train_minutes: f64,
    /// Step limit of the short run (the time budget usually ends it first).
    #[arg(long, default_value_t = 100_000)]
    pub max_steps: u64,
    /// Network depth of the short run.
    #[arg(long, default_value_t = 6)]
    pub depth: usize,
    /// Feature maps of the short run.
    #[arg(long, default_value_t = 32)]
    pub features: usize,
    /// FOV x,y,z of the short run.
    #[arg(long, default_value = "25,25,25")]
    pub fov: String,
    /// FOV movement step x,y,z of the short run.
    #[arg(long, default_value = "6,6,6")]
    pub deltas: String,
    /// Batch size of the short run.
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Adam learning rate of the short run.
    #[arg(long, default_value_t = 0.001)]
    pub learning_rate: f32,
    /// Smallest segment kept by inference (voxels).
    #[arg(long, default_value_t = 1000)]
    pub min_segment_size: usize,
    /// Seed of weights and sampling.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn spec(file: &Path, ds: &str) -> VolumeSpec {
    VolumeSpec::new(file, ds)
}

/// Runs `ffn demo`.
pub fn run(args: Args) -> Result<()> {
    let t_all = Instant::now();
    let out = &args.out;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let data = out.join("fib25.h5");
    let fov = parse_xyz(&args.fov, "--fov")?;
    let deltas = parse_xyz(&args.deltas, "--deltas")?;
    let radius = [0, 1, 2].map(|d| fov[d] / 2 + deltas[d]);
    for path in [&args.model, &args.data] {
        ensure!(
            path.exists(),
            "{} not found: run `ffn demo` from the repository root, or give --data / --model",
            path.display()
        );
    }

    // 1. Data.
    println!(
        "[1/5] data: FIB-25 training_sample2 from {}",
        args.data.display()
    );
    let maps = args.data.join("grayscale_maps");
    let slices = ffn_io::stack::find_slices(&maps.display().to_string())?;
    let image = ffn_io::stack::read_stack(&slices)?;
    let labels = ffn_io::labels::read_flyem_labels(
        &args.data.join("groundtruth.h5.gz"),
        "stack",
        Some("transforms"),
    )?;
    ensure!(
        image.shape() == labels.shape(),
        "{}: image of shape {:?} but ground truth of shape {:?} (z,y,x)",
        args.data.display(),
        image.shape(),
        labels.shape()
    );
    ffn_io::write_image_u8(&spec(&data, "image"), &image)?;
    ffn_io::write_labels(&spec(&data, "labels"), &labels)?;
    let nz = image.dim().0;
    let (offset, shape) = crate::args::parse_box(
        Some(&args.offset),
        Some(&args.size),
        [nz, image.dim().1, image.dim().2],
        &spec(&data, "image"),
    )?;
    if args.train_z <= 2 * radius[0] || offset[0] < args.train_z {
        bail!(
            "--train-z {} and the box at z = {}: the training part must be thicker than {} slices and the \
             box must lie in z >= --train-z",
            args.train_z,
            offset[0],
            2 * radius[0]
        );
    }
    println!(
        "      train on z < {} ({} voxels); held-out box x,y,z {} of size {}",
        args.train_z,
        args.train_z * image.dim().1 * image.dim().2,
        args.offset,
        args.size
    );
    let train_img = image.slice(s![..args.train_z, .., ..]).to_owned();
    let train_lab = labels.slice(s![..args.train_z, .., ..]).to_owned();
    ffn_io::write_image_u8(&spec(&data, "train_image"), &train_img)?;
    ffn_io::write_labels(&spec(&data, "train_labels"), &train_lab)?;

    // 2. Partitions and coordinates.
    println!("[2/5] partitions and coordinates (lom radius {radius:?} z,y,x)");
    let parts = compute_partitions(
        train_lab.view(),
        &PartitionConfig {
            lom_radius: radius,
            ..PartitionConfig::default()
        },
    )?;
    let coords = build_coordinates(
        &[parts.view()],
        &CoordinateConfig {
            margin: radius,
            max_per_class: Some(20_000),
        },
        &mut ffn_core::rng::Rng::new(args.seed),
    )?;
    let coords_path = out.join("train.coords");
    write_coords(
        &coords_path,
        &CoordinateFile {
            volumes: vec!["train".into()],
            coords,
        },
    )?;

    // 3. A short training run from fresh weights.
    println!(
        "[3/5] training from fresh weights for up to {:.1} min (depth {}, {} features, FOV {}, deltas {}, Adam {})",
        args.train_minutes, args.depth, args.features, args.fov, args.deltas, args.learning_rate
    );
    let train_dir = out.join("train");
    let options = short_run_options(&args, (fov, deltas), &data, &coords_path, &train_dir);
    let summary = ffn_io::training::train(&options, &DataParallelOptions::default(), |_, step| {
        if let Some(row) = &step.row {
            eprintln!("{}", row.csv());
        }
    })?;

    // 4. The held-out box, segmented by the shipped models.
    println!("[4/5] segmenting the held-out box");
    let full = [nz, image.dim().1, image.dim().2];
    let context = context_region(offset, shape, args.context, [args.train_z, 0, 0], full);
    let held = HeldOut::read(
        &spec(&data, "image"),
        &spec(&data, "labels"),
        (offset, shape),
        context,
    )?;
    println!(
        "      inference on the context region x,y,z {},{},{} of size {},{},{} around the box",
        context.0[2], context.0[1], context.0[0], context.1[2], context.1[1], context.1[0]
    );
    let mut runs: Vec<(String, Scored)> = Vec::new();
    let mut models = vec![("ffn-rs model".to_string(), args.model.clone())];
    if let Some(m) = &args.reference_model {
        models.push(("reference model".into(), m.clone()));
    }
    for (name, path) in models {
        let m = ffn_io::load_model(&path).with_context(|| format!("loading {}", path.display()))?;
        let net = ConvStack3d::from_params(m.config, m.params)?;
        let scored = held.segment(net, m.normalisation, args.min_segment_size)?;
        println!(
            "      {name} ({}): {} segments in {:.1} s",
            path.display(),
            scored.segments,
            scored.seconds
        );
        let arr = ndarray::Array3::from_shape_vec(
            (shape[0], shape[1], shape[2]),
            scored.segmentation.clone(),
        )?;
        let ds = if runs.is_empty() {
            "seg_ffn_rs"
        } else {
            "seg_reference_model"
        };
        ffn_io::write_labels(&spec(&data, ds), &arr)?;
        runs.push((name, scored));
    }
    if args.reference != "none" {
        let published: VolumeSpec = args.reference.parse().context("--reference")?;
        let seg = ffn_io::read_labels_region(&published, offset, shape)
            .with_context(|| format!("--reference {published}"))?;
        runs.push((
            "Google published".into(),
            held.score(seg.iter().copied().collect())?,
        ));
        println!("      Google's published segmentation ({published}), cropped to the box");
    }

    // 5. Scores and figures.
    println!("[5/5] evaluation");
    let z = shape[0] / 2;
    let plane = shape[1] * shape[2];
    let grey = held.box_slice(z);
    let mut panels: Vec<&[u64]> = vec![&held.truth[z * plane..(z + 1) * plane]];
    for (_, r) in &runs {
        panels.push(&r.segmentation[z * plane..(z + 1) * plane]);
    }
    let overlay = out.join("overlay.png");
    let (rgb, w, h) = ffn_core::segmentation::overlay::overlay_panels(
        &grey, &panels, shape[2], shape[1], 0.5, 3, 4,
    )
    .context("drawing the overlay")?;
    ffn_io::write_rgb_png(&overlay, w, h, &rgb)?;

    println!();
    if let (Some(a), Some(b)) = (summary.rows.first(), summary.rows.last()) {
        println!(
            "short training run: {} steps ({} examples) at {:.1} examples/s; loss {:.3} -> {:.3}, F1 {:.3} -> {:.3}",
            summary.steps,
            summary.steps * args.batch_size as u64,
            summary.examples_per_s,
            a.loss,
            b.loss,
            a.f1,
            b.f1
        );
    }
    println!(
        "held-out box (x,y,z {} size {}, z >= {}; truth 0 ignored, unsegmented counted as one segment):",
        args.offset, args.size, args.train_z
    );
    println!(
        "  {:<16} {:>8} {:>12} {:>9} {:>9} {:>7}",
        "model", "segments", "unsegmented", "VI split", "VI merge", "ARAND"
    );
    for (name, r) in &runs {
        println!(
            "  {:<16} {:>8} {:>11.1}% {:>9.3} {:>9.3} {:>7.3}",
            name,
            r.segments,
            100.0 * r.unsegmented,
            r.scores.voi_split,
            r.scores.voi_merge,
            r.scores.adapted_rand_error
        );
    }
    println!("outputs:");
    println!(
        "  volumes        {} (image, labels, train_*, seg_ffn_rs{})",
        data.display(),
        if args.reference_model.is_some() {
            ", seg_reference_model"
        } else {
            ""
        }
    );
    println!("  training log   {}", summary.log.display());
    println!("  training curve {}", summary.curve.display());
    println!(
        "  slice overlay  {} (image | truth | {}; z = {} of the box)",
        overlay.display(),
        runs.iter()
            .map(|r| r.0.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
        z
    );
    println!("total time {:.1} min", t_all.elapsed().as_secs_f64() / 60.0);
    Ok(())
}

/// The short training run of step 3: fresh weights, Adam, fixed normalisation 128 / 33, rows
/// every 25 steps, one checkpoint at the end.
fn short_run_options(
    args: &Args,
    (fov, deltas): ([usize; 3], [usize; 3]),
    data: &Path,
    coords: &Path,
    out: &Path,
) -> TrainOptions {
    let spec = |ds: &str| {
        (
            "train".to_string(),
            VolumeSpec {
                path: data.to_path_buf(),
                dataset: ds.to_string(),
            },
        )
    };
    let model = ModelConfig {
        depth: args.depth,
        features: args.features,
        fov,
        deltas,
    };
    TrainOptions {
        image_mean: Some(vec![128.0]),
        image_stddev: Some(vec![33.0]),
        batch_size: args.batch_size,
        optimizer: OptimizerKind::Adam,
        learning_rate: args.learning_rate,
        seed: args.seed,
        max_steps: args.max_steps,
        max_seconds: ((args.train_minutes * 60.0).round() as u64).max(1),
        report_every: 25,
        checkpoint_every: 0,
        checkpoint_secs: 0,
        ..TrainOptions::new(
            vec![spec("train_image")],
            vec![spec("train_labels")],
            coords,
            out,
            model,
        )
    }
}
