//! Stopping a job cleanly on request: SIGTERM (what SLURM and most schedulers send before they
//! kill a preempted or timed-out job) or SIGUSR1 (what `sbatch --signal=USR1@T` sends T seconds
//! before the end) set a flag that long-running work polls. A training run
//! (`ffn_io::training::TrainOptions::stop_on_signal`) finishes its current step, agrees with the
//! other ranks, writes a checkpoint and returns; `ffn train` then exits with
//! [`STOPPED_EXIT_CODE`]. The launcher ([`crate::launch`]) forwards the signal to its ranks.
//!
//! Further signals while a stop is under way change nothing: a scheduler and a launcher may both
//! deliver one to the same rank, and a rank writing its checkpoint must not die of the second.
//! SIGINT (Ctrl-C) and SIGKILL still end a process at once.

use std::sync::atomic::{AtomicI32, Ordering};

/// `ffn train`'s (and `ffn launch`'s) exit status after a stop on a signal: 75 (`EX_TEMPFAIL`, "try again"): the run
/// is incomplete and `--resume` continues it exactly.
pub const STOPPED_EXIT_CODE: i32 = 75;

/// The signal that requested the stop, 0 while none did.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only async-signal-safe work: an atomic store of the first signal; later ones are no-ops.
    let _ = STOP_SIGNAL.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
}

/// Installs the handlers of SIGTERM and SIGUSR1 for this process.
///
/// # Errors
/// The operating system refused a handler.
pub fn install_stop_signals() -> std::io::Result<()> {
    for signal in [libc::SIGTERM, libc::SIGUSR1] {
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the handler only does async-signal-safe work (see `on_signal`).
        if unsafe { libc::signal(signal, handler) } == libc::SIG_ERR {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The signal that asked this process to stop (`SIGTERM`, `SIGUSR1`, or what
/// [`request_stop`] was given), if any.
pub fn stop_requested() -> Option<i32> {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Asks the runs of this process to stop as a signal would (for embedders and tests); `signal`
/// is reported as the reason and must not be 0.
pub fn request_stop(signal: i32) {
    STOP_SIGNAL.store(signal, Ordering::SeqCst);
}

/// The name of a stop signal, for messages.
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGUSR1 => "SIGUSR1".into(),
        libc::SIGINT => "SIGINT".into(),
        s => format!("signal {s}"),
    }
}
