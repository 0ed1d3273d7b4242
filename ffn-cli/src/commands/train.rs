//! `ffn train`: trains an FFN on labelled volumes and training coordinates
//! ([`ffn_io::training`] does the work).
//!
//! Outputs in `--out`: `checkpoints/ckpt-STEP.safetensors` (atomic; parameters, optimiser state,
//! trainer state, configuration), `train_log.csv` or `.jsonl` (one row per `--report-every` steps),
//! `training_curve.png` (loss and F1 over steps). `--resume` continues from the newest checkpoint
//! exactly as an uninterrupted run would (same weights after the same number of steps).

use ffn_io::training::stop;
use std::path::PathBuf;

use anyhow::{Context, Result};
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::WeightInit;
use ffn_core::training::augmentation::AugmentConfig;
use ffn_core::training::examples::FovPolicy;
use ffn_io::training::{LogFormat, OptimizerKind, Start, TrainOptions, TrainingRun, VolumeReads};
use indicatif::{ProgressBar, ProgressStyle};

use super::dist_args::DistArgs;
use crate::args::parse_named_spec;
use crate::args::{parse_f32_list, parse_xyz};

/// Arguments of `ffn train`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Image volume NAME:FILE:DATASET (repeat per volume; NAME as in the coordinate file).
    #[arg(long = "image", required = true)]
    pub images: Vec<String>,
    /// Label volume NAME:FILE:DATASET (repeat per volume).
    #[arg(long = "labels", required = true)]
    pub labels: Vec<String>,
    /// Training coordinates (from `ffn coordinates`).
    #[arg(long)]
    pub coords: PathBuf,
    /// Output folder (checkpoints, log, curve).
    #[arg(long)]
    pub out: PathBuf,
    /// Continue from the newest checkpoint in OUT/checkpoints (bitwise identical continuation).
    #[arg(long)]
    pub resume: bool,
    /// Start from the weights of this model, with a fresh optimiser (fine-tuning): an ffn-rs
    /// checkpoint (or a folder of them: the newest) or a google/ffn TF checkpoint `model.ckpt-N`.
    /// Its depth and features must be the run's. With --resume, the run's own checkpoint wins.
    #[arg(long, value_name = "PATH")]
    pub init_checkpoint: Option<PathBuf>,
    /// Stop after this many steps in total.
    #[arg(long, default_value_t = 1000)]
    pub max_steps: u64,
    /// Also stop (with a checkpoint) after this many seconds of training (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub max_seconds: u64,
    /// Image mean(s), one value or one per volume; default: computed from each volume.
    #[arg(long)]
    pub image_mean: Option<String>,
    /// Image stddev(s), one value or one per volume; default: computed from each volume.
    #[arg(long)]
    pub image_stddev: Option<String>,
    /// How the training volumes are read: `whole` (into memory, 12 bytes per voxel), `regions`
    /// (each example's patch from disk: for volumes larger than memory), or `auto` (whole when
    /// they take at most half the memory the process may use). Training is identical either way.
    #[arg(long, default_value = "auto", value_name = "auto|whole|regions")]
    pub volume_reads: VolumeReads,
    /// Network depth (conv0 + depth-1 residual modules).
    #[arg(long, default_value_t = 9)]
    pub depth: usize,
    /// Feature maps per layer.
    #[arg(long, default_value_t = 32)]
    pub features: usize,
    /// Field of view x,y,z (odd).
    #[arg(long, default_value = "33,33,33")]
    pub fov: String,
    /// FOV movement step x,y,z.
    #[arg(long, default_value = "8,8,8")]
    pub deltas: String,
    /// Examples per step (independent example generators).
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Optimiser.
    #[arg(long, value_enum, default_value_t = OptimizerArg::Sgd)]
    pub optimizer: OptimizerArg,
    /// Base learning rate.
    #[arg(long, default_value_t = 0.001)]
    pub learning_rate: f32,
    /// Momentum of `--optimizer momentum`.
    #[arg(long, default_value_t = 0.9)]
    pub momentum: f32,
    /// Adam beta1.
    #[arg(long, default_value_t = 0.9)]
    pub adam_beta1: f32,
    /// Adam beta2.
    #[arg(long, default_value_t = 0.999)]
    pub adam_beta2: f32,
    /// Adam epsilon.
    #[arg(long, default_value_t = 1e-8)]
    pub adam_epsilon: f32,
    /// Clip gradients by value to [-c, c]; 0 disables.
    #[arg(long, default_value_t = 0.7)]
    pub clip: f32,
    /// Exponential decay factor per `--decay-steps` (1 = constant learning rate).
    #[arg(long, default_value_t = 1.0)]
    pub decay_rate: f32,
    /// Steps per decay period.
    #[arg(long, default_value_t = 100_000)]
    pub decay_steps: u64,
    /// Decay smoothly instead of in whole periods (staircase).
    #[arg(long)]
    pub smooth_decay: bool,
    /// Linear learning-rate warm-up steps.
    #[arg(long, default_value_t = 0)]
    pub warmup_steps: u64,
    /// FOV policy within an example.
    #[arg(long, value_enum, default_value_t = PolicyArg::Fixed)]
    pub fov_policy: PolicyArg,
    /// Moves the training patch leaves room for (patch = fov + 2*delta*moves).
    #[arg(long, default_value_t = 1)]
    pub fov_moves: usize,
    /// Seed probability a FOV position needs to be visited.
    #[arg(long, default_value_t = 0.9)]
    pub move_threshold: f32,
    /// Do not shuffle the 26 shifts of the fixed policy.
    #[arg(long)]
    pub no_shuffle_moves: bool,
    /// Do not reflect patches.
    #[arg(long)]
    pub no_reflect: bool,
    /// Do not swap y and x.
    #[arg(long)]
    pub no_permute_xy: bool,
    /// Also permute z with y and x (isotropic data only).
    #[arg(long)]
    pub permute_z: bool,
    /// How fresh weights are drawn: glorot-uniform (google/ffn's code default) or
    /// truncated-normal (stddev --init-stddev, as google/ffn's released FIB-25 model).
    #[arg(long, value_enum, default_value_t = InitArg::TruncatedNormal)]
    pub init: InitArg,
    /// Stddev of the truncated-normal weight init.
    #[arg(long, default_value_t = 0.01)]
    pub init_stddev: f32,
    /// Seed of weights, example order and augmentation.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Steps per metrics row (loss, precision, recall, F1, accuracy, examples/s).
    #[arg(long, default_value_t = 50)]
    pub report_every: u64,
    /// Save a checkpoint every N steps (0: only at the end and by time).
    #[arg(long, default_value_t = 1000)]
    pub checkpoint_every: u64,
    /// Save a checkpoint every N seconds (0: off).
    #[arg(long, default_value_t = 600)]
    pub checkpoint_secs: u64,
    /// Checkpoints kept (0 keeps all).
    #[arg(long, default_value_t = 3)]
    pub keep_checkpoints: usize,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Csv)]
    pub log_format: LogFormatArg,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Convolution algorithm of the 3x3x3 layers: `winograd3d` (the default: forward passes and
    /// input gradients by Winograd over all three axes, F(4x4,3x3) in y and x and F(4,3) along z,
    /// weight gradients by F(4x4,3x3); for layers of 32k channels where AVX2 or AVX-512 runs
    /// it, the others direct), `winograd` (F(4x4,3x3) for all three), `winograd1d` (F(4,3)
    /// along x) or `direct` (`bf16`, a precision of inference, is refused). Not part of the run's
    /// identity: a run may resume under another algorithm (its bits then follow that algorithm).
    #[arg(long, default_value = "winograd3d", value_parser = crate::args::parse_conv_algorithm)]
    pub conv: ffn_core::conv::winograd::ConvAlgorithm,
    /// Data-parallel training (`--comm`, `--lr-scaling`, `--timeline`, ...).
    #[command(flatten)]
    pub dist: DistArgs,
}

/// Optimiser names.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerArg {
    /// Plain SGD (google/ffn's default).
    Sgd,
    /// SGD with momentum (`--momentum`).
    Momentum,
    /// Adam (`--adam-beta1/2`, `--adam-epsilon`).
    Adam,
}

/// `--init`: how fresh weights are drawn.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitArg {
    /// Glorot (Xavier) uniform, google/ffn's code default.
    GlorotUniform,
    /// Truncated normal with stddev --init-stddev.
    TruncatedNormal,
}

/// FOV policy names as google/ffn spells them.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyArg {
    /// Centre, then the 26 shifts by delta.
    Fixed,
    /// Follow the predicted mask (inference movement).
    #[value(name = "max_pred_moves")]
    MaxPredMoves,
}

/// Metrics log format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormatArg {
    /// `train_log.csv` with a header row.
    Csv,
    /// `train_log.jsonl`, one JSON object per row.
    Jsonl,
}

/// One value or one per volume, as f64 (parsed as f32, as the flags always were).
fn values(arg: &Option<String>, flag: &str) -> Result<Option<Vec<f64>>> {
    arg.as_deref()
        .map(|s| {
            parse_f32_list(s, &format!("--{flag}")).map(|v| v.into_iter().map(f64::from).collect())
        })
        .transpose()
}

impl Args {
    /// The library's options for these arguments.
    pub fn options(&self) -> Result<TrainOptions> {
        let specs = |list: &[String], flag: &str| -> Result<Vec<_>> {
            list.iter()
                .map(|s| parse_named_spec(s).with_context(|| format!("--{flag}")))
                .collect()
        };
        let model = ModelConfig {
            depth: self.depth,
            features: self.features,
            fov: parse_xyz(&self.fov, "--fov")?,
            deltas: parse_xyz(&self.deltas, "--deltas")?,
        };
        Ok(TrainOptions {
            resume: self.resume,
            init_checkpoint: self.init_checkpoint.clone(),
            max_steps: self.max_steps,
            max_seconds: self.max_seconds,
            stop_on_signal: true,
            image_mean: values(&self.image_mean, "image-mean")?,
            image_stddev: values(&self.image_stddev, "image-stddev")?,
            volume_reads: self.volume_reads,
            batch_size: self.batch_size,
            optimizer: match self.optimizer {
                OptimizerArg::Sgd => OptimizerKind::Sgd,
                OptimizerArg::Momentum => OptimizerKind::Momentum,
                OptimizerArg::Adam => OptimizerKind::Adam,
            },
            learning_rate: self.learning_rate,
            momentum: self.momentum,
            adam_beta1: self.adam_beta1,
            adam_beta2: self.adam_beta2,
            adam_epsilon: self.adam_epsilon,
            clip: self.clip,
            decay_rate: self.decay_rate,
            decay_steps: self.decay_steps,
            smooth_decay: self.smooth_decay,
            warmup_steps: self.warmup_steps,
            fov_policy: match self.fov_policy {
                PolicyArg::Fixed => FovPolicy::Fixed,
                PolicyArg::MaxPredMoves => FovPolicy::MaxPredMoves,
            },
            fov_moves: self.fov_moves,
            move_threshold: self.move_threshold,
            shuffle_moves: !self.no_shuffle_moves,
            augment: AugmentConfig {
                reflect: !self.no_reflect,
                permute_xy: !self.no_permute_xy,
                permute_z: self.permute_z,
            },
            init: match self.init {
                InitArg::GlorotUniform => WeightInit::GlorotUniform,
                InitArg::TruncatedNormal => WeightInit::TruncatedNormal(self.init_stddev),
            },
            seed: self.seed,
            report_every: self.report_every,
            checkpoint_every: self.checkpoint_every,
            checkpoint_secs: self.checkpoint_secs,
            keep_checkpoints: self.keep_checkpoints,
            log_format: match self.log_format {
                LogFormatArg::Csv => LogFormat::Csv,
                LogFormatArg::Jsonl => LogFormat::Jsonl,
            },
            conv: self.conv,
            ..TrainOptions::new(
                specs(&self.images, "image")?,
                specs(&self.labels, "labels")?,
                self.coords.clone(),
                self.out.clone(),
                model,
            )
        })
    }
}

fn progress_bar(run: &TrainingRun<'_>) -> ProgressBar {
    let max = run.options().max_steps;
    if run.start_step() >= max {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(max);
    b.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} steps [{elapsed_precise}<{eta_precise}] {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_position(run.start_step());
    b
}

/// Trains one rank: prints where the weights came from, a progress bar (or the metrics rows when
/// stderr is no terminal), unless `quiet` or not rank 0.
fn train_rank(
    opts: &TrainOptions,
    group: &ffn_comm::data_parallel::DataParallel,
    quiet: bool,
) -> Result<ffn_io::training::Summary> {
    let mut run = TrainingRun::new(opts.clone(), group)?;
    let talk = !quiet && group.is_root();
    for s in run.skipped_checkpoints().iter().filter(|_| group.is_root()) {
        eprintln!("skipping {}: {}", s.path.display(), s.reason);
    }
    match run.start() {
        Start::Resumed(path, step) if talk => {
            eprintln!("resuming from {} (step {step})", path.display())
        }
        Start::InitialWeights(path, config) if talk => eprintln!(
            "initial weights from {} ({config:?}); fresh optimiser state",
            path.display()
        ),
        _ => {}
    }
    if talk && run.volume_reads() == VolumeReads::Regions {
        eprintln!("reading the training volumes by region (each example's patch from disk)");
    }
    let bar = if talk {
        progress_bar(&run)
    } else {
        ProgressBar::hidden()
    };
    while !run.is_done()? {
        let outcome = run.step()?;
        bar.set_position(outcome.step);
        if let Some(row) = &outcome.row {
            bar.set_message(format!(
                "loss {:.4} F1 {:.3} {:.2} ex/s",
                row.loss, row.f1, row.examples_per_s
            ));
            if !quiet && bar.is_hidden() {
                eprintln!("{}", row.csv());
            }
        }
    }
    bar.finish_and_clear();
    run.finish()
}

/// Trains; returns what happened. Prints progress unless `args.quiet`.
pub fn train(args: &Args) -> Result<ffn_io::training::Summary> {
    let opts = args.options()?;
    ffn_comm::data_parallel::run(&args.dist.options(), |group| {
        train_rank(&opts, group, args.quiet)
    })
}

/// Runs `ffn train`.
pub fn run(args: Args) -> Result<()> {
    stop::install_stop_signals().context("installing the SIGTERM / SIGUSR1 handlers")?;
    let s = train(&args)?;
    let root = ffn_comm::data_parallel::is_root_process(&args.dist.options());
    if let Some(why) = &s.stopped_by {
        if root {
            eprintln!(
                "stopped by {why} at step {}: checkpoint {}; continue with --resume",
                s.steps,
                s.checkpoint.display()
            );
        }
        std::process::exit(stop::STOPPED_EXIT_CODE);
    }
    if !root {
        return Ok(());
    }
    for n in &s.normalisation {
        println!(
            "volume {}: image mean {:.3}, stddev {:.3}",
            n.name, n.mean, n.stddev
        );
    }
    if let Some(r) = s.rows.last() {
        println!(
            "step {}: loss {:.4}, precision {:.3}, recall {:.3}, F1 {:.3}, accuracy {:.3}",
            r.step, r.loss, r.precision, r.recall, r.f1, r.accuracy
        );
    }
    println!("{:.2} examples/s", s.examples_per_s);
    println!("checkpoint: {}", s.checkpoint.display());
    println!("log: {}", s.log.display());
    println!("training curve: {}", s.curve.display());
    Ok(())
}
