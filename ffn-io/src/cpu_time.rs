//! CPU time of this process (all threads, user + system), as recorded in training checkpoints.

/// Seconds of CPU this process has used so far (0 where the system cannot tell).
pub fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_time_grows_with_work() {
        // Spins until the counter has grown by 50 ms of CPU; a counter that never moves fails
        // after 60 s of wall time.
        let a = super::process_cpu_seconds();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while super::process_cpu_seconds() < a + 0.05 {
            assert!(t.elapsed().as_secs() < 60, "CPU time stayed at {a}");
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        assert!(a > 0.0, "a running process has used some CPU");
    }
}
