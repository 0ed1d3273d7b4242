//! The `ffn` command-line tool.
//!
//! Every subcommand lives in its own module under `commands/`. Errors are printed as one line (with
//! their context chain) and the process exits with status 1; panics are not used for user errors.

mod args;
mod commands;
mod threads;

use clap::Parser;
use std::process::ExitCode;

/// Flood-Filling Networks for volume electron microscopy: train, segment, evaluate.
#[derive(Parser, Debug)]
#[command(name = "ffn", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// The widest SIMD kernels the convolutions may use: `avx512`, `avx2` or `portable` (default:
    /// `$FFN_SIMD`, else the widest this CPU has). AVX2 and AVX-512 give the same bits; `portable`
    /// (and with it the direct convs in place of Winograd) differs in rounding.
    #[arg(long, global = true, value_parser = args::parse_simd)]
    simd: Option<ffn_core::conv::Simd>,
    #[command(subcommand)]
    command: commands::Command,
}

/// Restores the default action of SIGPIPE (terminate quietly), as C tools do, so that
/// `ffn eval ... | head` ends without a "Broken pipe" panic.
fn default_sigpipe() {
    const SIGPIPE: i32 = 13;
    const SIG_DFL: usize = 0;
    unsafe extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
    }
    // SAFETY: installing the default disposition for SIGPIPE has no preconditions.
    unsafe {
        signal(SIGPIPE, SIG_DFL);
    }
}

/// Prints `error: ...` as one line with a single write, so that the errors of several ranks
/// sharing a terminal or pipe (`ffn launch`, `mpirun`) never interleave within a line
/// (`eprintln!` may write a formatted line in pieces).
fn print_error(err: &anyhow::Error) {
    use std::io::Write;
    let line = format!("error: {err:#}\n");
    // Nothing sensible is left to do when stderr itself fails.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

fn main() -> ExitCode {
    default_sigpipe();
    let cli = Cli::parse();
    match args::simd_limit(cli.simd, std::env::var("FFN_SIMD").ok()) {
        Ok(Some(limit)) => ffn_core::conv::Simd::set_limit(limit),
        Ok(None) => {}
        Err(err) => {
            print_error(&err);
            return ExitCode::FAILURE;
        }
    }
    if let Err(err) = ffn_io::atomic::fail_writes_past_file_size_limit() {
        print_error(&err.into());
        return ExitCode::FAILURE;
    }
    if let Err(err) = threads::configure() {
        print_error(&err);
        return ExitCode::FAILURE;
    }
    match commands::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            print_error(&err);
            ExitCode::FAILURE
        }
    }
}
