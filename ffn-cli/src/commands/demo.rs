//! `ffn demo`: the whole pipeline in one command, on data that needs no download.
//!
//! 1. data: two synthetic volumes from `ffn synth` (one to train on, a held-out one to segment), or a
//!    real volume given with `--image/--labels`, split along z (first 60% train, the rest held out);
//! 2. partitions and class-balanced coordinates of the training part;
//! 3. training of a small network for `--train-minutes`;
//! 4. flood-fill segmentation of the held-out part (PolicyPeaks seeds);
//! 5. evaluation against its labels (VI split/merge, adapted Rand error), a PNG overlay of the
//!    middle slice (image | truth | segmentation) and the training curve.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use ffn_core::inference::{Canvas, InferenceOptions, Predictor, seeds};
use ffn_core::metrics::{MetricOptions, evaluate};
use ffn_core::network::ConvStack3d;
use ffn_core::synth::{SynthConfig, generate};
use ffn_core::training::coordinates::{CoordinateConfig, build_coordinates};
use ffn_core::training::partitions::{PartitionConfig, compute_partitions};
use ffn_io::VolumeSpec;
use ffn_io::coords::{CoordinateFile, write_coords};
use ndarray::{Array3, s};

use super::partitions::parse_xyz;
use super::train;
use crate::plot;

/// Arguments of `ffn demo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output folder.
    #[arg(long, default_value = "demo_out")]
    pub out: PathBuf,
    /// A real image volume FILE:DATASET instead of synthetic data (needs --labels).
    #[arg(long, requires = "labels")]
    pub image: Option<VolumeSpec>,
    /// Labels of --image, FILE:DATASET.
    #[arg(long, requires = "image")]
    pub labels: Option<VolumeSpec>,
    /// Training time budget in minutes.
    #[arg(long, default_value_t = 4.0)]
    pub train_minutes: f64,
    /// Step limit of the training (the time budget usually ends it first).
    #[arg(long, default_value_t = 100_000)]
    pub max_steps: u64,
    /// Size x,y,z of each synthetic volume.
    #[arg(long, default_value = "64,64,64")]
    pub size: String,
    /// Neurites per synthetic volume (default: one per 20^3 voxels).
    #[arg(long)]
    pub neurites: Option<usize>,
    /// Network depth.
    #[arg(long, default_value_t = 3)]
    pub depth: usize,
    /// Feature maps.
    #[arg(long, default_value_t = 16)]
    pub features: usize,
    /// FOV x,y,z.
    #[arg(long, default_value = "11,11,11")]
    pub fov: String,
    /// FOV movement step x,y,z.
    #[arg(long, default_value = "3,3,3")]
    pub deltas: String,
    /// Batch size.
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 0.001)]
    pub learning_rate: f32,
    /// Smallest object kept in partitions (voxels).
    #[arg(long, default_value_t = 500)]
    pub min_size: usize,
    /// Smallest segment kept by inference (voxels).
    #[arg(long, default_value_t = 100)]
    pub min_segment_size: usize,
    /// Segment only a centred crop x,y,z of the held-out part (bounds inference time on large volumes).
    #[arg(long)]
    pub test_crop: Option<String>,
    /// Seed of data, weights and sampling.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The trained network as an inference predictor.
struct NetPredictor(ConvStack3d);

impl Predictor for NetPredictor {
    fn fov(&self) -> [usize; 3] {
        self.0.config().fov
    }
    fn predict(&mut self, image: &[f32], seed: &[f32], out: &mut [f32]) {
        self.0.forward(image, seed, 1, out);
    }
    fn predict_batch(&mut self, image: &[f32], seed: &[f32], batch: usize, out: &mut [f32]) {
        self.0.forward(image, seed, batch, out);
    }
}

fn spec(file: &std::path::Path, ds: &str) -> VolumeSpec {
    VolumeSpec::new(file, ds)
}

/// Runs `ffn demo`.
pub fn run(args: Args) -> Result<()> {
    let t_all = Instant::now();
    let out = &args.out;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let data = out.join("data.h5");
    let fov = parse_xyz(&args.fov).context("--fov")?;
    let deltas = parse_xyz(&args.deltas).context("--deltas")?;
    let radius = [0, 1, 2].map(|d| fov[d] / 2 + deltas[d]);

    // 1. Data.
    println!("[1/5] data");
    let (train_img, train_lab, test_img, test_lab) = match (&args.image, &args.labels) {
        (Some(i), Some(l)) => {
            let img = ffn_io::read_image_u8(i)?;
            let lab = ffn_io::read_labels(l)?;
            ffn_io::check_same_shape(i, img.shape(), l, lab.shape())?;
            let nz = img.dim().0;
            let cut = nz * 3 / 5;
            ensure!(
                cut > 2 * radius[0] && nz - cut > fov[0],
                "{i}: {nz} z-slices are too few to split into a training part (> {}) and a test part (> {})",
                2 * radius[0],
                fov[0]
            );
            println!("      {i}: train on z < {cut}, segment z >= {cut}");
            (
                img.slice(s![..cut, .., ..]).to_owned(),
                lab.slice(s![..cut, .., ..]).to_owned(),
                img.slice(s![cut.., .., ..]).to_owned(),
                lab.slice(s![cut.., .., ..]).to_owned(),
            )
        }
        _ => {
            let shape = parse_xyz(&args.size).context("--size")?;
            let vol = shape.iter().product::<usize>() as f64;
            // About one neurite per 20^3 voxels, radii 4-9: objects a few FOVs long.
            let neurites = args
                .neurites
                .unwrap_or(((vol / 8000.0).round() as usize).max(4));
            let cfg = SynthConfig {
                shape,
                neurites,
                radius: (4.0, 9.0),
                seed: args.seed,
                ..SynthConfig::default()
            };
            let a = generate(&cfg)?;
            let b = generate(&SynthConfig {
                seed: args.seed + 1000,
                ..cfg.clone()
            })?;
            println!(
                "      synthetic: two {}x{}x{} (x,y,z) volumes with {neurites} neurites (train seed {}, held-out seed {})",
                shape[2],
                shape[1],
                shape[0],
                args.seed,
                args.seed + 1000
            );
            (a.image, a.labels, b.image, b.labels)
        }
    };
    let (test_img, test_lab) = match &args.test_crop {
        None => (test_img, test_lab),
        Some(c) => {
            let c = parse_xyz(c).context("--test-crop")?;
            let d = [test_img.dim().0, test_img.dim().1, test_img.dim().2];
            let lo = [0, 1, 2].map(|a| d[a].saturating_sub(c[a]) / 2);
            let hi = [0, 1, 2].map(|a| (lo[a] + c[a]).min(d[a]));
            let sl = s![lo[0]..hi[0], lo[1]..hi[1], lo[2]..hi[2]];
            (test_img.slice(sl).to_owned(), test_lab.slice(sl).to_owned())
        }
    };
    for (ds, v) in [("train_image", &train_img), ("test_image", &test_img)] {
        ffn_io::write_image_u8(&spec(&data, ds), v)?;
    }
    for (ds, v) in [("train_labels", &train_lab), ("test_labels", &test_lab)] {
        ffn_io::write_labels(&spec(&data, ds), v)?;
    }

    // 2. Partitions and coordinates.
    println!(
        "[2/5] partitions and coordinates (lom radius {:?} z,y,x)",
        radius
    );
    let pcfg = PartitionConfig {
        lom_radius: radius,
        min_size: args.min_size,
        ..PartitionConfig::default()
    };
    let parts = compute_partitions(train_lab.view(), &pcfg)?;
    ffn_io::write_image_u8(&spec(&data, "train_partitions"), &parts)?;
    let ccfg = CoordinateConfig {
        margin: radius,
        max_per_class: Some(20_000),
    };
    let coords = build_coordinates(
        &[parts.view()],
        &ccfg,
        &mut ffn_core::rng::Rng::new(args.seed),
    )?;
    if coords.is_empty() {
        bail!(
            "no training coordinates: the training volume is smaller than twice the lom radius {radius:?}"
        );
    }
    let coords_path = out.join("train.coords");
    write_coords(
        &coords_path,
        &CoordinateFile {
            volumes: vec!["train".into()],
            coords,
        },
    )?;

    // 3. Training.
    println!(
        "[3/5] training for up to {:.1} min (progress on stderr)",
        args.train_minutes
    );
    let mean_std = ffn_core::inference::mean_stddev(train_img.iter().map(|&v| f32::from(v)));
    let mean_std = (mean_std.0, mean_std.1.max(1e-6));
    let xyz = |v: [usize; 3]| format!("{},{},{}", v[2], v[1], v[0]);
    let train_dir = out.join("train");
    let targs: Vec<String> = [
        "--image".into(),
        format!("train:{}:train_image", data.display()),
        "--labels".into(),
        format!("train:{}:train_labels", data.display()),
        "--coords".into(),
        coords_path.display().to_string(),
        "--out".into(),
        train_dir.display().to_string(),
        "--image-mean".into(),
        mean_std.0.to_string(),
        "--image-stddev".into(),
        mean_std.1.to_string(),
        "--depth".into(),
        args.depth.to_string(),
        "--features".into(),
        args.features.to_string(),
        "--fov".into(),
        xyz(fov),
        "--deltas".into(),
        xyz(deltas),
        "--batch-size".into(),
        args.batch_size.to_string(),
        "--optimizer".into(),
        "adam".into(),
        "--learning-rate".into(),
        args.learning_rate.to_string(),
        "--clip".into(),
        "0".into(),
        "--init-stddev".into(),
        "0.05".into(),
        "--seed".into(),
        args.seed.to_string(),
        "--max-steps".into(),
        args.max_steps.to_string(),
        "--max-seconds".into(),
        ((args.train_minutes * 60.0).round() as u64)
            .max(1)
            .to_string(),
        "--report-every".into(),
        "100".into(),
        "--checkpoint-every".into(),
        "0".into(),
        "--checkpoint-secs".into(),
        "120".into(),
    ]
    .into_iter()
    .collect();
    let targs = train::Args::from_strings(&targs)?;
    let summary = train::train(&targs)?;
    let first = summary.rows.first().cloned();
    let last = summary.rows.last().cloned();

    // 4. Inference on the held-out part.
    println!("[4/5] segmenting the held-out volume");
    let ck = ffn_io::checkpoint::load_checkpoint(&summary.checkpoint)?;
    let mut predictor = NetPredictor(ConvStack3d::from_params(ck.model, ck.params)?);
    let (tz, ty, tx) = test_img.dim();
    let shape = [tz, ty, tx];
    let image: Vec<f32> = test_img
        .iter()
        .map(|&v| ((v as f64 - mean_std.0) / mean_std.1) as f32)
        .collect();
    let opts = InferenceOptions {
        min_segment_size: args.min_segment_size,
        ..InferenceOptions::default()
    };
    let mut canvas = Canvas::new(&image, shape, fov, deltas, opts)
        .map_err(|e| anyhow::anyhow!("inference: {e}"))?;
    let seed_points = seeds::policy_peaks(&image, shape, &seeds::PeaksOptions::default());
    let t_inf = Instant::now();
    let clock = move || t_inf.elapsed().as_secs_f64();
    canvas
        .segment_all(&seed_points, &mut predictor, &clock, &mut |_| {})
        .map_err(|e| anyhow::anyhow!("inference: {e}"))?;
    let seg = canvas.segmentation();
    let n_segments = canvas.origins().len();
    let seg_arr =
        Array3::from_shape_vec((tz, ty, tx), seg.clone()).context("segmentation shape")?;
    ffn_io::write_labels(&spec(&data, "test_segmentation"), &seg_arr)?;
    let inf_secs = t_inf.elapsed().as_secs_f64();

    // 5. Evaluation and figures.
    println!("[5/5] evaluation");
    let truth: Vec<u64> = test_lab.iter().copied().collect();
    let scores = evaluate(&truth, &seg, &MetricOptions::default())
        .map_err(|e| anyhow::anyhow!("evaluation: {e}"))?;
    let unsegmented = seg.iter().filter(|&&v| v == 0).count() as f64 / seg.len().max(1) as f64;
    let z = tz / 2;
    let grey: Vec<u8> = test_img.slice(s![z, .., ..]).iter().copied().collect();
    let gt: Vec<u64> = test_lab.slice(s![z, .., ..]).iter().copied().collect();
    let sg: Vec<u64> = seg_arr.slice(s![z, .., ..]).iter().copied().collect();
    let overlay = out.join("overlay.png");
    plot::slice_overlays(&overlay, tx, ty, &grey, &[&gt, &sg], 3)?;

    println!();
    if let (Some(a), Some(b)) = (&first, &last) {
        println!(
            "training: {} steps, {:.1} examples/s; loss {:.4} -> {:.4}, F1 {:.3} -> {:.3}, accuracy {:.3} -> {:.3}",
            summary.steps,
            summary.examples_per_s,
            a.loss,
            b.loss,
            a.f1,
            b.f1,
            a.accuracy,
            b.accuracy
        );
    }
    println!(
        "segmentation: {n_segments} segments from {} seeds in {inf_secs:.1} s, {:.1}% of voxels unsegmented",
        seed_points.len(),
        100.0 * unsegmented
    );
    println!(
        "scores (truth 0 ignored, unsegmented = one segment): VI split {:.3} bits, VI merge {:.3} bits, \
         VI total {:.3}, adapted Rand error {:.3}",
        scores.voi_split,
        scores.voi_merge,
        scores.voi_split + scores.voi_merge,
        scores.adapted_rand_error
    );
    println!("outputs:");
    println!(
        "  volumes        {} (train_*, test_*, test_segmentation)",
        data.display()
    );
    println!("  checkpoint     {}", summary.checkpoint.display());
    println!("  training log   {}", summary.log.display());
    println!("  training curve {}", summary.curve.display());
    println!(
        "  slice overlay  {} (image | truth | segmentation, z = {z})",
        overlay.display()
    );
    println!("total time {:.1} min", t_all.elapsed().as_secs_f64() / 60.0);
    Ok(())
}
