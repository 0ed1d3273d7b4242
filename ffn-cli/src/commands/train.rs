//! `ffn train`: trains an FFN on labelled volumes and training coordinates.
//!
//! Outputs in `--out`: `checkpoints/ckpt-STEP.safetensors` (atomic; parameters, optimiser state,
//! trainer state, configuration), `train_log.csv` or `.jsonl` (one row per `--report-every` steps),
//! `training_curve.png` (loss and F1 over steps). `--resume` continues from the newest checkpoint
//! exactly as an uninterrupted run would (same weights after the same number of steps).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::ConvStack3d;
use ffn_core::rng::Rng;
use ffn_core::training::augmentation::AugmentConfig;
use ffn_core::training::examples::{ExampleConfig, FovPolicy};
use ffn_core::training::schedule::{Decay, LrSchedule};
use ffn_core::training::step::{StepBuffers, StepOptions};
use ffn_core::training::trainer::{Trainer, TrainerConfig, TrainingVolume};
use ffn_io::checkpoint::{Checkpoint, latest_checkpoint, load_checkpoint, save_checkpoint_in_dir};
use ffn_io::coords::read_coords;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use super::coordinates::parse_named_spec;
use super::partitions::{parse_f32_list, parse_xyz};
use crate::optimizers::{OptimizerKind, make_optimizer};
use crate::plot;
use ffn_core::optim::Optimizer;

/// Name of the extra checkpoint buffer that holds the trainer state.
const TRAINER_STATE: &str = "trainer_state";

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
    #[arg(long, value_enum, default_value_t = OptimizerKind::Sgd)]
    pub optimizer: OptimizerKind,
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
    #[arg(long, value_enum, default_value_t = LogFormat::Csv)]
    pub log_format: LogFormat,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Convolution algorithm of the 3x3x3 layers: `winograd` (F(4,3) along x, about 1.8x fewer
    /// multiply-adds, rounding differences of order 1e-7; on AVX2 CPUs for layers of 32k channels,
    /// the others run direct) or `direct`.
    #[arg(long, default_value = "winograd", value_parser = super::parse_conv_algorithm)]
    pub conv: ffn_core::conv::winograd::ConvAlgorithm,
    /// Data-parallel training (`--comm`, `--lr-scaling`, `--timeline`, ...).
    #[command(flatten)]
    pub dist: crate::distributed::DistArgs,
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
pub enum LogFormat {
    /// `train_log.csv` with a header row.
    Csv,
    /// `train_log.jsonl`, one JSON object per row.
    Jsonl,
}

/// Parses `ffn train` arguments from strings (used by `ffn demo`).
#[derive(Parser, Debug)]
struct Wrapper {
    #[command(flatten)]
    args: Args,
}

impl Args {
    /// Parses arguments as if given on the command line after `ffn train`.
    pub fn from_strings(args: &[String]) -> Result<Self> {
        let all = std::iter::once("train".to_string()).chain(args.iter().cloned());
        Ok(Wrapper::try_parse_from(all)
            .context("train arguments")?
            .args)
    }
}

/// One metrics row.
#[derive(Clone, Debug, PartialEq)]
pub struct LogRow {
    /// Steps done.
    pub step: u64,
    /// Mean loss over the window.
    pub loss: f64,
    /// Precision of the examples finished in the window.
    pub precision: f64,
    /// Recall.
    pub recall: f64,
    /// F1.
    pub f1: f64,
    /// Accuracy.
    pub accuracy: f64,
    /// Examples finished in the window.
    pub examples: u64,
    /// FOV evaluations (batch x steps) per second in the window.
    pub examples_per_s: f64,
    /// Learning rate at the window's last step.
    pub lr: f64,
    /// Seconds since this process started training.
    pub elapsed_s: f64,
}

const CSV_HEADER: &str =
    "step,loss,precision,recall,f1,accuracy,examples,examples_per_s,lr,elapsed_s";

impl LogRow {
    fn csv(&self) -> String {
        format!(
            "{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{:.3},{:.6e},{:.1}",
            self.step,
            self.loss,
            self.precision,
            self.recall,
            self.f1,
            self.accuracy,
            self.examples,
            self.examples_per_s,
            self.lr,
            self.elapsed_s
        )
    }

    fn json(&self) -> Value {
        json!({
            "step": self.step, "loss": self.loss, "precision": self.precision, "recall": self.recall,
            "f1": self.f1, "accuracy": self.accuracy, "examples": self.examples,
            "examples_per_s": self.examples_per_s, "lr": self.lr, "elapsed_s": self.elapsed_s,
        })
    }

    fn parse_csv(line: &str) -> Option<Self> {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 10 {
            return None;
        }
        Some(Self {
            step: f[0].parse().ok()?,
            loss: f[1].parse().ok()?,
            precision: f[2].parse().ok()?,
            recall: f[3].parse().ok()?,
            f1: f[4].parse().ok()?,
            accuracy: f[5].parse().ok()?,
            examples: f[6].parse().ok()?,
            examples_per_s: f[7].parse().ok()?,
            lr: f[8].parse().ok()?,
            elapsed_s: f[9].parse().ok()?,
        })
    }

    fn parse_json(line: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(line).ok()?;
        let g = |k: &str| v.get(k).and_then(Value::as_f64);
        Some(Self {
            step: v.get("step")?.as_u64()?,
            loss: g("loss")?,
            precision: g("precision")?,
            recall: g("recall")?,
            f1: g("f1")?,
            accuracy: g("accuracy")?,
            examples: v.get("examples")?.as_u64()?,
            examples_per_s: g("examples_per_s")?,
            lr: g("lr")?,
            elapsed_s: g("elapsed_s")?,
        })
    }
}

/// What a training run did.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Steps done in total.
    pub steps: u64,
    /// All metrics rows (including those of earlier runs when resumed).
    pub rows: Vec<LogRow>,
    /// The newest checkpoint.
    pub checkpoint: PathBuf,
    /// The training curve.
    pub curve: PathBuf,
    /// The log file.
    pub log: PathBuf,
    /// Mean and stddev used for each volume, by name.
    pub normalisation: Vec<Normalisation>,
    /// Mean FOV evaluations per second over this process's steps.
    pub examples_per_s: f64,
}

fn per_volume(arg: &Option<String>, n: usize, what: &str) -> Result<Option<Vec<f64>>> {
    let Some(s) = arg else { return Ok(None) };
    let v = parse_f32_list(s).with_context(|| format!("--{what}"))?;
    match v.len() {
        1 => Ok(Some(vec![v[0] as f64; n])),
        k if k == n => Ok(Some(v.into_iter().map(f64::from).collect())),
        k => bail!("--{what}: expected 1 value or one per volume ({n}), found {k}"),
    }
}

/// Loads the volumes named in the coordinate file, normalised.
/// Name, image mean and image stddev of one training volume.
pub type Normalisation = (String, f64, f64);

fn load_volumes(
    args: &Args,
    names: &[String],
) -> Result<(Vec<TrainingVolume>, Vec<Normalisation>)> {
    let images: Vec<(String, ffn_io::VolumeSpec)> = args
        .images
        .iter()
        .map(|s| parse_named_spec(s).context("--image"))
        .collect::<Result<_>>()?;
    let labels: Vec<(String, ffn_io::VolumeSpec)> = args
        .labels
        .iter()
        .map(|s| parse_named_spec(s).context("--labels"))
        .collect::<Result<_>>()?;
    let means = per_volume(&args.image_mean, names.len(), "image-mean")?;
    let stds = per_volume(&args.image_stddev, names.len(), "image-stddev")?;
    let mut vols = Vec::new();
    let mut norms = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let find = |list: &[(String, ffn_io::VolumeSpec)], flag: &str| {
            list.iter().find(|(n, _)| n == name).map(|(_, s)| s.clone()).with_context(|| {
                format!(
                    "{} names volume '{name}' but no --{flag} {name}:FILE:DATASET was given (given: {})",
                    args.coords.display(),
                    list.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                )
            })
        };
        let (ispec, lspec) = (find(&images, "image")?, find(&labels, "labels")?);
        let mut image = ffn_io::read_image_f32(&ispec)?;
        let lab = ffn_io::read_labels(&lspec)?;
        ffn_io::check_same_shape(&ispec, image.shape(), &lspec, lab.shape())?;
        let (m0, s0) = ffn_core::inference::mean_stddev(image.iter().copied());
        let mean = means.as_ref().map_or(m0, |m| m[i]);
        let std = stds.as_ref().map_or(s0, |s| s[i]);
        ensure!(
            std > 0.0 && std.is_finite(),
            "volume '{name}' ({ispec}): image stddev must be > 0, found {std}"
        );
        image.mapv_inplace(|x| ((x as f64 - mean) / std) as f32);
        norms.push((name.clone(), mean, std));
        vols.push(TrainingVolume {
            name: name.clone(),
            image,
            labels: lab,
        });
    }
    Ok((vols, norms))
}

/// The configuration that must match between a run and its resumption.
fn config_json(
    args: &Args,
    model: &ModelConfig,
    norms: &[Normalisation],
    n_coords: usize,
) -> Value {
    // Floats as their shortest exact text: JSON number parsing is not guaranteed to round-trip.
    let f = |x: f64| Value::String(x.to_string());
    let f32s = |x: f32| Value::String(x.to_string());
    json!({
        "model": { "depth": model.depth, "features": model.features, "fov": model.fov, "deltas": model.deltas },
        "batch_size": args.batch_size,
        "optimizer": format!("{:?}", args.optimizer),
        "learning_rate": f32s(args.learning_rate),
        "momentum": f32s(args.momentum),
        "adam": [f32s(args.adam_beta1), f32s(args.adam_beta2), f32s(args.adam_epsilon)],
        "clip": f32s(args.clip),
        "decay": [f32s(args.decay_rate), args.decay_steps, args.smooth_decay],
        "warmup_steps": args.warmup_steps,
        "fov_policy": format!("{:?}", args.fov_policy),
        "fov_moves": args.fov_moves,
        "move_threshold": f32s(args.move_threshold),
        "shuffle_moves": !args.no_shuffle_moves,
        "augment": [!args.no_reflect, !args.no_permute_xy, args.permute_z],
        "init_stddev": f32s(args.init_stddev),
        "seed": args.seed,
        "coordinates": n_coords,
        "volumes": norms.iter().map(|(n, m, s)| json!({"name": n, "mean": f(*m), "stddev": f(*s)})).collect::<Vec<_>>(),
    })
}

fn differences(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match y.get(k) {
                    Some(vb) => differences(va, vb, &p, out),
                    None => out.push(format!("{p}: missing in the checkpoint")),
                }
            }
        }
        _ if a != b => out.push(format!("{path}: now {a}, checkpoint {b}")),
        _ => {}
    }
}

fn bytes_to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            f32::from_bits(u32::from_le_bytes(w))
        })
        .collect()
}

fn f32_to_bytes(v: &[f32], len: usize) -> Result<Vec<u8>> {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
    ensure!(
        len <= b.len(),
        "trainer state: {len} bytes announced, {} stored",
        b.len()
    );
    Ok(b[..len].to_vec())
}

struct Log {
    path: PathBuf,
    format: LogFormat,
}

impl Log {
    /// Opens the log; keeps the rows up to `keep_until` (resume) or starts a new file.
    fn open(out: &Path, format: LogFormat, keep_until: Option<u64>) -> Result<(Self, Vec<LogRow>)> {
        let path = out.join(match format {
            LogFormat::Csv => "train_log.csv",
            LogFormat::Jsonl => "train_log.jsonl",
        });
        let mut rows = Vec::new();
        if let Some(step) = keep_until
            && path.exists()
        {
            let text =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            for line in text.lines().filter(|l| !l.is_empty() && *l != CSV_HEADER) {
                let row = match format {
                    LogFormat::Csv => LogRow::parse_csv(line),
                    LogFormat::Jsonl => LogRow::parse_json(line),
                };
                if let Some(r) = row
                    && r.step <= step
                {
                    rows.push(r);
                }
            }
        }
        let log = Self { path, format };
        log.rewrite(&rows)?;
        Ok((log, rows))
    }

    fn line(&self, r: &LogRow) -> String {
        match self.format {
            LogFormat::Csv => r.csv(),
            LogFormat::Jsonl => r.json().to_string(),
        }
    }

    fn rewrite(&self, rows: &[LogRow]) -> Result<()> {
        let mut text = String::new();
        if self.format == LogFormat::Csv {
            text.push_str(CSV_HEADER);
            text.push('\n');
        }
        for r in rows {
            text.push_str(&self.line(r));
            text.push('\n');
        }
        fs::write(&self.path, text).with_context(|| format!("writing {}", self.path.display()))
    }

    fn append(&self, r: &LogRow) -> Result<()> {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        writeln!(f, "{}", self.line(r)).with_context(|| format!("writing {}", self.path.display()))
    }
}

fn write_curve(path: &Path, rows: &[LogRow]) -> Result<()> {
    let loss: Vec<(f64, f64)> = rows.iter().map(|r| (r.step as f64, r.loss)).collect();
    let f1: Vec<(f64, f64)> = rows.iter().map(|r| (r.step as f64, r.f1)).collect();
    plot::training_curve(path, &loss, &f1)
}

/// Trains; returns what happened. Prints progress unless `args.quiet`.
pub fn train(args: &Args) -> Result<Summary> {
    crate::distributed::run(&args.dist, |dist| train_on(args, dist))
}

/// Trains as one rank of `dist` (a group of one without `--comm`): rank 0 alone writes files.
fn train_on(args: &Args, dist: &crate::distributed::Dist) -> Result<Summary> {
    let fov = parse_xyz(&args.fov).context("--fov")?;
    let deltas = parse_xyz(&args.deltas).context("--deltas")?;
    let model = ModelConfig {
        depth: args.depth,
        features: args.features,
        fov,
        deltas,
    };
    model.validate().map_err(anyhow::Error::msg)?;
    let coord_file = read_coords(&args.coords)?;
    let (volumes, norms) = load_volumes(args, &coord_file.volumes)?;
    let n_coords = coord_file.coords.len();
    let example = ExampleConfig {
        policy: match args.fov_policy {
            PolicyArg::Fixed => FovPolicy::Fixed,
            PolicyArg::MaxPredMoves => FovPolicy::MaxPredMoves,
        },
        fov_moves: args.fov_moves,
        move_threshold: args.move_threshold,
        shuffle_moves: !args.no_shuffle_moves,
        augment: AugmentConfig {
            reflect: !args.no_reflect,
            permute_xy: !args.no_permute_xy,
            permute_z: args.permute_z,
        },
        ..ExampleConfig::new(fov, deltas)
    };
    let schedule = LrSchedule {
        lr: args.learning_rate,
        decay: (args.decay_rate != 1.0).then_some(Decay {
            rate: args.decay_rate,
            steps: args.decay_steps,
            staircase: !args.smooth_decay,
        }),
        warmup_steps: args.warmup_steps,
    };
    schedule.validate()?;
    ensure!(
        args.clip >= 0.0,
        "--clip: expected >= 0, found {}",
        args.clip
    );
    ensure!(args.report_every >= 1, "--report-every: expected >= 1");
    let opts = StepOptions {
        schedule,
        clip: (args.clip > 0.0).then_some(args.clip),
    };
    let mut trainer = Trainer::new(
        dist.trainer_config(TrainerConfig::new(example, args.batch_size, args.seed)),
        volumes,
        coord_file.coords,
    )
    .with_context(|| format!("training data from {}", args.coords.display()))?;
    let init = args
        .init_checkpoint
        .as_deref()
        .map(|p| ffn_io::model::load_initial_weights(p, &model))
        .transpose()
        .context("--init-checkpoint")?;
    let mut cfg_json = config_json(args, &model, &norms, n_coords);
    if let Some(m) = &init {
        // Only when given, so that runs without it keep the configuration they always had.
        cfg_json["init_checkpoint"] = json!({
            "path": m.path.display().to_string(),
            "params_checksum": format!("{:016x}", ffn_core::training::distributed::param_checksum(&m.params)),
        });
    }
    dist.check_config(args, &cfg_json)?;
    let ckpt_dir = args.out.join("checkpoints");
    fs::create_dir_all(&ckpt_dir).with_context(|| format!("creating {}", ckpt_dir.display()))?;
    let mut opt = make_optimizer(args);
    // CPU seconds of training so far: the resumed checkpoint's record plus this process's.
    let mut cpu_before = (0.0f64, 0u64);
    let (mut net, resumed_from) = match args
        .resume
        .then(|| latest_checkpoint(&ckpt_dir))
        .transpose()?
        .flatten()
    {
        Some(path) => {
            let ck = load_checkpoint(&path)?;
            ffn_io::checkpoint::check_architecture(&path, &model, &ck.model)?;
            let saved_cfg = ck
                .training_config
                .get("config")
                .cloned()
                .unwrap_or(Value::Null);
            let mut diffs = Vec::new();
            differences(&cfg_json, &saved_cfg, "", &mut diffs);
            if !diffs.is_empty() {
                bail!(
                    "{}: cannot resume, the configuration changed: {}",
                    path.display(),
                    diffs.join("; ")
                );
            }
            cpu_before = match ck
                .training_config
                .get("cpu_seconds")
                .and_then(Value::as_f64)
            {
                Some(cpu) => (
                    cpu,
                    ck.training_config
                        .get("cpu_seconds_from_step")
                        .and_then(Value::as_u64)
                        .unwrap_or(0),
                ),
                None => (0.0, ck.step),
            };
            let state_len = ck
                .training_config
                .get("trainer_state_bytes")
                .and_then(Value::as_u64)
                .with_context(|| {
                    format!(
                        "{}: training_config.trainer_state_bytes missing",
                        path.display()
                    )
                })?;
            let mut opt_state = Vec::new();
            let mut state = None;
            let mut rank_states = Vec::new();
            for (name, buf) in ck.optimizer {
                if name == TRAINER_STATE {
                    state = Some(buf);
                } else if crate::distributed::state::is_rank_state(&name) {
                    rank_states.push((name, buf));
                } else {
                    opt_state.push((name, buf));
                }
            }
            let state =
                state.with_context(|| format!("{}: no {TRAINER_STATE} buffer", path.display()))?;
            if !dist.restore_trainer(
                &mut trainer,
                &path,
                &ck.training_config,
                &state,
                &rank_states,
                ck.step,
            )? {
                trainer
                    .load_state(&f32_to_bytes(&state, state_len as usize)?)
                    .with_context(|| format!("{}", path.display()))?;
                ensure!(
                    trainer.steps() == ck.step,
                    "{}: step {} but trainer state at {}",
                    path.display(),
                    ck.step,
                    trainer.steps()
                );
            }
            opt.load_state(&opt_state)
                .with_context(|| format!("{}", path.display()))?;
            (ConvStack3d::from_params(model, ck.params)?, Some(path))
        }
        None => match init {
            Some(m) => {
                if !args.quiet && dist.is_root() {
                    eprintln!(
                        "initial weights from {} ({:?}); fresh optimiser state",
                        m.path.display(),
                        m.config
                    );
                }
                (ConvStack3d::from_params(model, m.params)?, None)
            }
            None => (
                ConvStack3d::new(model, args.init_stddev, &mut Rng::new(args.seed)),
                None,
            ),
        },
    };
    net.set_conv_algorithm(args.conv);
    let start_step = trainer.steps();
    dist.broadcast_initial(&mut net, opt.as_mut(), start_step)?;
    let (log, mut rows) = if dist.is_root() {
        Log::open(
            &args.out,
            args.log_format,
            resumed_from.as_ref().map(|_| start_step),
        )?
    } else {
        (
            Log {
                path: PathBuf::new(),
                format: args.log_format,
            },
            Vec::new(),
        )
    };
    let curve = args.out.join("training_curve.png");
    if let Some(p) = &resumed_from
        && !args.quiet
        && dist.is_root()
    {
        eprintln!("resuming from {} (step {start_step})", p.display());
    }
    let save = |trainer: &Trainer, net: &ConvStack3d, opt: &dyn Optimizer| -> Result<PathBuf> {
        let state = trainer.save_state();
        let mut optimizer = opt.state();
        optimizer.push((TRAINER_STATE.to_string(), bytes_to_f32(&state)));
        let distributed = dist.gather_trainer_states(trainer, &mut optimizer)?;
        if !dist.is_root() {
            return Ok(ckpt_dir.join(ffn_io::checkpoint::checkpoint_file_name(trainer.steps())));
        }
        let ck = Checkpoint {
            model,
            params: net.params().to_vec(),
            optimizer,
            step: trainer.steps(),
            rng_state: Rng::new(args.seed).state(),
            training_config: {
                let mut t = json!({
                    "config": cfg_json,
                    "trainer_state_bytes": state.len(),
                    "cpu_seconds": cpu_before.0 + crate::cpu_time::process_cpu_seconds(),
                    "cpu_seconds_from_step": cpu_before.1,
                });
                if !distributed.is_null() {
                    t["distributed"] = distributed;
                }
                t
            },
        };
        Ok(save_checkpoint_in_dir(
            &ckpt_dir,
            &ck,
            args.keep_checkpoints,
        )?)
    };
    let bar = if args.quiet || !dist.is_root() || start_step >= args.max_steps {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(args.max_steps);
        b.set_style(
            ProgressStyle::with_template(
                "{bar:30} {pos}/{len} steps [{elapsed_precise}<{eta_precise}] {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.set_position(start_step);
        b
    };
    let mut bufs = StepBuffers::new(&net, &trainer);
    let t0 = Instant::now();
    let (mut window_t, mut window_steps) = (Instant::now(), 0u64);
    let mut last_ckpt = Instant::now();
    let mut checkpoint = resumed_from.clone();
    while trainer.steps() < args.max_steps
        && !dist.agree_if(args.max_seconds > 0, || {
            t0.elapsed().as_secs_f64() >= args.max_seconds as f64
        })?
    {
        let r = dist.step(&mut trainer, &mut net, &mut bufs, &opts, |p, g, lr| {
            opt.step(p, g, lr)
        })?;
        ensure!(
            r.loss.is_finite(),
            "step {}: loss is {} (diverged); lower --learning-rate",
            trainer.steps(),
            r.loss
        );
        let lr = r.lr;
        window_steps += 1;
        let step = trainer.steps();
        dist.check_weights(step, net.params(), false)?;
        bar.set_position(step);
        if step % args.report_every == 0 {
            let m = trainer.take_metrics();
            let secs = window_t.elapsed().as_secs_f64().max(1e-9);
            let row = LogRow {
                step,
                loss: m.loss,
                precision: m.precision,
                recall: m.recall,
                f1: m.f1,
                accuracy: m.accuracy,
                examples: m.examples,
                examples_per_s: (window_steps * (args.batch_size * dist.size()) as u64) as f64
                    / secs,
                lr: lr as f64,
                elapsed_s: t0.elapsed().as_secs_f64(),
            };
            bar.set_message(format!(
                "loss {:.4} F1 {:.3} {:.2} ex/s",
                row.loss, row.f1, row.examples_per_s
            ));
            if args.quiet {
                // Nothing on the terminal.
            } else if bar.is_hidden() {
                eprintln!("{}", row.csv());
            }
            if dist.is_root() {
                log.append(&row)?;
            }
            rows.push(row);
            (window_t, window_steps) = (Instant::now(), 0);
        }
        let by_steps = args.checkpoint_every > 0 && step % args.checkpoint_every == 0;
        let by_time = dist.agree_if(args.checkpoint_secs > 0, || {
            last_ckpt.elapsed().as_secs() >= args.checkpoint_secs
        })?;
        if by_steps || by_time {
            checkpoint = Some(save(&trainer, &net, opt.as_ref())?);
            if dist.is_root() {
                write_curve(&curve, &rows)?;
            }
            last_ckpt = Instant::now();
        }
    }
    bar.finish_and_clear();
    let done = trainer.steps() - start_step;
    dist.check_weights(trainer.steps(), net.params(), true)?;
    if checkpoint
        .as_ref()
        .is_none_or(|p| !p.ends_with(ffn_io::checkpoint::checkpoint_file_name(trainer.steps())))
    {
        checkpoint = Some(save(&trainer, &net, opt.as_ref())?);
    }
    if dist.is_root() {
        write_curve(&curve, &rows)?;
    }
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    Ok(Summary {
        steps: trainer.steps(),
        rows,
        checkpoint: checkpoint.context("no checkpoint written")?,
        curve,
        log: log.path,
        normalisation: norms,
        examples_per_s: (done * (args.batch_size * dist.size()) as u64) as f64 / secs,
    })
}

/// Runs `ffn train`.
pub fn run(args: Args) -> Result<()> {
    let s = train(&args)?;
    if !crate::distributed::is_root_process(&args.dist) {
        return Ok(());
    }
    for (name, m, sd) in &s.normalisation {
        println!("volume {name}: image mean {m:.3}, stddev {sd:.3}");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_rows_round_trip_and_config_differences_are_named() {
        let r = LogRow {
            step: 50,
            loss: 0.5,
            precision: 0.25,
            recall: 0.75,
            f1: 0.375,
            accuracy: 0.875,
            examples: 7,
            examples_per_s: 12.5,
            lr: 0.001,
            elapsed_s: 3.5,
        };
        assert_eq!(LogRow::parse_csv(&r.csv()), Some(r.clone()));
        assert_eq!(LogRow::parse_json(&r.json().to_string()), Some(r));
        assert_eq!(LogRow::parse_csv(CSV_HEADER), None);
        let a = json!({"lr": "0.001", "model": {"depth": 3}});
        let b = json!({"lr": "0.002", "model": {"depth": 3}});
        let mut d = Vec::new();
        differences(&a, &b, "", &mut d);
        assert_eq!(d, ["lr: now \"0.001\", checkpoint \"0.002\""]);
        let state: Vec<u8> = (0..11).collect();
        assert_eq!(f32_to_bytes(&bytes_to_f32(&state), 11).unwrap(), state);
        assert!(f32_to_bytes(&bytes_to_f32(&state), 13).is_err());
    }
}
