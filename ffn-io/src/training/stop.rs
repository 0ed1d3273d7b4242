//! Stopping a training run cleanly on request: SIGTERM (what SLURM and most schedulers send before
//! they kill a preempted or timed-out job) or SIGUSR1 (what `sbatch --signal=USR1@T` sends T
//! seconds before the end) make a run with [`TrainOptions::stop_on_signal`](super::TrainOptions)
//! finish its current step, agree with the other ranks, write a checkpoint and return; `ffn train`
//! then exits with [`STOPPED_EXIT_CODE`]. A second signal of the same kind kills the process at
//! once (the default action), for a run that no longer answers.

use std::sync::atomic::{AtomicI32, Ordering};

/// `ffn train`'s exit status after a stop on a signal: 75 (`EX_TEMPFAIL`, "try again"): the run
/// is incomplete and `--resume` continues it exactly.
pub const STOPPED_EXIT_CODE: i32 = 75;

/// The signal that requested the stop, 0 while none did.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only async-signal-safe work: an atomic store, and the default action back for the next one.
    STOP_SIGNAL.store(signal, Ordering::SeqCst);
    // SAFETY: signal(2) is async-signal-safe; SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
    }
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
