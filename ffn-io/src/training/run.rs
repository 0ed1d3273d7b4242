//! [`TrainingRun`]: trainer, network, optimiser, schedule, checkpoints, log and resume of one
//! training run, on one machine or as one rank of a data-parallel group.

use std::fs;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use ffn_comm::data_parallel::DataParallel;
use ffn_comm::data_parallel::consistency::diff_json;
use ffn_comm::data_parallel::state::{bytes_to_f32, f32_to_bytes, is_rank_state};
use ffn_core::conv::winograd::ConvAlgorithm;
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::ConvStack3d;
use ffn_core::optim::Optimizer;
use ffn_core::rng::Rng;
use ffn_core::training::step::{StepBuffers, StepOptions};
use ffn_core::training::trainer::{Trainer, TrainerConfig};
use serde_json::{Value, json};

use super::log::{Log, LogRow, write_training_curve};
use super::options::TrainOptions;
use super::stop;
use super::volumes::{Normalisation, VolumeReads, load_training_data};
use crate::checkpoint::{
    Checkpoint, SkippedCheckpoint, check_architecture, checkpoint_file_name,
    newest_valid_checkpoint, save_checkpoint_in_dir,
};
use crate::coords::read_coords;

/// Name of the extra checkpoint buffer that holds the trainer (example) state.
pub const TRAINER_STATE: &str = "trainer_state";

/// Where the weights of a run came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Start {
    /// Fresh weights from the seed.
    Fresh,
    /// The run's own checkpoint (resume): path and step.
    Resumed(PathBuf, u64),
    /// Another model's weights with a fresh optimiser (fine-tuning): path and its architecture.
    InitialWeights(PathBuf, ModelConfig),
}

/// What one step did.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutcome {
    /// Steps done after this one.
    pub step: u64,
    /// The step's mean loss (over all ranks).
    pub loss: f32,
    /// The learning rate used.
    pub lr: f32,
    /// The metrics row, on steps that end a report window.
    pub row: Option<LogRow>,
    /// The checkpoint written after this step, if any.
    pub checkpoint: Option<PathBuf>,
}

/// What a finished run did.
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
    /// The normalisation used for each volume.
    pub normalisation: Vec<Normalisation>,
    /// Why the run stopped before its limits (a stop signal, [`super::stop`]); `None` when it
    /// reached them.
    pub stopped_by: Option<String>,
    /// Mean FOV evaluations per second over this process's steps (all ranks).
    pub examples_per_s: f64,
}

/// One training run. On several ranks every rank builds its own run over the same options and
/// its [`DataParallel`] handle; rank 0 alone writes files.
pub struct TrainingRun<'g> {
    opts: TrainOptions,
    group: &'g DataParallel,
    trainer: Trainer,
    net: ConvStack3d,
    optimizer: Box<dyn Optimizer>,
    step_opts: StepOptions,
    bufs: StepBuffers,
    config: Value,
    norms: Vec<Normalisation>,
    volume_reads: VolumeReads,
    ckpt_dir: PathBuf,
    log: Log,
    rows: Vec<LogRow>,
    start: Start,
    skipped: Vec<SkippedCheckpoint>,
    stopped: std::cell::RefCell<Option<String>>,
    start_step: u64,
    /// CPU seconds recorded by the resumed checkpoint, and the step from which they count.
    cpu_before: (f64, u64),
    started: Instant,
    window: (Instant, u64),
    last_checkpoint_time: Instant,
    checkpoint: Option<PathBuf>,
}

/// Splits a checkpoint's extra buffers into trainer state, other ranks' states and optimiser state.
type SplitState = (
    Option<Vec<f32>>,
    Vec<(String, Vec<f32>)>,
    Vec<(String, Vec<f32>)>,
);

fn split_state(buffers: Vec<(String, Vec<f32>)>) -> SplitState {
    let (mut state, mut ranks, mut opt) = (None, Vec::new(), Vec::new());
    for (name, buf) in buffers {
        if name == TRAINER_STATE {
            state = Some(buf);
        } else if is_rank_state(&name) {
            ranks.push((name, buf));
        } else {
            opt.push((name, buf));
        }
    }
    (state, ranks, opt)
}

/// The fields of `now` that differ from the checkpoint's `saved` configuration (fields only in
/// the checkpoint do not count: they are options this run did not use, such as the initial
/// weights of a fine-tuning run).
fn config_changes(now: &Value, saved: &Value) -> Vec<String> {
    let mut diffs = Vec::new();
    diff_json(now, saved, "", &mut diffs);
    diffs
        .into_iter()
        .filter(|(_, a, _)| a != "null")
        .map(|(p, a, b)| match b.as_str() {
            "null" => format!("{p}: missing in the checkpoint"),
            _ => format!("{p}: now {a}, checkpoint {b}"),
        })
        .collect()
}

/// What a resumed run's configuration `now` keeps from the checkpoint's `saved` one although its
/// options do not say it again: the weights the run started from (`init_checkpoint`, given to
/// the run's first start only), so that every checkpoint of the run records them.
fn keep_provenance(now: &mut Value, saved: &Value) {
    if let Some(init) = saved
        .get("init_checkpoint")
        .filter(|_| now.get("init_checkpoint").is_none())
    {
        now["init_checkpoint"] = init.clone();
    }
}

impl<'g> TrainingRun<'g> {
    /// Reads the data, checks the options, and builds the run: resumed from the newest checkpoint
    /// (with `opts.resume`), from initial weights, or fresh. Collective on a group: checks that
    /// every rank has the same configuration and copies rank 0's weights to all.
    pub fn new(opts: TrainOptions, group: &'g DataParallel) -> Result<Self> {
        let model = opts.model;
        model.validate().map_err(anyhow::Error::msg)?;
        let coord_file = read_coords(&opts.coords)?;
        let data = load_training_data(&opts, &coord_file.volumes)?;
        let (norms, volume_reads) = (data.normalisations, data.reads);
        let n_coords = coord_file.coords.len();
        let schedule = opts.schedule();
        schedule.validate()?;
        ensure!(
            opts.clip >= 0.0,
            "clip (--clip): expected >= 0, found {}",
            opts.clip
        );
        ensure!(
            opts.report_every >= 1,
            "report_every (--report-every): expected >= 1"
        );
        ensure!(
            opts.conv != ConvAlgorithm::Bf16,
            "conv (--conv): {} is an algorithm of inference only; training computes in \
             float32 by winograd, winograd3d, winograd1d or direct (expected one of them)",
            opts.conv.name()
        );
        let step_opts = StepOptions {
            schedule,
            clip: (opts.clip > 0.0).then_some(opts.clip),
        };
        let mut trainer = Trainer::with_source(
            group.trainer_config(TrainerConfig::new(
                opts.example_config(),
                opts.batch_size,
                opts.seed,
            )),
            data.source,
            coord_file.coords,
        )
        .with_context(|| format!("training data from {}", opts.coords.display()))?;
        let init = opts
            .init_checkpoint
            .as_deref()
            .map(|p| crate::model::load_initial_weights(p, &model))
            .transpose()
            .context("init_checkpoint (--init-checkpoint)")?;
        let mut config = opts.config_json(&norms, n_coords);
        if let Some(m) = &init {
            // Only when given, so that runs without it keep the configuration they always had.
            config["init_checkpoint"] = json!({
                "path": m.path.display().to_string(),
                "params_checksum": format!("{:016x}", ffn_core::training::distributed::param_checksum(&m.params)),
            });
        }
        group.check_config(&opts.run_settings(), &config)?;
        let ckpt_dir = opts.out.join("checkpoints");
        fs::create_dir_all(&ckpt_dir)
            .with_context(|| format!("creating {}", ckpt_dir.display()))?;
        let mut optimizer = opts.make_optimizer();
        let mut cpu_before = (0.0f64, 0u64);
        let (resume_from, skipped) = match opts.resume {
            true => {
                let newest = newest_valid_checkpoint(&ckpt_dir)?;
                (newest.found, newest.skipped)
            }
            false => (None, Vec::new()),
        };
        let (mut net, start) = match resume_from {
            Some((path, ck)) => {
                if let Some(made_by) = crate::derived::derived_by(&ck.training_config) {
                    bail!(
                        "{}: {made_by} holds no optimiser state and cannot be resumed; start a run \
                         from it with --init-checkpoint",
                        path.display()
                    );
                }
                check_architecture(&path, &model, &ck.model)?;
                let saved = ck
                    .training_config
                    .get("config")
                    .cloned()
                    .unwrap_or(Value::Null);
                let changes = config_changes(&config, &saved);
                if !changes.is_empty() {
                    bail!(
                        "{}: cannot resume, the configuration changed: {}",
                        path.display(),
                        changes.join("; ")
                    );
                }
                keep_provenance(&mut config, &saved);
                let tc = &ck.training_config;
                cpu_before = match tc.get("cpu_seconds").and_then(Value::as_f64) {
                    Some(cpu) => (
                        cpu,
                        tc.get("cpu_seconds_from_step")
                            .and_then(Value::as_u64)
                            .unwrap_or(0),
                    ),
                    None => (0.0, ck.step),
                };
                let state_len = tc
                    .get("trainer_state_bytes")
                    .and_then(Value::as_u64)
                    .with_context(|| {
                        format!(
                            "{}: training_config.trainer_state_bytes missing",
                            path.display()
                        )
                    })?;
                let (state, rank_states, opt_state) = split_state(ck.optimizer);
                let state = state
                    .with_context(|| format!("{}: no {TRAINER_STATE} buffer", path.display()))?;
                if !group.restore_trainer(&mut trainer, &path, tc, &state, &rank_states, ck.step)? {
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
                optimizer
                    .load_state(&opt_state)
                    .with_context(|| format!("{}", path.display()))?;
                let step = ck.step;
                (
                    ConvStack3d::from_params(model, ck.params)?,
                    Start::Resumed(path, step),
                )
            }
            None => match init {
                Some(m) => (
                    ConvStack3d::from_params(model, m.params)?,
                    Start::InitialWeights(m.path, m.config),
                ),
                None => (
                    ConvStack3d::with_init(model, opts.init, &mut Rng::new(opts.seed)),
                    Start::Fresh,
                ),
            },
        };
        net.set_conv_algorithm(opts.conv);
        let start_step = trainer.steps();
        group.broadcast_initial(&mut net, optimizer.as_mut(), start_step)?;
        let resumed = matches!(start, Start::Resumed(..));
        let (log, rows) = if group.is_root() {
            Log::open(&opts.out, opts.log_format, resumed.then_some(start_step))?
        } else {
            (Log::none(opts.log_format), Vec::new())
        };
        let checkpoint = match &start {
            Start::Resumed(p, _) => Some(p.clone()),
            _ => None,
        };
        let bufs = StepBuffers::new(&net, &trainer);
        let now = Instant::now();
        Ok(Self {
            opts,
            group,
            trainer,
            net,
            optimizer,
            step_opts,
            bufs,
            config,
            norms,
            volume_reads,
            ckpt_dir,
            log,
            rows,
            start,
            skipped,
            stopped: Default::default(),
            start_step,
            cpu_before,
            started: now,
            window: (now, 0),
            last_checkpoint_time: now,
            checkpoint,
        })
    }

    /// Where the weights came from.
    pub fn start(&self) -> &Start {
        &self.start
    }

    /// Newer checkpoints a resume skipped because they did not load (newest first), and why.
    pub fn skipped_checkpoints(&self) -> &[SkippedCheckpoint] {
        &self.skipped
    }

    /// The step this process started at.
    pub fn start_step(&self) -> u64 {
        self.start_step
    }

    /// Steps done so far.
    pub fn steps(&self) -> u64 {
        self.trainer.steps()
    }

    /// The options.
    pub fn options(&self) -> &TrainOptions {
        &self.opts
    }

    /// The network (its current weights).
    pub fn network(&self) -> &ConvStack3d {
        &self.net
    }

    /// The normalisation of each volume.
    pub fn normalisation(&self) -> &[Normalisation] {
        &self.norms
    }

    /// How the training volumes are read: [`VolumeReads::Whole`] or [`VolumeReads::Regions`]
    /// (`Auto` resolved).
    pub fn volume_reads(&self) -> VolumeReads {
        self.volume_reads
    }

    /// The metrics rows so far (including those of earlier runs when resumed).
    pub fn rows(&self) -> &[LogRow] {
        &self.rows
    }

    /// The training curve's path.
    pub fn curve_path(&self) -> PathBuf {
        self.opts.out.join("training_curve.png")
    }

    /// Whether the run is done: the step limit or (decided by rank 0, for every rank) the time
    /// limit is reached. Collective on a group when a time limit is set.
    pub fn is_done(&self) -> Result<bool> {
        let limit = self.opts.max_seconds;
        if self.trainer.steps() >= self.opts.max_steps
            || self.group.agree_if(limit > 0, || {
                self.started.elapsed().as_secs_f64() >= limit as f64
            })?
        {
            return Ok(true);
        }
        let signal = self.group.agree_first(self.opts.stop_on_signal, || {
            stop::stop_requested().and_then(|s| u32::try_from(s).ok())
        })?;
        if let Some((rank, signal)) = signal {
            // Every rank receives the signal, but not necessarily before the same step.
            let mut why = stop::signal_name(signal as i32);
            if rank != self.group.rank() {
                why.push_str(&format!(" on rank {rank}"));
            }
            self.stopped.replace(Some(why));
            return Ok(true);
        }
        Ok(false)
    }

    /// Why the run stopped before its step and time limits ("SIGTERM", ...), once
    /// [`TrainingRun::is_done`] said so.
    pub fn stopped_by(&self) -> Option<String> {
        self.stopped.borrow().clone()
    }

    /// Runs one step: examples, forward, backward, gradient averaging across the group,
    /// optimiser; then the metrics row and checkpoint when due.
    pub fn step(&mut self) -> Result<StepOutcome> {
        let optimizer = &mut self.optimizer;
        let r = self.group.step(
            &mut self.trainer,
            &mut self.net,
            &mut self.bufs,
            &self.step_opts,
            |p, g, lr| optimizer.step(p, g, lr),
        )?;
        ensure!(
            r.loss.is_finite(),
            "step {}: loss is {} (diverged); lower the learning rate",
            self.trainer.steps(),
            r.loss
        );
        self.window.1 += 1;
        let step = self.trainer.steps();
        self.group.check_weights(step, self.net.params(), false)?;
        let mut row = None;
        if step.is_multiple_of(self.opts.report_every) {
            // Every rank's examples of the window, so every rank reports the same row.
            let m = self
                .group
                .sum_tracker(self.trainer.take_tracker())?
                .metrics();
            let secs = self.window.0.elapsed().as_secs_f64().max(1e-9);
            let fovs = self.window.1 * (self.opts.batch_size * self.group.size()) as u64;
            let r = LogRow {
                step,
                loss: m.loss,
                precision: m.precision,
                recall: m.recall,
                f1: m.f1,
                accuracy: m.accuracy,
                examples: m.examples,
                examples_per_s: fovs as f64 / secs,
                lr: r.lr as f64,
                elapsed_s: self.started.elapsed().as_secs_f64(),
            };
            if self.group.is_root() {
                self.log.append(&r)?;
            }
            self.rows.push(r.clone());
            row = Some(r);
            self.window = (Instant::now(), 0);
        }
        let every = self.opts.checkpoint_every;
        let by_steps = every > 0 && step.is_multiple_of(every);
        let secs = self.opts.checkpoint_secs;
        let by_time = self.group.agree_if(secs > 0, || {
            self.last_checkpoint_time.elapsed().as_secs() >= secs
        })?;
        let mut checkpoint = None;
        if by_steps || by_time {
            checkpoint = Some(self.save_checkpoint()?);
            self.last_checkpoint_time = Instant::now();
        }
        Ok(StepOutcome {
            step,
            loss: r.loss,
            lr: r.lr,
            row,
            checkpoint,
        })
    }

    /// Writes a checkpoint of the current step (on rank 0; collective on a group) and the
    /// training curve; returns its path.
    pub fn save_checkpoint(&mut self) -> Result<PathBuf> {
        let state = self.trainer.save_state();
        let mut buffers = self.optimizer.state();
        buffers.push((TRAINER_STATE.to_string(), bytes_to_f32(&state)));
        let distributed = self
            .group
            .gather_trainer_states(&self.trainer, &mut buffers)?;
        let step = self.trainer.steps();
        let path = if self.group.is_root() {
            let mut tc = json!({
                "config": self.config,
                "trainer_state_bytes": state.len(),
                "cpu_seconds": self.cpu_before.0 + crate::cpu_time::process_cpu_seconds(),
                "cpu_seconds_from_step": self.cpu_before.1,
            });
            if !distributed.is_null() {
                tc["distributed"] = distributed;
            }
            let ck = Checkpoint {
                model: *self.net.config(),
                params: self.net.params().to_vec(),
                optimizer: buffers,
                step,
                rng_state: Rng::new(self.opts.seed).state(),
                training_config: tc,
            };
            let path = save_checkpoint_in_dir(&self.ckpt_dir, &ck, self.opts.keep_checkpoints)?;
            write_training_curve(&self.curve_path(), &self.rows)?;
            path
        } else {
            self.ckpt_dir.join(checkpoint_file_name(step))
        };
        self.checkpoint = Some(path.clone());
        Ok(path)
    }

    /// Ends the run: checks the replicas agree, writes the final checkpoint (unless this step has
    /// one) and the training curve.
    pub fn finish(mut self) -> Result<Summary> {
        let steps = self.trainer.steps();
        self.group.check_weights(steps, self.net.params(), true)?;
        let final_name = checkpoint_file_name(steps);
        if self
            .checkpoint
            .as_ref()
            .is_none_or(|p| !p.ends_with(&final_name))
        {
            self.save_checkpoint()?;
        }
        let curve = self.curve_path();
        if self.group.is_root() {
            write_training_curve(&curve, &self.rows)?;
        }
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        let done = steps - self.start_step;
        Ok(Summary {
            steps,
            checkpoint: self.checkpoint.context("no checkpoint written")?,
            curve,
            log: self.log.path,
            normalisation: self.norms,
            stopped_by: self.stopped.into_inner(),
            examples_per_s: (done * (self.opts.batch_size * self.group.size()) as u64) as f64
                / secs,
            rows: self.rows,
        })
    }

    /// Steps until done, calling `observe` after every step, then [`TrainingRun::finish`].
    pub fn run(mut self, mut observe: impl FnMut(&Self, &StepOutcome)) -> Result<Summary> {
        while !self.is_done()? {
            let outcome = self.step()?;
            observe(&self, &outcome);
        }
        self.finish()
    }
}

/// Trains with `opts` on one machine, or on every rank of the data-parallel job `group`
/// describes (rank 0's summary is returned), calling `observe` after each step on each rank.
pub fn train(
    opts: &TrainOptions,
    group: &ffn_comm::data_parallel::DataParallelOptions,
    observe: impl Fn(&TrainingRun<'_>, &StepOutcome) + Sync,
) -> Result<Summary> {
    ffn_comm::data_parallel::run(group, |g| {
        TrainingRun::new(opts.clone(), g)?.run(|run, outcome| observe(run, outcome))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_fields_are_named_and_options_only_in_the_checkpoint_do_not_count() {
        let now = json!({"lr": "0.001", "model": {"depth": 3}, "new": 1});
        let saved = json!({"lr": "0.002", "model": {"depth": 3}, "init_checkpoint": {"path": "x"}});
        assert_eq!(
            config_changes(&now, &saved),
            [
                "lr: now \"0.001\", checkpoint \"0.002\"",
                "new: missing in the checkpoint"
            ]
        );
        assert!(config_changes(&now, &now).is_empty());
    }

    #[test]
    fn a_resumed_run_keeps_the_weights_it_started_from() {
        let init = json!({"path": "a.safetensors", "params_checksum": "0123"});
        let saved = json!({"lr": "0.001", "init_checkpoint": init});
        let mut now = json!({"lr": "0.001"});
        keep_provenance(&mut now, &saved);
        assert_eq!(now, saved);
        // Given again, the options' record stands; a run that never had one gets none.
        let mut given = json!({"lr": "0.001", "init_checkpoint": {"path": "b"}});
        keep_provenance(&mut given, &saved);
        assert_eq!(given["init_checkpoint"]["path"], "b");
        let mut fresh = json!({"lr": "0.001"});
        keep_provenance(&mut fresh, &json!({"lr": "0.001"}));
        assert!(fresh.get("init_checkpoint").is_none());
    }
}
