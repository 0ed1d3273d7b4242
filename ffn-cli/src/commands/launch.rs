//! `ffn launch -n N -- <ffn subcommand args>`: starts N ranks of `ffn` on this host, alone or as
//! one host of several (`--nnodes`, `--node-rank`, `--master-addr`, `--master-port`;
//! [`ffn_comm::launch`] does the work).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use ffn_comm::launch::{Bind, HostGroup, LaunchOptions, launch};

/// Arguments of `ffn launch`.
#[derive(clap::Args, Debug)]
#[command(trailing_var_arg = true)]
pub struct Args {
    /// Number of ranks (processes) to start.
    #[arg(short = 'n', long = "nproc", value_name = "N")]
    pub nproc: usize,
    /// Stop every rank and fail (exit status 124) if the job runs longer than this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Pin rank r to the r-th CPU this launcher may use (`core`, the default when there are at most
    /// as many ranks as CPUs, like mpirun), or let the OS place the ranks (`none`).
    #[arg(long, value_enum)]
    pub bind: Option<BindArg>,
    /// After a rank fails, start all ranks again up to N times; `ffn train` ranks then get
    /// `--resume` and continue from the newest valid checkpoint. Each restart is logged with its
    /// cause. No restart after a stop on SIGTERM / SIGUSR1 or the --timeout.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_restarts: usize,
    /// Number of hosts of the job (torchrun's `--nnodes`): run one `ffn launch` on every host, each
    /// with its `--node-rank`, the same `-n`, `--master-addr`, `--master-port` and `FFN_COMM_TOKEN`.
    #[arg(long, value_name = "HOSTS", default_value_t = 1)]
    pub nnodes: usize,
    /// This host's index, `0..HOSTS`; host 0 holds rank 0 and the rendezvous.
    #[arg(long, value_name = "INDEX", default_value_t = 0)]
    pub node_rank: usize,
    /// Host 0's address as every host reaches it (required with `--nnodes` above 1).
    #[arg(long, value_name = "ADDR")]
    pub master_addr: Option<String>,
    /// Host 0's rendezvous port (with `--nnodes` above 1).
    #[arg(long, value_name = "PORT", default_value_t = 29500)]
    pub master_port: u16,
    /// Present the ranks as hosts of K ranks each (LOCAL_RANK = rank % K, LOCAL_WORLD_SIZE = K),
    /// to try the `hier` backend on one machine; K must divide N. Default: one host of N ranks.
    #[arg(long, value_name = "K")]
    pub ranks_per_host: Option<usize>,
    /// The `ffn` subcommand and its arguments that every rank runs (after `--`).
    #[arg(required = true, allow_hyphen_values = true, value_name = "FFN_ARGS")]
    pub command: Vec<String>,
}

/// Where rank processes may run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindArg {
    /// One CPU per rank.
    Core,
    /// No pinning.
    None,
}

/// Runs the job; exits the process with the first failing rank's status when a rank fails.
pub fn run(args: Args) -> Result<()> {
    let timeout = match args.timeout {
        Some(t) if !(t.is_finite() && t > 0.0) => {
            bail!("ffn launch: --timeout {t}: expected a positive number of seconds")
        }
        t => t.map(Duration::from_secs_f64),
    };
    let exe =
        std::env::current_exe().context("ffn launch: finding the path of the ffn executable")?;
    let restart_args = match args.command.first().map(String::as_str) {
        Some("train") => vec!["--resume".to_string()],
        _ => Vec::new(),
    };
    let hosts = if args.nnodes > 1 || args.master_addr.is_some() {
        Some(HostGroup {
            hosts: args.nnodes,
            host: args.node_rank,
            master_addr: args.master_addr.clone().ok_or_else(|| {
                anyhow::anyhow!(
                    "ffn launch --nnodes {}: --master-addr: expected host 0's address, found none",
                    args.nnodes
                )
            })?,
            master_port: args.master_port,
            token: std::env::var("FFN_COMM_TOKEN").unwrap_or_default(),
        })
    } else if args.node_rank != 0 {
        bail!(
            "ffn launch --node-rank {}: expected 0 for a job on one host (set --nnodes)",
            args.node_rank
        );
    } else {
        None
    };
    let code = launch(&LaunchOptions {
        hosts,
        timeout,
        max_restarts: args.max_restarts,
        ranks_per_host: args.ranks_per_host,
        restart_args,
        bind: args.bind.map(|b| match b {
            BindArg::Core => Bind::Core,
            BindArg::None => Bind::None,
        }),
        ..LaunchOptions::new(exe, args.command, args.nproc)
    })?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}
