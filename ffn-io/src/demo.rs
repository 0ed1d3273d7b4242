//! The product on real electron microscopy in one call (what `ffn demo` runs), on the FIB-25
//! `training_sample2` data that ships with the repository (`data/fib25/`).
//!
//! 1. data: the image and ground truth imported; z < `train_z` is the training part, a box in
//!    z >= `train_z` is held out;
//! 2. partitions and class-balanced coordinates of the training part;
//! 3. a short training run from fresh weights on the training part: its curve shows the network
//!    learning;
//! 4. the held-out box segmented by flood filling (PolicyPeaks seeds, on a context region around
//!    the box within the held-out part) with the shipped ffn-rs model (and optionally a live
//!    reference model); a published segmentation of the volume for comparison;
//! 5. all scored on the box against the ground truth, and a PNG of the box's middle slice
//!    (image | truth | each segmentation).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::flyem_sample::FlyEmSample;
use anyhow::{Context, Result, bail, ensure};
use ffn_comm::data_parallel::{DataParallel, DataParallelOptions};
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::{ConvStack3d, WeightInit};
use ffn_core::training::coordinates::{CoordinateConfig, build_coordinates};
use ffn_core::training::partitions::{PartitionConfig, compute_partitions};
use ndarray::s;

use crate::VolumeSpec;
use crate::coords::{CoordinateFile, write_coords};
use crate::heldout::{HeldOut, Scored, context_region};
use crate::training::{LogRow, OptimizerKind, Summary, TrainOptions, TrainingRun};

/// What the demo does; [`DemoOptions::new`] gives `ffn demo`'s defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoOptions {
    /// Output folder.
    pub out: PathBuf,
    /// The FIB-25 folder: `grayscale_maps/*.png` and `groundtruth.h5.gz`.
    pub data: PathBuf,
    /// The model trained by ffn-rs that segments the held-out box.
    pub model: PathBuf,
    /// A published segmentation of the whole volume, scored on the same box.
    pub reference: Option<VolumeSpec>,
    /// A model also run live on the box, with the same context.
    pub reference_model: Option<PathBuf>,
    /// Inference runs on the box grown by this many voxels on every side (within z >= `train_z`).
    pub context: usize,
    /// Training part: z below this slice.
    pub train_z: usize,
    /// First voxel of the held-out box, z,y,x (z >= `train_z`).
    pub offset: [usize; 3],
    /// Size of the held-out box, z,y,x.
    pub size: [usize; 3],
    /// Training time budget of the short run, minutes.
    pub train_minutes: f64,
    /// Step limit of the short run (the time budget usually ends it first).
    pub max_steps: u64,
    /// Network of the short run.
    pub model_config: ModelConfig,
    /// Batch size of the short run.
    pub batch_size: usize,
    /// Adam learning rate of the short run (weights drawn Glorot-uniform, as the shipped model's).
    pub learning_rate: f32,
    /// Smallest segment kept by inference (voxels) [each model's recorded inference settings
    /// ([`crate::inference_defaults`]), else google/ffn's 1000].
    pub min_segment_size: Option<usize>,
    /// Seed of weights and sampling.
    pub seed: u64,
}

/// Default training time budget of the demo's short run, minutes: with the shipped model's
/// segmentation of the held-out box (about 3.7 minutes on 2 AVX2-only cores) the demo stays within
/// about 6 minutes after the build.
pub const DEFAULT_TRAIN_MINUTES: f64 = 1.5;

impl DemoOptions {
    /// `ffn demo`'s defaults, with outputs under `out`, run from the repository root.
    pub fn new(out: impl Into<PathBuf>) -> Self {
        Self {
            out: out.into(),
            data: "data/fib25".into(),
            model: "models/ffn-rs-fib25/model.safetensors".into(),
            reference: Some(VolumeSpec::new(
                "data/google-fib25/segmentation.h5",
                "segmentation",
            )),
            reference_model: None,
            context: 24,
            train_z: 150,
            offset: [160, 30, 140],
            size: [80, 80, 80],
            train_minutes: DEFAULT_TRAIN_MINUTES,
            max_steps: 100_000,
            model_config: ModelConfig {
                depth: 5,
                features: 32,
                fov: [17, 17, 17],
                deltas: [4, 4, 4],
            },
            batch_size: 4,
            learning_rate: 0.0003,
            min_segment_size: None,
            seed: 1,
        }
    }
}

/// Progress of [`run_demo`].
pub enum DemoEvent<'a> {
    /// A line describing the stage now running or what it found.
    Note(String),
    /// A metrics row of the short training run.
    TrainRow(&'a LogRow),
}

/// One segmentation of the held-out box, scored.
pub struct DemoRun {
    /// "ffn-rs model", "reference model" or "Google published".
    pub name: String,
    /// The segmentation and its scores.
    pub scored: Scored,
}

/// What the demo produced.
pub struct DemoReport {
    /// The short training run.
    pub training: Summary,
    /// The segmentations of the held-out box, scored.
    pub runs: Vec<DemoRun>,
    /// The volumes file (image, labels, train_*, seg_*).
    pub volumes: PathBuf,
    /// The slice overlay PNG.
    pub overlay: PathBuf,
    /// z of the overlay's slice, inside the box.
    pub overlay_z: usize,
    /// Wall-clock seconds of the whole demo.
    pub seconds: f64,
}

fn xyz(p: [usize; 3]) -> String {
    format!("{},{},{}", p[2], p[1], p[0])
}

/// Runs the demo of the module's documentation; `on_event` sees its progress.
pub fn run_demo(opts: &DemoOptions, on_event: &mut dyn FnMut(DemoEvent<'_>)) -> Result<DemoReport> {
    let t_all = Instant::now();
    let out = &opts.out;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let data = out.join("fib25.h5");
    let spec = |ds: &str| VolumeSpec::new(&data, ds);
    let cfg = opts.model_config;
    let radius = [0, 1, 2].map(|d| cfg.fov[d] / 2 + cfg.deltas[d]);
    for path in [&opts.model, &opts.data] {
        ensure!(
            path.exists(),
            "{} not found: run `ffn demo` from the repository root, or give --data / --model",
            path.display()
        );
    }

    // 1. Data.
    on_event(DemoEvent::Note(format!(
        "[1/5] data: FIB-25 training_sample2 from {}",
        opts.data.display()
    )));
    let FlyEmSample { image, labels } = FlyEmSample::read(&opts.data)?;
    let full = [image.dim().0, image.dim().1, image.dim().2];
    crate::write_image_u8(&spec("image"), &image)?;
    crate::write_labels(&spec("labels"), &labels)?;
    let (offset, shape) = (opts.offset, opts.size);
    crate::xyz::check_box(offset, shape, full, &spec("image"))?;
    if opts.train_z <= 2 * radius[0] || offset[0] < opts.train_z {
        bail!(
            "--train-z {} and the box at z = {}: the training part must be thicker than {} slices and the \
             box must lie in z >= --train-z",
            opts.train_z,
            offset[0],
            2 * radius[0]
        );
    }
    on_event(DemoEvent::Note(format!(
        "      train on z < {} ({} voxels); held-out box x,y,z {} of size {}",
        opts.train_z,
        opts.train_z * full[1] * full[2],
        xyz(offset),
        xyz(shape)
    )));
    let train_lab = labels.slice(s![..opts.train_z, .., ..]).to_owned();
    let train_img = image.slice(s![..opts.train_z, .., ..]).to_owned();
    crate::write_image_u8(&spec("train_image"), &train_img)?;
    crate::write_labels(&spec("train_labels"), &train_lab)?;

    // 2. Partitions and coordinates.
    on_event(DemoEvent::Note(format!(
        "[2/5] partitions and coordinates (lom radius {radius:?} z,y,x)"
    )));
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
        &mut ffn_core::rng::Rng::new(opts.seed),
    )?;
    let coords_path = out.join("train.coords");
    let volumes = vec!["train".into()];
    write_coords(&coords_path, &CoordinateFile { volumes, coords })?;

    // 3. A short training run from fresh weights.
    on_event(DemoEvent::Note(format!(
        "[3/5] training from fresh weights for up to {:.1} min (depth {}, {} features, FOV {}, deltas {}, Adam {})",
        opts.train_minutes,
        cfg.depth,
        cfg.features,
        xyz(cfg.fov),
        xyz(cfg.deltas),
        opts.learning_rate
    )));
    let train_opts = short_run_options(opts, &data, &coords_path, &out.join("train"));
    let group = DataParallel::single(&DataParallelOptions::default());
    let training = TrainingRun::new(train_opts, &group)?.run(|_, step| {
        if let Some(row) = &step.row {
            on_event(DemoEvent::TrainRow(row));
        }
    })?;
    group.finish()?;

    // 4. The held-out box, segmented.
    on_event(DemoEvent::Note("[4/5] segmenting the held-out box".into()));
    let context = context_region(offset, shape, opts.context, [opts.train_z, 0, 0], full);
    let held = HeldOut::read(&spec("image"), &spec("labels"), (offset, shape), context)?;
    on_event(DemoEvent::Note(format!(
        "      inference on the context region x,y,z {} of size {} around the box",
        xyz(context.0),
        xyz(context.1)
    )));
    let mut runs: Vec<DemoRun> = Vec::new();
    let mut models = vec![("ffn-rs model", &opts.model, "seg_ffn_rs")];
    if let Some(m) = &opts.reference_model {
        models.push(("reference model", m, "seg_reference_model"));
    }
    for (name, path, dataset) in models {
        let m = crate::load_model(path).with_context(|| format!("loading {}", path.display()))?;
        let net = ConvStack3d::from_params(m.config, m.params)?;
        let recorded = m.inference_defaults.unwrap_or_default();
        let mut inference = recorded.options();
        let mut settings = match recorded.is_empty() {
            true => "google/ffn's inference defaults".to_string(),
            false => format!("inference settings recorded with the model: {recorded}"),
        };
        if let Some(n) = opts.min_segment_size {
            inference.min_segment_size = n;
            settings += &format!(", min segment size {n} from --min-segment-size");
        }
        let scored = held.segment(net, m.normalisation, &inference, None)?;
        on_event(DemoEvent::Note(format!(
            "      {name} ({}; {settings}): {} segments in {:.1} s",
            path.display(),
            scored.segments,
            scored.seconds
        )));
        let arr = ndarray::Array3::from_shape_vec(shape, scored.segmentation.clone())?;
        crate::write_labels(&spec(dataset), &arr)?;
        runs.push(DemoRun {
            name: name.into(),
            scored,
        });
    }
    if let Some(published) = &opts.reference {
        let seg = crate::read_labels_region(published, offset, shape)
            .with_context(|| format!("--reference {published}"))?;
        let scored = held.score(seg.iter().copied().collect())?;
        let name = "Google published".into();
        runs.push(DemoRun { name, scored });
        on_event(DemoEvent::Note(format!(
            "      Google's published segmentation ({published}), cropped to the box"
        )));
    }

    // 5. Figures.
    on_event(DemoEvent::Note("[5/5] evaluation".into()));
    let z = shape[0] / 2;
    let plane = shape[1] * shape[2];
    let grey = held.box_slice(z);
    let mut panels: Vec<&[u64]> = vec![&held.truth[z * plane..(z + 1) * plane]];
    for r in &runs {
        panels.push(&r.scored.segmentation[z * plane..(z + 1) * plane]);
    }
    let overlay = out.join("overlay.png");
    let (rgb, w, h) = ffn_core::segmentation::overlay::overlay_panels(
        &grey, &panels, shape[2], shape[1], 0.5, 3, 4,
    )
    .context("drawing the overlay")?;
    crate::write_rgb_png(&overlay, w, h, &rgb)?;
    Ok(DemoReport {
        training,
        runs,
        volumes: data,
        overlay,
        overlay_z: z,
        seconds: t_all.elapsed().as_secs_f64(),
    })
}

impl DemoReport {
    /// The closing report: the short run, the score table of the held-out box, the outputs.
    pub fn text(&self, opts: &DemoOptions) -> String {
        let mut t = String::new();
        let rows = &self.training.rows;
        if let (Some(a), Some(b)) = (rows.first(), rows.last()) {
            let steps = self.training.steps;
            let _ = writeln!(
                t,
                "short training run: {steps} steps ({} examples) at {:.1} examples/s; loss {:.3} -> {:.3}, F1 {:.3} -> {:.3}",
                steps * opts.batch_size as u64,
                self.training.examples_per_s,
                a.loss,
                b.loss,
                a.f1,
                b.f1
            );
        }
        let _ = writeln!(
            t,
            "held-out box (x,y,z {} size {}, z >= {}; truth 0 ignored, unsegmented counted as one segment):",
            xyz(opts.offset),
            xyz(opts.size),
            opts.train_z
        );
        let _ = writeln!(
            t,
            "  {:<16} {:>8} {:>12} {:>9} {:>9} {:>7}",
            "model", "segments", "unsegmented", "VI split", "VI merge", "ARAND"
        );
        for DemoRun { name, scored: r } in &self.runs {
            let _ = writeln!(
                t,
                "  {:<16} {:>8} {:>11.1}% {:>9.3} {:>9.3} {:>7.3}",
                name,
                r.segments,
                100.0 * r.unsegmented,
                r.scores.voi_split,
                r.scores.voi_merge,
                r.scores.adapted_rand_error
            );
        }
        let live = if opts.reference_model.is_some() {
            ", seg_reference_model"
        } else {
            ""
        };
        let names: Vec<&str> = self.runs.iter().map(|r| r.name.as_str()).collect();
        let _ = writeln!(t, "outputs:");
        let _ = writeln!(
            t,
            "  volumes        {} (image, labels, train_*, seg_ffn_rs{live})",
            self.volumes.display()
        );
        let _ = writeln!(t, "  training log   {}", self.training.log.display());
        let _ = writeln!(t, "  training curve {}", self.training.curve.display());
        let _ = writeln!(
            t,
            "  slice overlay  {} (image | truth | {}; z = {} of the box)",
            self.overlay.display(),
            names.join(" | "),
            self.overlay_z
        );
        let _ = write!(t, "total time {:.1} min", self.seconds / 60.0);
        t
    }
}

/// The short training run of step 3: fresh weights, Adam, fixed normalisation 128 / 33, rows
/// every 25 steps, one checkpoint at the end.
fn short_run_options(opts: &DemoOptions, data: &Path, coords: &Path, out: &Path) -> TrainOptions {
    let spec = |ds: &str| ("train".to_string(), VolumeSpec::new(data, ds));
    TrainOptions {
        image_mean: Some(vec![128.0]),
        image_stddev: Some(vec![33.0]),
        batch_size: opts.batch_size,
        optimizer: OptimizerKind::Adam,
        learning_rate: opts.learning_rate,
        init: WeightInit::GlorotUniform,
        seed: opts.seed,
        max_steps: opts.max_steps,
        max_seconds: ((opts.train_minutes * 60.0).round() as u64).max(1),
        report_every: 25,
        checkpoint_every: 0,
        checkpoint_secs: 0,
        ..TrainOptions::new(
            vec![spec("train_image")],
            vec![spec("train_labels")],
            coords,
            out,
            opts.model_config,
        )
    }
}
