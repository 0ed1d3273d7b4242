//! The `mpi` backend (feature `mpi`): the `mpi` crate over the system MPI; start the job with
//! `mpirun -n N` or `srun`, rank and size come from MPI.
//!
//! # Reduction order
//! With two ranks every element is one addition `x0 + x1`, which is commutative in IEEE arithmetic, so
//! the library's own `MPI_Allreduce` gives exactly the rank-order bits; it runs in place (no copy).
//! With three or more ranks the library's order is unspecified, so the backend does the reduction
//! itself: `MPI_Alltoallv` hands every chunk owner the contributions to its chunk, the owner adds them
//! in rank order, and `MPI_Allgatherv` returns the sums to everybody (the same traffic as a ring).
//!
//! # Timeouts
//! MPI collectives cannot be interrupted. A watchdog thread watches every collective: after
//! [`CommOptions::stall_warning`] it prints a warning, after [`CommOptions::timeout`] it prints an
//! error naming this rank and the collective and ends the process with status 70, which makes
//! `mpirun` abort the whole job (and a dead peer already makes `mpirun` abort it).

use crate::reduce::{chunk_range, sum_in_rank_order};
use crate::{CommError, CommOptions, Communicator, check_root};
use mpi::Threading;
use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Universe;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator as _, SimpleCommunicator};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Largest number of elements passed to one MPI call (counts are C ints).
const MAX_COUNT: usize = 1 << 30;

/// One rank of an MPI job (`MPI_COMM_WORLD`).
pub struct MpiComm {
    watchdog: Watchdog,
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    scratch: Vec<f32>,
    in_place: Option<*mut std::ffi::c_void>,
    // Dropped last: finalises MPI.
    _universe: Universe,
}

impl MpiComm {
    /// Initialises MPI (thread level "funneled": only the calling thread talks to MPI) and joins
    /// `MPI_COMM_WORLD`. Fails if MPI was already initialised in this process.
    pub fn init(opts: &CommOptions) -> Result<Self, CommError> {
        let (universe, _level) =
            mpi::initialize_with_threading(Threading::Funneled).ok_or_else(|| {
                CommError::Transport {
                backend: "mpi",
                context: "initialising MPI".into(),
                detail:
                    "MPI is already initialised in this process (create one MpiComm per process)"
                        .into(),
            }
            })?;
        let world = universe.world();
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        let in_place = in_place_marker();
        Ok(MpiComm {
            watchdog: Watchdog::start(rank, opts),
            world,
            rank,
            size,
            scratch: Vec::new(),
            in_place,
            _universe: universe,
        })
    }

    /// The library's `MPI_Allreduce` (sum) from `send` into `recv`, exactly as a plain MPI program
    /// would call it: the baseline of `ffn bench comm --backend mpi-raw`. Lengths must match.
    pub fn raw_allreduce(&mut self, send: &[f32], recv: &mut [f32]) -> Result<(), CommError> {
        if send.len() != recv.len() {
            return Err(CommError::Config {
                field: "raw_allreduce buffers",
                expected: format!("equal lengths ({} values)", send.len()),
                actual: recv.len().to_string(),
            });
        }
        let _guard = self.watchdog.enter("MPI_Allreduce");
        for (s, r) in send.chunks(MAX_COUNT).zip(recv.chunks_mut(MAX_COUNT)) {
            self.world.all_reduce_into(s, r, SystemOperation::sum());
        }
        Ok(())
    }

    fn allreduce_two(&mut self, buf: &mut [f32]) {
        for piece in buf.chunks_mut(MAX_COUNT) {
            match self.in_place {
                Some(marker) => {
                    // SAFETY: MPI_IN_PLACE for this MPI family; the buffer is valid for `len` floats
                    // and the communicator is alive.
                    unsafe {
                        mpi::ffi::MPI_Allreduce(
                            marker,
                            piece.as_mut_ptr().cast(),
                            piece.len() as i32,
                            mpi::ffi::RSMPI_FLOAT,
                            mpi::ffi::RSMPI_SUM,
                            self.world.as_raw(),
                        );
                    }
                }
                None => {
                    self.scratch.clear();
                    self.scratch.extend_from_slice(piece);
                    self.world
                        .all_reduce_into(&self.scratch[..], piece, SystemOperation::sum());
                }
            }
        }
    }

    /// Rank-order reduce-scatter (all-to-all + local sums) and allgather, for three or more ranks.
    fn allreduce_ordered(&mut self, buf: &mut [f32]) {
        let n = self.size;
        for piece in buf.chunks_mut(MAX_COUNT) {
            let chunks: Vec<_> = (0..n).map(|q| chunk_range(piece.len(), n, q)).collect();
            let mine = chunks[self.rank].clone();
            let m = mine.len();
            let send_counts: Vec<i32> = chunks.iter().map(|c| c.len() as i32).collect();
            let send_displs: Vec<i32> = chunks.iter().map(|c| c.start as i32).collect();
            let recv_counts = vec![m as i32; n];
            let recv_displs: Vec<i32> = (0..n).map(|q| (q * m) as i32).collect();
            self.scratch.resize(n * m + m, 0.0);
            let (gathered, sum) = self.scratch.split_at_mut(n * m);
            {
                let send = Partition::new(&piece[..], &send_counts[..], &send_displs[..]);
                let mut recv =
                    PartitionMut::new(&mut gathered[..], &recv_counts[..], &recv_displs[..]);
                self.world.all_to_all_varcount_into(&send, &mut recv);
            }
            let parts: Vec<&[f32]> = gathered.chunks(m.max(1)).take(n).map(|p| &p[..m]).collect();
            sum_in_rank_order(sum, &parts);
            let mut out = PartitionMut::new(&mut piece[..], &send_counts[..], &send_displs[..]);
            self.world.all_gather_varcount_into(&sum[..], &mut out);
        }
    }
}

/// `MPI_IN_PLACE` is a macro (a sentinel pointer) that the `mpi` crate does not export. Its value
/// is fixed per MPI family: `(void *) 1` in Open MPI, `(void *) -1` in MPICH and its derivatives.
/// Unknown libraries get `None`, and the backend copies into a separate buffer instead.
fn in_place_marker() -> Option<*mut std::ffi::c_void> {
    let version = mpi::environment::library_version().unwrap_or_default();
    if version.contains("Open MPI") {
        Some(std::ptr::without_provenance_mut(1))
    } else if ["MPICH", "Intel(R) MPI", "MVAPICH"]
        .iter()
        .any(|v| version.contains(v))
    {
        Some(std::ptr::without_provenance_mut(usize::MAX))
    } else {
        None
    }
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn backend(&self) -> &'static str {
        "mpi"
    }

    fn allreduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        if self.size == 1 || buf.is_empty() {
            return Ok(());
        }
        let _guard = self.watchdog.enter("allreduce");
        if self.size == 2 {
            self.allreduce_two(buf)
        } else {
            self.allreduce_ordered(buf)
        }
        Ok(())
    }

    fn broadcast_bytes(&mut self, buf: &mut [u8], root: usize) -> Result<(), CommError> {
        check_root(root, self.size)?;
        if self.size == 1 || buf.is_empty() {
            return Ok(());
        }
        let _guard = self.watchdog.enter("broadcast");
        let root = self.world.process_at_rank(root as i32);
        for piece in buf.chunks_mut(MAX_COUNT) {
            root.broadcast_into(piece);
        }
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        let _guard = self.watchdog.enter("barrier");
        self.world.barrier();
        Ok(())
    }
}

/// Watches the collective in flight from a second thread.
struct Watchdog {
    state: Arc<(Mutex<WatchState>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct WatchState {
    in_flight: Option<(Instant, &'static str)>,
    stop: bool,
}

/// Marks the end of a watched collective when dropped.
struct WatchGuard(Arc<(Mutex<WatchState>, Condvar)>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let (m, _) = &*self.0;
        m.lock().unwrap_or_else(|e| e.into_inner()).in_flight = None;
    }
}

impl Watchdog {
    fn start(rank: usize, opts: &CommOptions) -> Self {
        let state = Arc::new((
            Mutex::new(WatchState {
                in_flight: None,
                stop: false,
            }),
            Condvar::new(),
        ));
        let shared = state.clone();
        let (timeout, warn) = (opts.timeout, opts.stall_warning);
        let thread = std::thread::Builder::new()
            .name("ffn-mpi-watchdog".into())
            .spawn(move || watch(rank, timeout, warn, &shared))
            .ok();
        Watchdog { state, thread }
    }

    fn enter(&self, op: &'static str) -> WatchGuard {
        let (m, c) = &*self.state;
        m.lock().unwrap_or_else(|e| e.into_inner()).in_flight = Some((Instant::now(), op));
        c.notify_one();
        WatchGuard(self.state.clone())
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (m, c) = &*self.state;
        m.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        c.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(rank: usize, timeout: Duration, warn: Duration, state: &(Mutex<WatchState>, Condvar)) {
    let (m, c) = state;
    let mut st = m.lock().unwrap_or_else(|e| e.into_inner());
    let mut warned_for: Option<Instant> = None;
    loop {
        if st.stop {
            return;
        }
        let Some((start, op)) = st.in_flight else {
            st = c.wait(st).unwrap_or_else(|e| e.into_inner());
            continue;
        };
        let waited = start.elapsed();
        if waited >= timeout {
            crate::stall::warn(format!(
                "ffn-comm error: rank {rank}: MPI {op} did not finish within {:.1} s (a peer is dead or \
                 stalled); aborting the job (set FFN_COMM_TIMEOUT to wait longer)",
                timeout.as_secs_f64()
            ));
            // SAFETY: ends this process at once; mpirun then aborts the other ranks.
            unsafe { libc::_exit(70) };
        }
        if !warn.is_zero() && waited >= warn && warned_for != Some(start) {
            warned_for = Some(start);
            crate::stall::warn(format!(
                "ffn-comm warning: rank {rank}: MPI {op} has waited {:.1} s (stalled or dead peer? the \
                 timeout is {:.1} s)",
                waited.as_secs_f64(),
                timeout.as_secs_f64()
            ));
        }
        let mut next = timeout - waited;
        if !warn.is_zero() && warned_for != Some(start) {
            next = next.min(warn.saturating_sub(waited));
        }
        st = c
            .wait_timeout(st, next.max(Duration::from_millis(1)))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}
