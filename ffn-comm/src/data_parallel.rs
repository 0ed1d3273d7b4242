//! Synchronous data-parallel training for `ffn train --comm local|shm|mpi|zmq`.
//!
//! Every rank runs the ordinary training loop on its own examples (coordinates strided by rank,
//! generator RNG streams numbered across ranks) through a [`DataParallel`] handle that:
//!
//! - checks before anything else that all ranks run the same configuration (a fingerprint, then a
//!   field-by-field comparison that names what differs) — [`consistency`];
//! - broadcasts parameters and optimiser state from rank 0 before step 1 — [`state`];
//! - averages gradients with allreduces of fused buckets in a fixed order, started on a
//!   communication thread while backward is still running (overlap) — [`step`], [`comm_thread`];
//! - scales the learning rate with the number of ranks (none / linear / sqrt, with warm-up);
//! - compares parameter checksums every `--checksum-every` steps and at the end;
//! - gathers every rank's example state into rank 0's checkpoints so that `--resume` continues
//!   exactly on the same number of ranks, and restarts the examples on another number;
//! - sums every rank's confusion counts for the metrics in the log — [`metrics`];
//! - records a Chrome-trace timeline (`--timeline`) — [`timeline`].
//!
//! Without `--comm` (and outside `mpirun`) nothing changes: a group of one, no thread, the plain
//! single-machine step.

pub mod comm_thread;
pub mod consistency;
pub mod metrics;
pub mod scaling;
pub mod state;
pub mod step;
pub mod timeline;

use std::cell::RefCell;
use std::path::PathBuf;
use std::time::Duration;

use crate::{Backend, CommOptions, Communicator};
use anyhow::{Context, Result, anyhow, bail};
use ffn_core::network::ConvStack3d;
use ffn_core::training::distributed::{BucketPlan, LrScaling, RankScaling};
use ffn_core::training::trainer::TrainerConfig;

use comm_thread::CommThread;
use timeline::Timeline;

/// Options of data-parallel training (the `ffn train` flags `--comm`, `--ranks`, `--lr-scaling`,
/// ... map one to one onto these fields).
#[derive(Clone, Debug, PartialEq)]
pub struct DataParallelOptions {
    /// The communicator: `Local` (threads of this process, [`Self::ranks`] of them), `Shm` or
    /// `Zmq` (processes started by `ffn launch`), `Mpi` (under mpirun; detected when `None`).
    /// `None` outside a launcher: a group of one.
    pub backend: Option<Backend>,
    /// Ranks (threads) of the local backend.
    pub ranks: usize,
    /// Learning-rate scaling with the number of ranks.
    pub lr_scaling: LrScaling,
    /// Steps over which the rank scaling ramps linearly from the base rate to the scaled rate.
    pub lr_scaling_warmup: u64,
    /// Minimum size of a fused allreduce bucket in KiB (0: one bucket per layer).
    pub bucket_kib: usize,
    /// Start each bucket's allreduce while backward still runs (false: after backward).
    pub overlap: bool,
    /// Compare parameter checksums across ranks every N steps and at the end (0: only at the end).
    pub checksum_every: u64,
    /// Write a Chrome-trace timeline of the first steps to this file.
    pub timeline: Option<PathBuf>,
    /// Steps recorded in the timeline.
    pub timeline_steps: u64,
    /// Seconds before a dead or stalled peer is an error (default: FFN_COMM_TIMEOUT or 60).
    pub comm_timeout: Option<f64>,
}

impl Default for DataParallelOptions {
    fn default() -> Self {
        Self {
            backend: None,
            ranks: 1,
            lr_scaling: LrScaling::Linear,
            lr_scaling_warmup: 2000,
            bucket_kib: 256,
            overlap: true,
            checksum_every: 100,
            timeline: None,
            timeline_steps: 50,
            comm_timeout: None,
        }
    }
}

impl DataParallelOptions {
    /// The options of a job over `backend` (with `ranks` threads for the local backend; process
    /// backends take their size from the launcher), the rest at their defaults.
    pub fn over(backend: Backend, ranks: usize) -> Self {
        Self {
            backend: Some(backend),
            ranks: if backend == Backend::Local { ranks } else { 1 },
            ..Self::default()
        }
    }

    /// The settings that must agree across ranks, as JSON (part of the configuration check).
    pub fn settings(&self) -> serde_json::Value {
        serde_json::json!({
            "lr_scaling": self.lr_scaling.name(),
            "lr_scaling_warmup": self.lr_scaling_warmup,
            "bucket_kib": self.bucket_kib,
            "overlap": self.overlap,
            "checksum_every": self.checksum_every,
            "timeline": self.timeline.is_some(),
            "timeline_steps": self.timeline_steps,
        })
    }
}

/// The launcher variables that say a process runs under `mpirun` / an MPI process manager.
const MPI_ENV: [&str; 2] = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"];

/// The backend to use: `--comm`, or MPI when started by mpirun, or none.
pub fn select_backend(
    args: &DataParallelOptions,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Backend>> {
    if let Some(b) = args.backend {
        if b != Backend::Local && args.ranks != 1 {
            bail!(
                "--ranks {} is only for --comm local; start {} ranks with `ffn launch -n N -- train ...` or mpirun -n N",
                args.ranks,
                b
            );
        }
        b.ensure_compiled_in()
            .with_context(|| format!("--comm {b}"))?;
        return Ok(Some(b));
    }
    if args.ranks != 1 {
        bail!("--ranks {} needs --comm local", args.ranks);
    }
    if let Some((var, val)) = MPI_ENV.iter().find_map(|v| env(v).map(|x| (*v, x))) {
        Backend::Mpi.ensure_compiled_in().with_context(|| {
            format!("running under an MPI launcher ({var}={val}) but this ffn has no MPI; or pass --comm shm/zmq")
        })?;
        return Ok(Some(Backend::Mpi));
    }
    Ok(None)
}

/// Whether this process prints the run's summary: rank 0, or a process outside any job.
pub fn is_root_process(args: &DataParallelOptions) -> bool {
    let env = |k: &str| std::env::var(k).ok();
    match select_backend(args, env) {
        Ok(Some(b)) if b != Backend::Local => {
            let rank = if b == Backend::Mpi {
                ["OMPI_COMM_WORLD_RANK", "PMI_RANK"]
                    .iter()
                    .find_map(|v| env(v))
            } else {
                crate::WorldInfo::from_env()
                    .ok()
                    .map(|w| w.rank.to_string())
            };
            rank.is_none_or(|r| r.trim() == "0")
        }
        _ => true,
    }
}

fn comm_options(args: &DataParallelOptions) -> Result<CommOptions> {
    let mut o = CommOptions::from_env().context("communicator options from the environment")?;
    if let Some(t) = args.comm_timeout {
        if !(t.is_finite() && t > 0.0 && t < 1e9) {
            bail!("--comm-timeout {t}: expected a positive number of seconds");
        }
        o.timeout = Duration::from_secs_f64(t);
        o.stall_warning = o.stall_warning.min(o.timeout / 2);
    }
    Ok(o)
}

/// Runs `body` as every rank of the job that `args` describes and returns rank 0's result (the
/// only rank for process backends, whose other processes return their own). With `--comm local
/// --ranks N` the ranks are N threads; when one fails, the others stop at their next collective
/// and the errors are reported together.
pub fn run<T: Send>(
    args: &DataParallelOptions,
    body: impl Fn(&DataParallel) -> Result<T> + Sync,
) -> Result<T> {
    let Some(backend) = select_backend(args, |k| std::env::var(k).ok())? else {
        let dist = DataParallel::single(args);
        let out = body(&dist)?;
        dist.finish()?;
        return Ok(out);
    };
    let opts = comm_options(args)?;
    if backend != Backend::Local {
        let factory: comm_thread::Factory = Box::new(move || crate::connect(backend, &opts));
        let dist = DataParallel::connect(args, factory)?;
        let out = body(&dist)?;
        dist.finish()?;
        return Ok(out);
    }
    if args.ranks == 0 || args.ranks > 1024 {
        bail!("--ranks {}: expected 1..=1024", args.ranks);
    }
    let group = crate::local::LocalComm::group_with(args.ranks, opts).context("--comm local")?;
    let body = &body;
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = group
            .into_iter()
            .enumerate()
            .map(|(rank, comm)| {
                std::thread::Builder::new()
                    .name(format!("ffn-rank-{rank}"))
                    .spawn_scoped(s, move || -> Result<T> {
                        let dist = DataParallel::connect(
                            args,
                            Box::new(move || Ok(Box::new(comm) as Box<dyn Communicator>)),
                        )?;
                        let out = body(&dist)?;
                        dist.finish()?;
                        Ok(out)
                    })
                    .map_err(|e| anyhow!("starting rank thread {rank}: {e}"))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.and_then(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))))
            .collect()
    });
    let mut first = None;
    let mut errors = Vec::new();
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Ok(v) if rank == 0 => first = Some(v),
            Ok(_) => {}
            Err(e) => errors.push(format!("rank {rank}: {e:#}")),
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("\n"));
    }
    first.ok_or_else(|| anyhow!("rank 0 returned no result"))
}

/// One rank's view of a data-parallel job (a group of one without `--comm`). All methods take
/// `&self`, so closures of the training loop can share it.
pub struct DataParallel {
    args: DataParallelOptions,
    comm: Option<CommThread>,
    rank: usize,
    size: usize,
    scaling: RankScaling,
    plan: RefCell<Option<BucketPlan>>,
    /// Reused bucket buffers (index = bucket).
    pool: RefCell<Vec<Vec<f32>>>,
    timeline: RefCell<Option<TimelineState>>,
    last_phases: step::PhaseCell,
    /// Use the measured step even without a communicator (benchmarks).
    instrument: bool,
}

/// The timeline being recorded and its window.
struct TimelineState {
    line: Timeline,
    /// First recorded step (set by the first step).
    first_step: Option<u64>,
    written: bool,
}

impl DataParallel {
    fn new(args: &DataParallelOptions, comm: Option<CommThread>) -> Self {
        let (rank, size) = comm.as_ref().map_or((0, 1), |c| (c.rank(), c.size()));
        let scaling = RankScaling {
            mode: args.lr_scaling,
            ranks: size,
            warmup_steps: args.lr_scaling_warmup,
        };
        let timeline = args.timeline.as_ref().map(|_| TimelineState {
            line: Timeline::new(),
            first_step: None,
            written: false,
        });
        Self {
            args: args.clone(),
            comm,
            rank,
            size,
            scaling,
            plan: RefCell::new(None),
            pool: RefCell::new(Vec::new()),
            timeline: RefCell::new(timeline),
            last_phases: Default::default(),
            instrument: false,
        }
    }

    /// A group of one without a communicator.
    pub fn single(args: &DataParallelOptions) -> Self {
        Self::new(args, None)
    }

    /// A group of one that still measures its phases ([`DataParallel::last_phases`]): the baseline of
    /// scaling benchmarks, with the compute of the plain step and no communication.
    pub fn single_measured(args: &DataParallelOptions) -> Self {
        Self {
            instrument: true,
            ..Self::new(args, None)
        }
    }

    /// Joins a job through a communicator created by `factory` on the communication thread.
    pub fn connect(args: &DataParallelOptions, factory: comm_thread::Factory) -> Result<Self> {
        let comm = CommThread::start(factory)?;
        Ok(Self::new(args, Some(comm)))
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether this is rank 0 (the one that writes checkpoints, logs and pictures).
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// The backend name, if any.
    pub fn backend(&self) -> Option<&'static str> {
        self.comm.as_ref().map(CommThread::backend)
    }

    /// The learning-rate factor rule of this job.
    pub fn scaling(&self) -> RankScaling {
        self.scaling
    }

    /// The options.
    pub fn args(&self) -> &DataParallelOptions {
        &self.args
    }

    pub(crate) fn comm(&self) -> Option<&CommThread> {
        self.comm.as_ref()
    }

    /// `cfg` with this rank's share of the coordinates (offset = rank, stride = ranks).
    pub fn trainer_config(&self, cfg: TrainerConfig) -> TrainerConfig {
        TrainerConfig {
            coord_offset: self.rank as u64,
            coord_stride: self.size as u64,
            ..cfg
        }
    }

    /// The bucket plan for `net` (built once).
    pub(crate) fn plan_for(&self, net: &ConvStack3d) -> Result<std::cell::Ref<'_, BucketPlan>> {
        if self
            .plan
            .borrow()
            .as_ref()
            .is_none_or(|p| p.total() != net.params().len())
        {
            let floats = self.args.bucket_kib.saturating_mul(1024) / 4;
            let plan = BucketPlan::new(&net.grad_ready_order(), floats)
                .map_err(|e| anyhow!("gradient buckets: {e}"))?;
            *self.pool.borrow_mut() = plan
                .buckets()
                .iter()
                .enumerate()
                .map(|(i, b)| vec![0.0; b.len() + usize::from(i == 0)])
                .collect();
            *self.plan.borrow_mut() = Some(plan);
        }
        std::cell::Ref::filter_map(self.plan.borrow(), Option::as_ref)
            .map_err(|_| anyhow!("internal: no bucket plan"))
    }

    /// Broadcast of `bytes` from `root` (lengths must agree); identity without a communicator.
    pub(crate) fn broadcast(&self, bytes: Vec<u8>, root: usize) -> Result<Vec<u8>> {
        match &self.comm {
            Some(c) => c.broadcast(bytes, root),
            None => Ok(bytes),
        }
    }

    /// Broadcast of a variable-length message from `root`: its length first, then the bytes.
    pub(crate) fn broadcast_message(&self, bytes: Vec<u8>, root: usize) -> Result<Vec<u8>> {
        let len = self.broadcast((bytes.len() as u64).to_le_bytes().to_vec(), root)?;
        let len = u64::from_le_bytes(
            len.try_into()
                .map_err(|_| anyhow!("internal: bad length message"))?,
        );
        let buf = if self.rank == root {
            bytes
        } else {
            vec![0u8; usize::try_from(len)?]
        };
        self.broadcast(buf, root)
    }

    /// Element-wise sum over ranks; identity without a communicator.
    pub fn sum(&self, buf: Vec<f32>) -> Result<Vec<f32>> {
        match &self.comm {
            Some(c) => c.sum(buf),
            None => Ok(buf),
        }
    }

    /// Rank 0's value of a decision, on every rank (e.g. "the time limit is reached", which each
    /// rank's clock would decide differently). No collective when `needed` is false on all ranks
    /// (it must be the same on all ranks: it comes from the checked configuration).
    pub fn agree_if(&self, needed: bool, local: impl FnOnce() -> bool) -> Result<bool> {
        if !needed {
            return Ok(false);
        }
        let v = local();
        if self.comm.is_none() {
            return Ok(v);
        }
        let b = self.broadcast(vec![u8::from(v)], 0)?;
        Ok(b.first() == Some(&1))
    }

    /// The lowest rank that has a value (e.g. "a stop signal arrived: SIGUSR1") and its value, on
    /// every rank; `None` when no rank has one. No collective when `needed` is false (it must be
    /// the same on all ranks). Values up to 2^24 travel exactly.
    pub fn agree_first(
        &self,
        needed: bool,
        local: impl FnOnce() -> Option<u32>,
    ) -> Result<Option<(usize, u32)>> {
        if !needed {
            return Ok(None);
        }
        let v = local();
        if let Some(v) = v.filter(|&v| v >= 1 << 24) {
            bail!("internal: value {v} to agree on is not below 2^24");
        }
        if self.comm.is_none() {
            return Ok(v.map(|v| (self.rank, v)));
        }
        // One slot per rank: 0 for none, value + 1 otherwise; the sum holds every rank's slot.
        let mut slots = vec![0f32; self.size()];
        slots[self.rank] = v.map_or(0.0, |v| (v + 1) as f32);
        let all = self.sum(slots)?;
        Ok(all
            .iter()
            .position(|&s| s > 0.0)
            .map(|r| (r, all[r] as u32 - 1)))
    }

    /// Writes the timeline if it is still pending (called at the end of the window and at the end
    /// of training; collective).
    pub fn flush_timeline(&self) -> Result<()> {
        let origin = {
            let t = self.timeline.borrow();
            let Some(t) = t.as_ref() else { return Ok(()) };
            if t.written {
                return Ok(());
            }
            t.line.origin_unix_us()
        };
        // Rank 0's origin becomes time zero.
        let origin = self.broadcast(origin.to_le_bytes().to_vec(), 0)?;
        let origin = f64::from_le_bytes(
            origin
                .try_into()
                .map_err(|_| anyhow!("internal: bad origin"))?,
        );
        let mine = match self.timeline.borrow().as_ref() {
            Some(t) => t.line.to_trace_events(self.rank, origin),
            None => Vec::new(),
        };
        let mut all = vec![Vec::new(); self.size];
        for (r, slot) in all.iter_mut().enumerate() {
            let text = if r == self.rank {
                serde_json::to_vec(&mine)?
            } else {
                Vec::new()
            };
            let text = self.broadcast_message(text, r)?;
            if self.is_root() {
                *slot = serde_json::from_slice(&text).context("timeline events of a rank")?;
            }
        }
        if let Some(t) = self.timeline.borrow_mut().as_mut() {
            t.written = true;
        }
        if let (true, Some(path)) = (self.is_root(), &self.args.timeline) {
            let plan = self.plan.borrow();
            let meta = serde_json::json!({
                "ranks": self.size,
                "backend": self.backend().unwrap_or("none"),
                "overlap": self.args.overlap,
                "buckets": plan.as_ref().map(|p| p.buckets().iter().map(|b| [b.start, b.end]).collect::<Vec<_>>()),
            });
            timeline::write_trace(path, &all, meta)?;
        }
        Ok(())
    }

    /// The end of a successful run on this rank: the pending timeline is written.
    pub fn finish(&self) -> Result<()> {
        self.flush_timeline()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_agree_across_local_ranks() {
        let opts = DataParallelOptions::over(Backend::Local, 3);
        // Only rank 0's clock counts (if).
        let got = run(&opts, |g| {
            let first = g.agree_first(true, || (g.rank() >= 1).then(|| 10 + g.rank() as u32))?;
            let none = g.agree_first(true, || None)?;
            let root = g.agree_if(true, || g.rank() != 0)?;
            let skipped = g.agree_first(false, || Some(1))?;
            Ok((first, none, root, skipped))
        })
        .unwrap();
        // Ranks 1 and 2 have a value: rank 0, which has none, learns rank 1's.
        assert_eq!(got, (Some((1, 11)), None, false, None));
        let single = DataParallel::single(&DataParallelOptions::default());
        assert_eq!(single.agree_first(true, || Some(7)).unwrap(), Some((0, 7)));
        assert!(single.agree_first(true, || Some(1 << 24)).is_err());
    }
}
