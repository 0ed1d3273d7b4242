//! The `local` backend: ranks are threads of one process (tests, embedding, one-process training).
//!
//! Each rank publishes its buffer, the owner of each chunk sums the published chunks in rank order,
//! and every rank copies the owners' results back: the same reduction order as every other backend.
//! A rank whose [`LocalComm`] is dropped (its thread ended or panicked) is reported by the others as
//! [`CommError::PeerLost`] instead of leaving them waiting.

use crate::reduce::{chunk_range, sum_in_rank_order};
use crate::stall::StallClock;
use crate::{CommError, CommOptions, Communicator, check_root};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};

/// What a rank is doing, compared across ranks to catch mismatched calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Call {
    #[default]
    None,
    Allreduce(usize),
    Broadcast {
        len: usize,
        root: usize,
    },
}

impl Call {
    fn describe(self) -> String {
        match self {
            Call::None => "nothing".into(),
            Call::Allreduce(n) => format!("allreduce of {n} values"),
            Call::Broadcast { len, root } => format!("broadcast of {len} bytes from root {root}"),
        }
    }
}

struct BarrierState {
    /// Per rank: the number of barriers it has entered.
    arrived: Vec<u64>,
    /// Per rank: its communicator was dropped.
    gone: Vec<bool>,
}

struct Shared {
    size: usize,
    opts: CommOptions,
    state: Mutex<BarrierState>,
    cond: Condvar,
    calls: Vec<Mutex<Call>>,
    inputs: Vec<RwLock<Vec<f32>>>,
    chunks: Vec<RwLock<Vec<f32>>>,
    bytes: RwLock<Vec<u8>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One rank of a group of threads. Create a group with [`LocalComm::group`] and move one member
/// into each thread, or let [`LocalComm::run`] do both.
pub struct LocalComm {
    rank: usize,
    barriers: u64,
    shared: Arc<Shared>,
}

impl LocalComm {
    /// A group of `size` ranks with default options (60 s timeout).
    pub fn group(size: usize) -> Result<Vec<LocalComm>, CommError> {
        Self::group_with(size, CommOptions::default())
    }

    /// A group of `size` ranks with the given timeouts.
    pub fn group_with(size: usize, opts: CommOptions) -> Result<Vec<LocalComm>, CommError> {
        crate::WorldInfo::new(0, size)?;
        let shared = Arc::new(Shared {
            size,
            opts,
            state: Mutex::new(BarrierState {
                arrived: vec![0; size],
                gone: vec![false; size],
            }),
            cond: Condvar::new(),
            calls: (0..size).map(|_| Mutex::new(Call::None)).collect(),
            inputs: (0..size).map(|_| RwLock::new(Vec::new())).collect(),
            chunks: (0..size).map(|_| RwLock::new(Vec::new())).collect(),
            bytes: RwLock::new(Vec::new()),
        });
        Ok((0..size)
            .map(|rank| LocalComm {
                rank,
                barriers: 0,
                shared: shared.clone(),
            })
            .collect())
    }

    /// A group of one: every collective is a no-op.
    pub fn solo() -> LocalComm {
        match Self::group(1) {
            Ok(mut g) => g.remove(0),
            Err(e) => unreachable!("a group of one is always valid: {e}"),
        }
    }

    /// Runs `f` on `size` threads, one rank each, and returns their results in rank order (or the
    /// lowest rank's error). A panic in `f` is propagated.
    pub fn run<T, E, F>(size: usize, f: F) -> Result<Vec<T>, E>
    where
        T: Send,
        E: From<CommError> + Send,
        F: Fn(&mut LocalComm) -> Result<T, E> + Sync,
    {
        Self::run_with(size, CommOptions::default(), f)
    }

    /// [`run`](Self::run) with explicit options.
    pub fn run_with<T, E, F>(size: usize, opts: CommOptions, f: F) -> Result<Vec<T>, E>
    where
        T: Send,
        E: From<CommError> + Send,
        F: Fn(&mut LocalComm) -> Result<T, E> + Sync,
    {
        let group = Self::group_with(size, opts)?;
        let f = &f;
        let results: Vec<Result<T, E>> = std::thread::scope(|s| {
            let handles: Vec<_> = group
                .into_iter()
                .map(|mut comm| s.spawn(move || f(&mut comm)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        results.into_iter().collect()
    }

    /// Enters barrier number `self.barriers + 1` and waits for every rank to enter it.
    fn sync(&mut self, op: &'static str) -> Result<(), CommError> {
        self.barriers += 1;
        let target = self.barriers;
        let sh = &*self.shared;
        let mut st = lock(&sh.state);
        st.arrived[self.rank] = target;
        sh.cond.notify_all();
        let mut clock = StallClock::new(self.rank, op, &sh.opts);
        loop {
            let late: Vec<usize> = (0..sh.size).filter(|&q| st.arrived[q] < target).collect();
            if late.is_empty() {
                return Ok(());
            }
            if let Some(&peer) = late.iter().find(|&&q| st.gone[q]) {
                return Err(CommError::PeerLost {
                    rank: self.rank,
                    peer,
                    op,
                    detail: "its communicator was dropped (thread ended or panicked)".into(),
                });
            }
            clock.check(|| late.clone())?;
            let wait = clock
                .until_next_check()
                .max(std::time::Duration::from_millis(1));
            st = sh
                .cond
                .wait_timeout(st, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Publishes this rank's call, waits for all, and checks that every rank made the same call.
    fn enter(&mut self, call: Call, op: &'static str) -> Result<(), CommError> {
        *lock(&self.shared.calls[self.rank]) = call;
        self.sync(op)?;
        for q in 0..self.shared.size {
            let theirs = *lock(&self.shared.calls[q]);
            if theirs != call {
                return Err(CommError::LengthMismatch {
                    rank: self.rank,
                    peer: q,
                    op,
                    expected: call.describe(),
                    actual: theirs.describe(),
                });
            }
        }
        Ok(())
    }
}

impl Drop for LocalComm {
    fn drop(&mut self) {
        let mut st = lock(&self.shared.state);
        st.gone[self.rank] = true;
        self.shared.cond.notify_all();
    }
}

impl Communicator for LocalComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn backend(&self) -> &'static str {
        "local"
    }

    fn allreduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        let n = self.shared.size;
        if n == 1 {
            return Ok(());
        }
        {
            let mut input = self.shared.inputs[self.rank]
                .write()
                .unwrap_or_else(|e| e.into_inner());
            input.clear();
            input.extend_from_slice(buf);
        }
        self.enter(Call::Allreduce(buf.len()), "allreduce")?;
        let mine = chunk_range(buf.len(), n, self.rank);
        {
            let guards: Vec<_> = self
                .shared
                .inputs
                .iter()
                .map(|l| l.read().unwrap_or_else(|e| e.into_inner()))
                .collect();
            let parts: Vec<&[f32]> = guards.iter().map(|g| &g[mine.clone()]).collect();
            let mut out = self.shared.chunks[self.rank]
                .write()
                .unwrap_or_else(|e| e.into_inner());
            out.resize(mine.len(), 0.0);
            sum_in_rank_order(&mut out, &parts);
        }
        self.sync("allreduce")?;
        for q in 0..n {
            let c = chunk_range(buf.len(), n, q);
            let src = self.shared.chunks[q]
                .read()
                .unwrap_or_else(|e| e.into_inner());
            buf[c].copy_from_slice(&src);
        }
        Ok(())
    }

    fn broadcast_bytes(&mut self, buf: &mut [u8], root: usize) -> Result<(), CommError> {
        check_root(root, self.shared.size)?;
        if self.shared.size == 1 {
            return Ok(());
        }
        if self.rank == root {
            let mut b = self.shared.bytes.write().unwrap_or_else(|e| e.into_inner());
            b.clear();
            b.extend_from_slice(buf);
        }
        self.enter(
            Call::Broadcast {
                len: buf.len(),
                root,
            },
            "broadcast",
        )?;
        if self.rank != root {
            buf.copy_from_slice(&self.shared.bytes.read().unwrap_or_else(|e| e.into_inner()));
        }
        self.sync("broadcast")
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        if self.shared.size == 1 {
            return Ok(());
        }
        self.sync("barrier")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;
    use std::time::Duration;

    fn fast() -> CommOptions {
        CommOptions {
            timeout: Duration::from_secs(3),
            ..CommOptions::default()
        }
    }

    #[test]
    fn conformance_suite_on_1_2_3_ranks() {
        for n in 1..=3 {
            let digests = LocalComm::run_with(n, fast(), |c| {
                conformance::run_all(c, &conformance::SuiteOptions::quick())
            })
            .unwrap();
            assert!(
                digests.windows(2).all(|w| w[0] == w[1]),
                "{n} ranks: {digests:?}"
            );
        }
    }

    #[test]
    fn large_buffer_on_2_ranks() {
        LocalComm::run_with(2, fast(), |c| conformance::check_large(c)).unwrap();
    }

    #[test]
    fn mismatched_lengths_are_an_error_on_every_rank() {
        let group = LocalComm::group_with(2, fast()).unwrap();
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = group
                .into_iter()
                .map(|mut c| {
                    s.spawn(move || {
                        let mut buf = vec![1.0; 3 + c.rank()];
                        c.allreduce_sum(&mut buf).unwrap_err().to_string()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            errs[0].contains("rank 1 has allreduce of 4 values"),
            "{}",
            errs[0]
        );
        assert!(
            errs[1].contains("rank 0 has allreduce of 3 values"),
            "{}",
            errs[1]
        );
    }

    #[test]
    fn a_dropped_rank_is_an_error_not_a_hang() {
        let mut group = LocalComm::group_with(3, fast()).unwrap();
        drop(group.pop());
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = group
                .into_iter()
                .map(|mut c| s.spawn(move || c.allreduce_sum(&mut [1.0]).unwrap_err().to_string()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for e in errs {
            assert!(e.contains("peer rank 2 is gone"), "{e}");
        }
    }

    #[test]
    fn a_stalled_rank_times_out_naming_it() {
        let opts = CommOptions {
            timeout: Duration::from_millis(300),
            ..CommOptions::default()
        };
        let mut group = LocalComm::group_with(2, opts).unwrap();
        let stalled = group.pop().unwrap();
        let mut c = group.pop().unwrap();
        let e = c.barrier().unwrap_err();
        assert!(
            matches!(&e, CommError::Timeout { peers, .. } if peers == &[1]),
            "{e}"
        );
        assert!(e.to_string().contains("rank(s) [1]"), "{e}");
        drop(stalled);
    }

    #[test]
    fn invalid_root_is_an_error() {
        let mut c = LocalComm::solo();
        let e = c.broadcast(&mut [1.0], 1).unwrap_err();
        assert!(e.to_string().contains("root 1"), "{e}");
    }
}
