//! What a training run is asked to do: [`TrainOptions`], and the configuration record that a
//! resumed run must match ([`TrainOptions::config_json`]).

use std::path::PathBuf;

use ffn_core::conv::winograd::ConvAlgorithm;
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::WeightInit;
use ffn_core::optim::{Adam, Momentum, Optimizer, Sgd};
use ffn_core::training::augmentation::AugmentConfig;
use ffn_core::training::examples::{ExampleConfig, FovPolicy};
use ffn_core::training::schedule::{Decay, LrSchedule};
use serde_json::{Value, json};

use super::volumes::{Normalisation, VolumeReads};
use crate::VolumeSpec;

/// The optimiser of a run (its parameters are fields of [`TrainOptions`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerKind {
    /// Plain SGD (google/ffn's default).
    Sgd,
    /// SGD with momentum ([`TrainOptions::momentum`]).
    Momentum,
    /// Adam ([`TrainOptions::adam_beta1`], `adam_beta2`, `adam_epsilon`).
    Adam,
}

/// The format of the metrics log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// `train_log.csv` with a header row.
    Csv,
    /// `train_log.jsonl`, one JSON object per row.
    Jsonl,
}

/// Everything a training run needs. [`TrainOptions::new`] gives `ffn train`'s defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainOptions {
    /// Image volumes by name (the names of the coordinate file).
    pub images: Vec<(String, VolumeSpec)>,
    /// Label volumes by name.
    pub labels: Vec<(String, VolumeSpec)>,
    /// Training coordinates (from `ffn coordinates`).
    pub coords: PathBuf,
    /// Output folder: `checkpoints/`, the log, the training curve.
    pub out: PathBuf,
    /// Continue from the newest checkpoint in `out/checkpoints` (bitwise identical continuation).
    pub resume: bool,
    /// Start from the weights of this model with a fresh optimiser (fine-tuning); ignored when a
    /// run's own checkpoint is resumed.
    pub init_checkpoint: Option<PathBuf>,
    /// Stop after this many steps in total.
    pub max_steps: u64,
    /// Also stop (with a checkpoint) after this many seconds of training (0: no limit).
    pub max_seconds: u64,
    /// Also stop (with a checkpoint) when [`stop::stop_requested`](super::stop::stop_requested)
    /// on any rank (SIGTERM / SIGUSR1 once [`stop::install_stop_signals`](super::stop) ran):
    /// checked after every step, with one small collective per step on several ranks.
    pub stop_on_signal: bool,
    /// Image mean: one value for all volumes or one per volume; `None`: each volume's own.
    pub image_mean: Option<Vec<f64>>,
    /// Image stddev, like [`Self::image_mean`].
    pub image_stddev: Option<Vec<f64>>,
    /// Whether the volumes are read whole into memory or region by region (same training either
    /// way; not part of the configuration a resumed run must match).
    pub volume_reads: VolumeReads,
    /// Depth, features, FOV and deltas of the network.
    pub model: ModelConfig,
    /// Examples per step.
    pub batch_size: usize,
    /// The optimiser.
    pub optimizer: OptimizerKind,
    /// Base learning rate.
    pub learning_rate: f32,
    /// Momentum of [`OptimizerKind::Momentum`].
    pub momentum: f32,
    /// Adam beta1.
    pub adam_beta1: f32,
    /// Adam beta2.
    pub adam_beta2: f32,
    /// Adam epsilon.
    pub adam_epsilon: f32,
    /// Clip gradients by value to `[-clip, clip]`; 0 disables.
    pub clip: f32,
    /// Exponential decay factor per `decay_steps` (1: constant learning rate).
    pub decay_rate: f32,
    /// Steps per decay period.
    pub decay_steps: u64,
    /// Decay smoothly instead of in whole periods.
    pub smooth_decay: bool,
    /// Linear learning-rate warm-up steps.
    pub warmup_steps: u64,
    /// FOV policy within an example.
    pub fov_policy: FovPolicy,
    /// Moves the training patch leaves room for.
    pub fov_moves: usize,
    /// Seed probability a FOV position needs to be visited.
    pub move_threshold: f32,
    /// Shuffle the 26 shifts of the fixed policy.
    pub shuffle_moves: bool,
    /// Reflections and axis permutations.
    pub augment: AugmentConfig,
    /// How fresh weights are drawn (ignored when resuming or starting from a checkpoint).
    pub init: WeightInit,
    /// Seed of weights, example order and augmentation.
    pub seed: u64,
    /// Steps per metrics row.
    pub report_every: u64,
    /// Save a checkpoint every N steps (0: only at the end and by time).
    pub checkpoint_every: u64,
    /// Save a checkpoint every N seconds (0: off).
    pub checkpoint_secs: u64,
    /// Checkpoints kept (0 keeps all).
    pub keep_checkpoints: usize,
    /// Log format.
    pub log_format: LogFormat,
    /// Convolution algorithm of the 3x3x3 layers.
    pub conv: ConvAlgorithm,
}

impl TrainOptions {
    /// `ffn train`'s defaults for these volumes, coordinates, output folder and model.
    pub fn new(
        images: Vec<(String, VolumeSpec)>,
        labels: Vec<(String, VolumeSpec)>,
        coords: impl Into<PathBuf>,
        out: impl Into<PathBuf>,
        model: ModelConfig,
    ) -> Self {
        Self {
            images,
            labels,
            coords: coords.into(),
            out: out.into(),
            resume: false,
            init_checkpoint: None,
            max_steps: 1000,
            max_seconds: 0,
            stop_on_signal: false,
            image_mean: None,
            image_stddev: None,
            volume_reads: VolumeReads::Auto,
            model,
            batch_size: 4,
            optimizer: OptimizerKind::Sgd,
            learning_rate: 0.001,
            momentum: 0.9,
            adam_beta1: 0.9,
            adam_beta2: 0.999,
            adam_epsilon: 1e-8,
            clip: 0.7,
            decay_rate: 1.0,
            decay_steps: 100_000,
            smooth_decay: false,
            warmup_steps: 0,
            fov_policy: FovPolicy::Fixed,
            fov_moves: 1,
            move_threshold: 0.9,
            shuffle_moves: true,
            augment: AugmentConfig::default(),
            init: WeightInit::TruncatedNormal(0.01),
            seed: 0,
            report_every: 50,
            checkpoint_every: 1000,
            checkpoint_secs: 600,
            keep_checkpoints: 3,
            log_format: LogFormat::Csv,
            conv: ConvAlgorithm::default(),
        }
    }

    /// The optimiser these options name, with fresh state.
    pub fn make_optimizer(&self) -> Box<dyn Optimizer> {
        match self.optimizer {
            OptimizerKind::Sgd => Box::new(Sgd),
            OptimizerKind::Momentum => Box::new(Momentum::new(self.momentum)),
            OptimizerKind::Adam => Box::new(Adam::new(
                self.adam_beta1,
                self.adam_beta2,
                self.adam_epsilon,
            )),
        }
    }

    /// The learning-rate schedule.
    pub fn schedule(&self) -> LrSchedule {
        LrSchedule {
            lr: self.learning_rate,
            decay: (self.decay_rate != 1.0).then_some(Decay {
                rate: self.decay_rate,
                steps: self.decay_steps,
                staircase: !self.smooth_decay,
            }),
            warmup_steps: self.warmup_steps,
        }
    }

    /// The training-example parameters.
    pub fn example_config(&self) -> ExampleConfig {
        ExampleConfig {
            policy: self.fov_policy,
            fov_moves: self.fov_moves,
            move_threshold: self.move_threshold,
            shuffle_moves: self.shuffle_moves,
            augment: self.augment,
            ..ExampleConfig::new(self.model.fov, self.model.deltas)
        }
    }

    /// The settings outside the checkpointed configuration that every rank of a data-parallel
    /// run must share (a different step limit or checkpoint cadence would make the ranks call
    /// different collectives).
    pub fn run_settings(&self) -> Value {
        json!({
            "max_steps": self.max_steps,
            "max_seconds": self.max_seconds,
            "stop_on_signal": self.stop_on_signal,
            "report_every": self.report_every,
            "checkpoint_every": self.checkpoint_every,
            "checkpoint_secs": self.checkpoint_secs,
            "resume": self.resume,
        })
    }

    /// The configuration that a resumed run must match, as checkpoints record it under
    /// `training_config.config` (`norms`: the normalisation of each volume; `n_coords`: the
    /// number of training coordinates).
    pub fn config_json(&self, norms: &[Normalisation], n_coords: usize) -> Value {
        // Floats as their shortest exact text: JSON number parsing is not guaranteed to round-trip.
        let f = |x: f64| Value::String(x.to_string());
        let f32s = |x: f32| Value::String(x.to_string());
        let m = &self.model;
        // Truncated-normal runs record `init_stddev` as before this choice existed, so their
        // checkpoints still resume; any other initialisation is recorded by name.
        let (init_key, init_value) = match self.init {
            WeightInit::TruncatedNormal(stddev) => ("init_stddev", f32s(stddev)),
            WeightInit::GlorotUniform => ("init", Value::String("glorot_uniform".into())),
        };
        let mut config = json!({
            "model": { "depth": m.depth, "features": m.features, "fov": m.fov, "deltas": m.deltas },
            "batch_size": self.batch_size,
            "optimizer": format!("{:?}", self.optimizer),
            "learning_rate": f32s(self.learning_rate),
            "momentum": f32s(self.momentum),
            "adam": [f32s(self.adam_beta1), f32s(self.adam_beta2), f32s(self.adam_epsilon)],
            "clip": f32s(self.clip),
            "decay": [f32s(self.decay_rate), self.decay_steps, self.smooth_decay],
            "warmup_steps": self.warmup_steps,
            "fov_policy": format!("{:?}", self.fov_policy),
            "fov_moves": self.fov_moves,
            "move_threshold": f32s(self.move_threshold),
            "shuffle_moves": self.shuffle_moves,
            "augment": [self.augment.reflect, self.augment.permute_xy, self.augment.permute_z],
            "seed": self.seed,
            "coordinates": n_coords,
            "volumes": norms.iter().map(|n| json!({"name": n.name, "mean": f(n.mean), "stddev": f(n.stddev)})).collect::<Vec<_>>(),
        });
        config[init_key] = init_value;
        config
    }
}
