//! Waiting with a deadline: a stall warning after a threshold, an error naming the late ranks after
//! the timeout. Shared by the backends that wait on their own (local, shm, zmq).

use crate::{CommError, CommOptions};
use std::time::{Duration, Instant};

/// The clock of one wait inside one collective.
pub(crate) struct StallClock {
    start: Instant,
    warned: bool,
    timeout: Duration,
    warn_after: Duration,
    rank: usize,
    op: &'static str,
}

impl StallClock {
    /// Starts the clock for `rank` waiting inside `op`.
    pub(crate) fn new(rank: usize, op: &'static str, opts: &CommOptions) -> Self {
        StallClock {
            start: Instant::now(),
            warned: false,
            timeout: opts.timeout,
            warn_after: opts.stall_warning,
            rank,
            op,
        }
    }

    /// How long until the next warning or the timeout is due (the longest a waiter should block).
    pub(crate) fn until_next_check(&self) -> Duration {
        let waited = self.start.elapsed();
        let mut next = self.timeout.saturating_sub(waited);
        if !self.warned && !self.warn_after.is_zero() {
            next = next.min(self.warn_after.saturating_sub(waited));
        }
        next
    }

    /// Prints the stall warning once past the threshold; fails with [`CommError::Timeout`] naming
    /// the `late` ranks once past the timeout.
    pub(crate) fn check(&mut self, late: impl FnOnce() -> Vec<usize>) -> Result<(), CommError> {
        let waited = self.start.elapsed();
        let warn = !self.warned && !self.warn_after.is_zero() && waited >= self.warn_after;
        if waited < self.timeout && !warn {
            return Ok(());
        }
        let late = late();
        if waited >= self.timeout {
            return Err(CommError::Timeout {
                rank: self.rank,
                peers: late,
                op: self.op,
                waited,
            });
        }
        self.warned = true;
        crate::stall::warn(format!(
            "ffn-comm warning: rank {}: {} has waited {:.1} s for rank(s) {:?} (stalled or dead? \
             the timeout is {:.1} s)",
            self.rank,
            self.op,
            waited.as_secs_f64(),
            late,
            self.timeout.as_secs_f64()
        ));
        Ok(())
    }
}

/// Writes one line to stderr with a single write, so that lines of several ranks sharing the
/// terminal do not interleave mid-line.
pub(crate) fn warn(mut line: String) {
    use std::io::Write;
    line.push('\n');
    let _ = std::io::stderr().write_all(line.as_bytes());
}
