//! The data-parallel flags of `ffn train` (`--comm`, `--ranks`, `--lr-scaling`, ...), turned into
//! [`DataParallelOptions`].

use std::path::PathBuf;

use ffn_comm::Backend;
use ffn_comm::data_parallel::DataParallelOptions;
use ffn_core::training::distributed::LrScaling;

/// `--lr-scaling` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LrScalingArg {
    /// Same learning rate on any number of ranks.
    None,
    /// Learning rate x ranks (the seed paper).
    Linear,
    /// Learning rate x sqrt(ranks).
    Sqrt,
}

impl From<LrScalingArg> for LrScaling {
    fn from(a: LrScalingArg) -> Self {
        match a {
            LrScalingArg::None => LrScaling::None,
            LrScalingArg::Linear => LrScaling::Linear,
            LrScalingArg::Sqrt => LrScaling::Sqrt,
        }
    }
}

fn parse_backend(s: &str) -> std::result::Result<Backend, String> {
    s.parse::<Backend>().map_err(|e| e.to_string())
}

/// Data-parallel options of `ffn train`.
#[derive(clap::Args, Debug, Clone)]
pub struct DistArgs {
    /// Data-parallel training over this communicator: local (threads of this process, --ranks N),
    /// shm or zmq (processes started by `ffn launch -n N -- train ...`), hier (shm inside a host,
    /// zmq between hosts; reads LOCAL_RANK / LOCAL_WORLD_SIZE), mpi (under mpirun; detected
    /// without this flag).
    #[arg(long, value_name = "BACKEND", value_parser = parse_backend)]
    pub comm: Option<Backend>,
    /// Ranks (threads) of `--comm local`.
    #[arg(long, default_value_t = 1)]
    pub ranks: usize,
    /// Learning rate scaling with the number of ranks.
    #[arg(long, value_enum, default_value_t = LrScalingArg::Linear)]
    pub lr_scaling: LrScalingArg,
    /// Steps over which the rank scaling ramps linearly from the base rate to the scaled rate.
    #[arg(long, default_value_t = 2000)]
    pub lr_scaling_warmup: u64,
    /// Minimum size of a fused allreduce bucket in KiB (0: one bucket per layer).
    #[arg(long, default_value_t = 256)]
    pub bucket_kib: usize,
    /// Reduce all gradients after backward instead of overlapping with it.
    #[arg(long)]
    pub no_overlap: bool,
    /// Compare parameter checksums across ranks every N steps and at the end (0: only at the end).
    #[arg(long, default_value_t = 100)]
    pub checksum_every: u64,
    /// Write a Chrome-trace timeline (chrome://tracing, Perfetto) of the first steps to this file.
    #[arg(long, value_name = "TRACE_JSON")]
    pub timeline: Option<PathBuf>,
    /// Steps recorded in the timeline.
    #[arg(long, default_value_t = 50)]
    pub timeline_steps: u64,
    /// Seconds before a dead or stalled peer is an error (default: FFN_COMM_TIMEOUT or 60).
    #[arg(long, value_name = "SECONDS")]
    pub comm_timeout: Option<f64>,
}

impl DistArgs {
    /// The library's options for these flags.
    pub fn options(&self) -> DataParallelOptions {
        DataParallelOptions {
            backend: self.comm,
            ranks: self.ranks,
            lr_scaling: self.lr_scaling.into(),
            lr_scaling_warmup: self.lr_scaling_warmup,
            bucket_kib: self.bucket_kib,
            overlap: !self.no_overlap,
            checksum_every: self.checksum_every,
            timeline: self.timeline.clone(),
            timeline_steps: self.timeline_steps,
            comm_timeout: self.comm_timeout,
        }
    }
}
