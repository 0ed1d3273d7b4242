//! The `shm` backend: ranks are processes on one host that share a memory segment
//! (`/dev/shm/<name>`, mapped with memmap2).
//!
//! # Segment
//! A header (magic, protocol version, world size, slot size, rank 0's pid, an abort word, a futex
//! word) and one 128-byte line per rank (barrier counter, pid, state, call descriptors), followed by
//! two sets of one data slot per rank. Rank 0 creates the file, every other rank maps it and registers
//! its pid, and rank 0 unlinks the name as soon as all ranks are attached, so no file is left behind
//! even if the job is killed later.
//!
//! # Files
//! The segment is created with mode 0600 whatever the umask, opened without following symbolic
//! links, and used only when it belongs to this process's effective user: another user's file at
//! the name is an error naming its owner ([`CommError::NotOwner`]), never attached to or removed.
//! Rank 0 removes segments of this user's dead jobs (`ffn-*` files whose creator has exited) and
//! refuses a name that a running job uses. Names are unguessable when `ffn launch` makes them
//! (random) or when they are derived from the job secret (a keyed hash, see [`crate::env`]).
//!
//! # Allreduce
//! Buffers longer than a slot go in rounds; rounds alternate between the two slot sets so that one
//! round's writes never race the previous round's reads. In each round every rank copies the chunks
//! the others own into its slot, enters barrier A, sums its own chunk in rank order (the chunk owner
//! reads everybody's slot: all ranks' cores reduce at once), publishes the sum in its slot, enters
//! barrier B, and copies the other owners' sums out. Broadcast needs one barrier per round.
//!
//! # Synchronisation
//! Barriers are per-rank generation counters in the segment. A waiter spins briefly, then yields,
//! then sleeps on a futex (Linux) that every arrival bumps; nothing sleeps for a fixed time. While
//! waiting it checks the timeout, prints the stall warning, notices a peer whose process exited or
//! whose communicator was dropped, and the abort word set by a rank that failed, so a dead peer is
//! an error within milliseconds (exit) or the timeout (stall), never a hang.

mod segment_file;

use crate::reduce::{add_assign, chunk_range};
use crate::stall::StallClock;
use crate::{CommError, CommOptions, Communicator, WorldInfo, check_root};
use memmap2::MmapMut;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const MAGIC: u64 = 0x4646_4e53_484d_0001; // "FFNSHM", layout 1
/// Protocol version of the segment layout; ranks of different versions refuse each other.
pub const PROTOCOL_VERSION: u64 = 1;
const LINE: usize = 128;
const PAGE: usize = 4096;
/// Largest world size the segment layout allows.
pub const MAX_RANKS: usize = 4096;

// Header word offsets (bytes).
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_SIZE: usize = 16;
const H_SLOT: usize = 24;
const H_CREATOR: usize = 32;
const H_JOINED: usize = 40;
const H_ABORT: usize = 48;
const H_FUTEX: usize = 64; // u32
const H_WAITERS: usize = 68; // u32

// Per-rank line word offsets (bytes).
const R_ARRIVE: usize = 0;
const R_PID: usize = 8;
const R_STATE: usize = 16;
const R_DESC: usize = 32; // two sets of (op, len, root): 48 bytes

/// How long a waiter spins before it starts yielding (default).
const SPIN_FOR: Duration = Duration::from_millis(1);
/// The same when there are more ranks than cores: spinning would keep the late rank off the core.
const SPIN_OVERSUBSCRIBED: Duration = Duration::from_micros(20);
/// How long a waiter keeps yielding before it sleeps on the futex.
const YIELD_FOR: Duration = Duration::from_millis(5);

const STATE_ACTIVE: u64 = 1;
const STATE_LEFT: u64 = 2;

const OP_ALLREDUCE: u64 = 1;
const OP_BROADCAST: u64 = 2;
const OP_BARRIER: u64 = 3;

/// One rank of a shared-memory group.
pub struct ShmComm {
    world: WorldInfo,
    opts: CommOptions,
    seg: Option<Segment>,
    /// Barriers entered so far.
    generation: u64,
    /// Rounds done so far; the slot set of a round is `round % 2`.
    round: u64,
    /// How long a waiter spins before yielding.
    spin: Duration,
}

struct Segment {
    map: MmapMut,
    size: usize,
    slot_floats: usize,
    data_off: usize,
    path: PathBuf,
}

// SAFETY: the mapping is owned by the segment; all cross-process access goes through atomics or
// through ranges that barriers hand over from one rank to another.
unsafe impl Send for Segment {}

impl Segment {
    fn base(&self) -> *mut u8 {
        self.map.as_ptr() as *mut u8
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.data_off);
        // SAFETY: in bounds, 8-aligned (the map is page-aligned), and only ever accessed atomically.
        unsafe { &*(self.base().add(off) as *const AtomicU64) }
    }

    fn word32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as `word`, 4-aligned.
        unsafe { &*(self.base().add(off) as *const AtomicU32) }
    }

    fn rank_word(&self, rank: usize, off: usize) -> &AtomicU64 {
        self.word(PAGE + rank * LINE + off)
    }

    fn slot_ptr(&self, set: usize, rank: usize) -> *mut f32 {
        let index = (set * self.size + rank) * self.slot_floats;
        // SAFETY: the file was sized for 2 * size slots of slot_floats f32 after data_off.
        unsafe { self.base().add(self.data_off).cast::<f32>().add(index) }
    }

    /// The floats `range` of a slot. Callers guarantee (through the barriers) that no other rank
    /// writes that range while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slot(&self, set: usize, rank: usize, range: std::ops::Range<usize>) -> &mut [f32] {
        debug_assert!(range.end <= self.slot_floats);
        // SAFETY: in bounds of the slot; exclusivity is the caller's promise.
        unsafe {
            std::slice::from_raw_parts_mut(self.slot_ptr(set, rank).add(range.start), range.len())
        }
    }

    fn wake_all(&self) {
        self.word32(H_FUTEX).fetch_add(1, Ordering::SeqCst);
        if self.word32(H_WAITERS).load(Ordering::SeqCst) > 0 {
            futex_wake(self.word32(H_FUTEX));
        }
    }
}

fn layout(size: usize, slot_floats: usize) -> (usize, usize) {
    let data_off = (PAGE + size * LINE).div_ceil(PAGE) * PAGE;
    (data_off, data_off + 2 * size * slot_floats * 4)
}

impl ShmComm {
    /// Joins the group `world` through the segment named by `opts.shm_name`, with slots of
    /// `opts.shm_slot_bytes`. Rank 0 creates the segment; the others wait for it (up to
    /// `opts.timeout`).
    pub fn connect(world: WorldInfo, opts: &CommOptions) -> Result<Self, CommError> {
        Self::connect_with_slot(world, opts, opts.shm_slot_bytes / 4)
    }

    /// [`connect`](Self::connect) with `slot_floats` f32 per rank and slot set (every rank must pass
    /// the same value).
    pub fn connect_with_slot(
        world: WorldInfo,
        opts: &CommOptions,
        slot_floats: usize,
    ) -> Result<Self, CommError> {
        let world = WorldInfo::new(world.rank, world.size)?;
        if world.size > MAX_RANKS {
            return Err(CommError::Config {
                field: "world size",
                expected: format!("at most {MAX_RANKS} for the shm backend"),
                actual: world.size.to_string(),
            });
        }
        if slot_floats == 0 || slot_floats > (1 << 30) {
            return Err(CommError::Config {
                field: "shm slot size",
                expected: "1 ..= 2^30 floats".into(),
                actual: slot_floats.to_string(),
            });
        }
        let cores = std::thread::available_parallelism()
            .map(|c| c.get())
            .unwrap_or(1);
        let spin = opts.shm_spin.unwrap_or(if world.size > cores {
            SPIN_OVERSUBSCRIBED
        } else {
            SPIN_FOR
        });
        let mut comm = ShmComm {
            world,
            opts: opts.clone(),
            seg: None,
            generation: 0,
            round: 0,
            spin,
        };
        if world.size == 1 {
            return Ok(comm);
        }
        let name = opts.shm_name.clone().ok_or_else(|| CommError::Env {
            var: "FFN_SHM_NAME".into(),
            expected: "a name for the job's segment (or MASTER_PORT / SLURM_JOB_ID to derive one; \
                       `ffn launch` sets it)"
                .into(),
            found: "<unset>".into(),
        })?;
        let path = PathBuf::from("/dev/shm").join(&name);
        comm.seg = Some(if world.rank == 0 {
            create_segment(path, world, slot_floats, opts)?
        } else {
            attach_segment(path, world, slot_floats, opts)?
        });
        Ok(comm)
    }

    /// The segment file (already unlinked once every rank attached); `None` for a group of one.
    pub fn segment_path(&self) -> Option<&std::path::Path> {
        self.seg.as_ref().map(|s| s.path.as_path())
    }

    /// Enters the next barrier and waits for every rank.
    fn sync(&mut self, op: &'static str) -> Result<(), CommError> {
        let Some(seg) = self.seg.as_ref() else {
            return Ok(());
        };
        self.generation += 1;
        let target = self.generation;
        seg.rank_word(self.world.rank, R_ARRIVE)
            .store(target, Ordering::Release);
        seg.wake_all();
        let all_in =
            || (0..seg.size).all(|q| seg.rank_word(q, R_ARRIVE).load(Ordering::Acquire) >= target);
        // Fast path: spin for a few microseconds, then give the core away with yields (ranks may
        // outnumber cores), and only then sleep on the futex.
        let start = Instant::now();
        loop {
            if all_in() {
                return Ok(());
            }
            let waited = start.elapsed();
            if waited < self.spin {
                for _ in 0..32 {
                    std::hint::spin_loop();
                }
            } else if waited < self.spin + YIELD_FOR {
                std::thread::yield_now();
            } else {
                break;
            }
        }
        let mut clock = StallClock::new(self.world.rank, op, &self.opts);
        let late = || -> Vec<usize> {
            (0..seg.size)
                .filter(|&q| seg.rank_word(q, R_ARRIVE).load(Ordering::Acquire) < target)
                .collect()
        };
        let mut last_liveness = Instant::now() - Duration::from_secs(1);
        loop {
            let waiters = seg.word32(H_WAITERS);
            waiters.fetch_add(1, Ordering::SeqCst);
            let seq = seg.word32(H_FUTEX).load(Ordering::SeqCst);
            if all_in() {
                waiters.fetch_sub(1, Ordering::SeqCst);
                return Ok(());
            }
            let nap = clock
                .until_next_check()
                .min(Duration::from_millis(50))
                .max(Duration::from_micros(100));
            futex_wait(seg.word32(H_FUTEX), seq, nap);
            waiters.fetch_sub(1, Ordering::SeqCst);
            if all_in() {
                return Ok(());
            }
            if let Err(e) = self
                .check_peers(seg, &late(), op, &mut last_liveness)
                .and_then(|_| clock.check(late))
            {
                self.raise_abort();
                return Err(e);
            }
        }
    }

    /// Fails if a late peer left, exited, or another rank aborted the job.
    fn check_peers(
        &self,
        seg: &Segment,
        late: &[usize],
        op: &'static str,
        last: &mut Instant,
    ) -> Result<(), CommError> {
        let me = self.world.rank;
        let abort = seg.word(H_ABORT).load(Ordering::Acquire);
        if abort != 0 && abort - 1 != me as u64 {
            let peer = (abort - 1) as usize;
            return Err(CommError::PeerLost {
                rank: me,
                peer,
                op,
                detail: "it failed and aborted the group".into(),
            });
        }
        for &q in late {
            if seg.rank_word(q, R_STATE).load(Ordering::Acquire) == STATE_LEFT {
                return Err(CommError::PeerLost {
                    rank: me,
                    peer: q,
                    op,
                    detail: "it left the group (its communicator was dropped)".into(),
                });
            }
        }
        if last.elapsed() >= Duration::from_millis(100) {
            *last = Instant::now();
            for &q in late {
                let pid = seg.rank_word(q, R_PID).load(Ordering::Acquire);
                if pid != 0 && !process_alive(pid) {
                    return Err(CommError::PeerLost {
                        rank: me,
                        peer: q,
                        op,
                        detail: format!("its process (pid {pid}) exited"),
                    });
                }
            }
        }
        Ok(())
    }

    /// Wakes every rank of the group with an error naming this rank (the `hier` backend's leader
    /// uses it when the collective failed between hosts, so its host's ranks do not wait for the
    /// timeout). The group is unusable afterwards.
    #[cfg(feature = "zmq")]
    pub(crate) fn abort(&self) {
        self.raise_abort();
    }

    fn raise_abort(&self) {
        if let Some(seg) = &self.seg {
            let _ = seg.word(H_ABORT).compare_exchange(
                0,
                self.world.rank as u64 + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            seg.wake_all();
        }
    }

    /// Publishes this rank's call for the slot set `set` (before barrier A of an operation's first
    /// round).
    fn publish(&self, set: usize, desc: [u64; 3]) {
        if let Some(seg) = &self.seg {
            for (i, v) in desc.iter().enumerate() {
                seg.rank_word(self.world.rank, R_DESC + (set * 3 + i) * 8)
                    .store(*v, Ordering::Relaxed);
            }
        }
    }

    /// Checks every rank's call for the set `set` (after barrier A) against this rank's.
    fn verify(&self, set: usize, desc: [u64; 3], op: &'static str) -> Result<(), CommError> {
        let Some(seg) = &self.seg else { return Ok(()) };
        for q in 0..seg.size {
            let theirs: [u64; 3] = std::array::from_fn(|i| {
                seg.rank_word(q, R_DESC + (set * 3 + i) * 8)
                    .load(Ordering::Relaxed)
            });
            if theirs != desc {
                self.raise_abort();
                return Err(CommError::LengthMismatch {
                    rank: self.world.rank,
                    peer: q,
                    op,
                    expected: describe(desc),
                    actual: describe(theirs),
                });
            }
        }
        Ok(())
    }

    fn next_set(&mut self) -> usize {
        let s = (self.round % 2) as usize;
        self.round += 1;
        s
    }

    /// One round of the allreduce over `b` (at most one slot long).
    fn allreduce_round(&mut self, b: &mut [f32], first: Option<[u64; 3]>) -> Result<(), CommError> {
        let set = self.next_set();
        let (n, me) = (self.world.size, self.world.rank);
        let mine = chunk_range(b.len(), n, me);
        {
            let seg = self.seg.as_ref().ok_or_else(unreachable_single)?;
            // SAFETY: this rank's slot in this set is only written by this rank, and nobody reads it
            // until barrier A.
            let dst = unsafe { seg.slot(set, me, 0..b.len()) };
            dst[..mine.start].copy_from_slice(&b[..mine.start]);
            dst[mine.end..].copy_from_slice(&b[mine.end..]);
        }
        if let Some(desc) = first {
            self.publish(set, desc);
        }
        self.sync("allreduce")?;
        if let Some(desc) = first {
            self.verify(set, desc, "allreduce")?;
        }
        {
            let seg = self.seg.as_ref().ok_or_else(unreachable_single)?;
            const BLOCK: usize = 4096;
            let mut s = mine.start;
            while s < mine.end {
                let e = (s + BLOCK).min(mine.end);
                // SAFETY: after barrier A nobody writes chunk `mine` of any slot of this set except
                // this rank (into its own slot), and other ranks read it only after barrier B.
                let out = unsafe { seg.slot(set, me, s..e) };
                let part = |q: usize| -> &[f32] {
                    if q == me {
                        &b[s..e]
                    } else {
                        unsafe { seg.slot(set, q, s..e) }
                    }
                };
                out.copy_from_slice(part(0));
                for q in 1..n {
                    add_assign(out, part(q));
                }
                b[s..e].copy_from_slice(out);
                s = e;
            }
        }
        self.sync("allreduce")?;
        let seg = self.seg.as_ref().ok_or_else(unreachable_single)?;
        for q in (0..n).filter(|&q| q != me) {
            let c = chunk_range(b.len(), n, q);
            // SAFETY: rank q finished its chunk before barrier B and rewrites this set only after
            // everyone passes the next round's barrier A.
            let src = unsafe { seg.slot(set, q, c.clone()) };
            b[c].copy_from_slice(src);
        }
        Ok(())
    }
}

fn unreachable_single() -> CommError {
    CommError::Config {
        field: "shm segment",
        expected: "a segment for size > 1".into(),
        actual: "none".into(),
    }
}

fn describe(d: [u64; 3]) -> String {
    match d[0] {
        OP_ALLREDUCE => format!("allreduce of {} values", d[1]),
        OP_BROADCAST => format!("broadcast of {} bytes from root {}", d[1], d[2]),
        OP_BARRIER => "barrier".into(),
        0 => "nothing".into(),
        op => format!("unknown operation {op}"),
    }
}

impl Drop for ShmComm {
    fn drop(&mut self) {
        if let Some(seg) = &self.seg {
            seg.rank_word(self.world.rank, R_STATE)
                .store(STATE_LEFT, Ordering::Release);
            seg.wake_all();
        }
    }
}

impl Communicator for ShmComm {
    fn rank(&self) -> usize {
        self.world.rank
    }

    fn size(&self) -> usize {
        self.world.size
    }

    fn backend(&self) -> &'static str {
        "shm"
    }

    fn allreduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        let Some(slot) = self.seg.as_ref().map(|s| s.slot_floats) else {
            return Ok(());
        };
        let desc = [OP_ALLREDUCE, buf.len() as u64, 0];
        if buf.is_empty() {
            return self.allreduce_round(buf, Some(desc));
        }
        for (i, piece) in buf.chunks_mut(slot).enumerate() {
            self.allreduce_round(piece, (i == 0).then_some(desc))?;
        }
        Ok(())
    }

    fn broadcast_bytes(&mut self, buf: &mut [u8], root: usize) -> Result<(), CommError> {
        check_root(root, self.world.size)?;
        let Some(slot_bytes) = self.seg.as_ref().map(|s| s.slot_floats * 4) else {
            return Ok(());
        };
        let desc = [OP_BROADCAST, buf.len() as u64, root as u64];
        let me = self.world.rank;
        let mut first = true;
        let mut offset = 0;
        while first || offset < buf.len() {
            let end = (offset + slot_bytes).min(buf.len());
            let piece = &mut buf[offset..end];
            let set = self.next_set();
            let seg = self.seg.as_ref().ok_or_else(unreachable_single)?;
            let slot = seg.slot_ptr(set, root).cast::<u8>();
            if me == root {
                // SAFETY: the root's slot in this set is free (see the module docs) and large enough.
                unsafe { std::ptr::copy_nonoverlapping(piece.as_ptr(), slot, piece.len()) };
            }
            if first {
                self.publish(set, desc);
            }
            self.sync("broadcast")?;
            if first {
                self.verify(set, desc, "broadcast")?;
            }
            if me != root {
                // SAFETY: the root wrote this range before the barrier and rewrites this set only
                // after the next round's barrier.
                unsafe { std::ptr::copy_nonoverlapping(slot, piece.as_mut_ptr(), piece.len()) };
            }
            offset += piece.len();
            first = false;
        }
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        if self.seg.is_none() {
            return Ok(());
        }
        let set = self.next_set();
        let desc = [OP_BARRIER, 0, 0];
        self.publish(set, desc);
        self.sync("barrier")?;
        self.verify(set, desc, "barrier")
    }
}

fn create_segment(
    path: PathBuf,
    world: WorldInfo,
    slot_floats: usize,
    opts: &CommOptions,
) -> Result<Segment, CommError> {
    let (data_off, total) = layout(world.size, slot_floats);
    let shown = path.display().to_string();
    let dir = path.parent().unwrap_or(std::path::Path::new("/dev/shm"));
    segment_file::sweep(dir, "ffn-", |f| {
        segment_creator(f).is_some_and(|pid| !process_alive(pid))
    });
    if let Some(old) = segment_file::open_checked(&path)? {
        if let Some(pid) = segment_in_use(&old) {
            return Err(CommError::Config {
                field: "FFN_SHM_NAME",
                expected: "a segment name that no running job uses".into(),
                actual: format!("{shown}, in use by the job of pid {pid}"),
            });
        }
        std::fs::remove_file(&path)
            .map_err(|e| CommError::io(format!("removing stale shm segment {shown}"), e))?;
    }
    let file = segment_file::create_private(&path)?;
    allocate(&file, total).map_err(|e| {
        let _ = std::fs::remove_file(&path);
        CommError::io(
            format!("reserving {total} bytes for shm segment {shown} (is /dev/shm large enough?)"),
            e,
        )
    })?;
    // SAFETY: the file is ours, sized, and stays open while mapped; other processes only touch it
    // through the protocol above.
    let map = unsafe { MmapMut::map_mut(&file) }
        .map_err(|e| CommError::io(format!("mapping {shown}"), e))?;
    let seg = Segment {
        map,
        size: world.size,
        slot_floats,
        data_off,
        path,
    };
    seg.word(H_VERSION)
        .store(PROTOCOL_VERSION, Ordering::Relaxed);
    seg.word(H_SIZE).store(world.size as u64, Ordering::Relaxed);
    seg.word(H_SLOT)
        .store(slot_floats as u64, Ordering::Relaxed);
    seg.word(H_CREATOR)
        .store(std::process::id() as u64, Ordering::Relaxed);
    seg.rank_word(0, R_PID)
        .store(std::process::id() as u64, Ordering::Relaxed);
    seg.rank_word(0, R_STATE)
        .store(STATE_ACTIVE, Ordering::Relaxed);
    seg.word(H_MAGIC).store(MAGIC, Ordering::Release);
    // Wait for everybody to attach, then remove the name: the mappings stay valid.
    let mut clock = StallClock::new(0, "connect", opts);
    let result = loop {
        if seg.word(H_JOINED).load(Ordering::Acquire) as usize >= world.size - 1 {
            break Ok(());
        }
        let missing = || {
            (1..world.size)
                .filter(|&q| seg.rank_word(q, R_PID).load(Ordering::Acquire) == 0)
                .collect()
        };
        if let Err(e) = clock.check(missing) {
            break Err(e);
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let _ = std::fs::remove_file(&seg.path);
    result.map(|_| seg)
}

fn attach_segment(
    path: PathBuf,
    world: WorldInfo,
    slot_floats: usize,
    opts: &CommOptions,
) -> Result<Segment, CommError> {
    let shown = path.display().to_string();
    let (data_off, total) = layout(world.size, slot_floats);
    let mut clock = StallClock::new(world.rank, "connect", opts);
    let mypid = std::process::id() as u64;
    loop {
        if let Some(seg) = try_attach(&path, world, slot_floats, data_off, total)? {
            let claimed = seg.rank_word(world.rank, R_PID).compare_exchange(
                0,
                mypid,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if let Err(other) = claimed {
                if process_alive(other) {
                    return Err(CommError::Config {
                        field: "RANK",
                        expected: format!("a rank not already taken in {shown}"),
                        actual: format!(
                            "{} (already taken by pid {other}: two processes started with the same rank)",
                            world.rank
                        ),
                    });
                }
                seg.rank_word(world.rank, R_PID)
                    .store(mypid, Ordering::Release);
            }
            seg.rank_word(world.rank, R_STATE)
                .store(STATE_ACTIVE, Ordering::Release);
            seg.word(H_JOINED).fetch_add(1, Ordering::AcqRel);
            return Ok(seg);
        }
        clock.check(|| vec![0])?;
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Maps the segment if rank 0 has finished creating it for this job; `None` to try again later.
fn try_attach(
    path: &std::path::Path,
    world: WorldInfo,
    slot_floats: usize,
    data_off: usize,
    total: usize,
) -> Result<Option<Segment>, CommError> {
    let shown = path.display().to_string();
    let Some(file) = segment_file::open_checked(path)? else {
        return Ok(None);
    };
    let len = file
        .metadata()
        .map_err(|e| CommError::io(format!("reading {shown}"), e))?
        .len() as usize;
    if len < PAGE {
        return Ok(None);
    }
    // SAFETY: as in `create_segment`; the length is checked before any slot is touched.
    let map = unsafe { MmapMut::map_mut(&file) }
        .map_err(|e| CommError::io(format!("mapping {shown}"), e))?;
    let seg = Segment {
        map,
        size: world.size,
        slot_floats,
        data_off: PAGE,
        path: path.to_path_buf(),
    };
    if seg.word(H_MAGIC).load(Ordering::Acquire) != MAGIC {
        return Ok(None);
    }
    let creator = seg.word(H_CREATOR).load(Ordering::Relaxed);
    if !process_alive(creator) {
        return Ok(None); // a stale segment of a dead job; rank 0 will replace it
    }
    let refuse = |field: &'static str, expected: String, actual: u64| {
        Err(CommError::Refused {
            rank: world.rank,
            field,
            expected,
            actual: format!("{actual} in {shown}"),
        })
    };
    let version = seg.word(H_VERSION).load(Ordering::Relaxed);
    if version != PROTOCOL_VERSION {
        return refuse("protocol version", PROTOCOL_VERSION.to_string(), version);
    }
    let size = seg.word(H_SIZE).load(Ordering::Relaxed);
    if size != world.size as u64 {
        return refuse("world size", world.size.to_string(), size);
    }
    let slot = seg.word(H_SLOT).load(Ordering::Relaxed);
    if slot != slot_floats as u64 {
        return refuse("slot size", slot_floats.to_string(), slot);
    }
    if len != total {
        return refuse("segment length", total.to_string(), len as u64);
    }
    Ok(Some(Segment { data_off, ..seg }))
}

/// The creator's pid when `file` is a complete segment (its magic written).
fn segment_creator(file: &File) -> Option<u64> {
    if segment_file::read_word(file, H_MAGIC as u64)? != MAGIC {
        return None;
    }
    segment_file::read_word(file, H_CREATOR as u64)
}

/// The creator's pid when `file` is a segment whose creator is alive (a running job's).
fn segment_in_use(file: &File) -> Option<u64> {
    segment_creator(file).filter(|pid| process_alive(*pid))
}

/// Reserves the file's memory up front, so that a full /dev/shm is an error here and not a SIGBUS
/// in the middle of a collective.
fn allocate(file: &File, total: usize) -> std::io::Result<()> {
    file.set_len(total as u64)?;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: plain syscall on an open descriptor.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, total as libc::off_t) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
    }
    Ok(())
}

/// Whether process `pid` exists and is not a zombie.
fn process_alive(pid: u64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().chars().next()),
            Some(Some('Z' | 'X'))
        ),
        Err(_) => rc == 0,
    }
}

#[cfg(target_os = "linux")]
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a shared (non-private) FUTEX_WAIT on a valid, aligned u32 in a shared mapping; the
    // kernel only reads it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        );
    }
}

#[cfg(target_os = "linux")]
fn futex_wake(word: &AtomicU32) {
    // SAFETY: as `futex_wait`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn futex_wait(_word: &AtomicU32, _expected: u32, timeout: Duration) {
    std::thread::sleep(timeout.min(Duration::from_micros(200)));
}

#[cfg(not(target_os = "linux"))]
fn futex_wake(_word: &AtomicU32) {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    fn opts(name: &str) -> CommOptions {
        CommOptions {
            timeout: Duration::from_secs(5),
            shm_name: Some(format!("ffn-comm-unit-{name}-{}", std::process::id())),
            ..CommOptions::default()
        }
    }

    /// Runs `f` on `n` threads, each joining the same segment as its own rank (the protocol does not
    /// care whether ranks are threads or processes; the process tests live in ffn-cli/tests).
    fn with_ranks<T: Send>(
        n: usize,
        slot: usize,
        o: &CommOptions,
        f: impl Fn(&mut ShmComm) -> Result<T, conformance::ConformanceError> + Sync,
    ) -> Vec<T> {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|rank| {
                    let f = &f;
                    s.spawn(move || {
                        let mut c =
                            ShmComm::connect_with_slot(WorldInfo { rank, size: n }, o, slot)?;
                        f(&mut c)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
        })
    }

    #[test]
    fn conformance_on_threads_with_small_slots() {
        // Tiny slots force many rounds and exercise the alternation of slot sets.
        for n in [2, 3] {
            let o = opts(&format!("small{n}"));
            let d = with_ranks(n, 1000, &o, |c| {
                conformance::run_all(c, &conformance::SuiteOptions::quick())
            });
            assert!(d.windows(2).all(|w| w[0] == w[1]));
            let path = PathBuf::from("/dev/shm").join(o.shm_name.as_ref().unwrap());
            assert!(!path.exists(), "segment {path:?} left behind");
        }
    }

    #[test]
    fn results_match_the_local_backend() {
        let o = opts("match");
        let shm = with_ranks(3, o.shm_slot_bytes / 4, &o, |c| {
            conformance::run_all(c, &conformance::SuiteOptions::quick())
        });
        let local = crate::local::LocalComm::run(3, |c| {
            conformance::run_all(c, &conformance::SuiteOptions::quick())
        })
        .unwrap();
        assert_eq!(shm, local);
    }

    #[test]
    fn wrong_world_size_is_refused() {
        let o = CommOptions {
            timeout: Duration::from_secs(1),
            ..opts("size")
        };
        std::thread::scope(|s| {
            let o2 = &o;
            let h =
                s.spawn(move || ShmComm::connect(WorldInfo { rank: 0, size: 2 }, o2).map(|_| ()));
            std::thread::sleep(Duration::from_millis(100));
            let e = ShmComm::connect(WorldInfo { rank: 1, size: 3 }, &o)
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains("world size mismatch: expected 3, found 2"),
                "{e}"
            );
            let e0 = h.join().unwrap().unwrap_err().to_string();
            assert!(e0.contains("rank(s) [1]"), "{e0}");
        });
    }

    /// Waits until `path` exists (rank 0 created it).
    fn wait_for(path: &std::path::Path) {
        let start = Instant::now();
        while !path.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{path:?} never appeared"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_created_segment_is_private_to_its_owner() {
        use std::os::unix::fs::MetadataExt;
        let o = opts("mode");
        let path = PathBuf::from("/dev/shm").join(o.shm_name.as_ref().unwrap());
        std::thread::scope(|s| {
            let o2 = &o;
            let h =
                s.spawn(move || ShmComm::connect(WorldInfo { rank: 0, size: 2 }, o2).map(|_| ()));
            wait_for(&path);
            let meta = std::fs::metadata(&path).unwrap();
            // SAFETY: geteuid cannot fail.
            assert_eq!(meta.uid(), unsafe { libc::geteuid() });
            assert_eq!(meta.mode() & 0o7777, 0o600, "mode {:o}", meta.mode());
            ShmComm::connect(WorldInfo { rank: 1, size: 2 }, &o).unwrap();
            h.join().unwrap().unwrap();
        });
    }

    /// Plants `/dev/shm/<name>` owned by uid 65534 (needs root, as in CI).
    fn plant_foreign(name: &str) -> PathBuf {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid cannot fail.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "this test plants a segment of another user and needs root (CI runs as root)"
        );
        let path = PathBuf::from("/dev/shm").join(name);
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, vec![0u8; PAGE]).unwrap();
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().uid(), 65534);
        path
    }

    #[test]
    fn a_segment_of_another_user_is_refused_naming_it_and_its_owner() {
        let o = CommOptions {
            timeout: Duration::from_secs(2),
            ..opts("foreign")
        };
        let path = plant_foreign(o.shm_name.as_ref().unwrap());
        for rank in [1, 0] {
            let e = ShmComm::connect(WorldInfo { rank, size: 2 }, &o)
                .err()
                .unwrap();
            let text = e.to_string();
            assert!(
                matches!(e, CommError::NotOwner { .. }),
                "rank {rank}: {text}"
            );
            assert!(
                text.contains(&path.display().to_string()) && text.contains("uid 65534"),
                "rank {rank}: {text}"
            );
            assert!(path.exists(), "rank {rank} removed another user's segment");
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn stale_segments_of_dead_jobs_are_removed_and_live_ones_kept() {
        let write_segment = |name: &str, creator: u64| {
            let path = PathBuf::from("/dev/shm").join(name);
            let mut head = vec![0u8; PAGE];
            head[H_MAGIC..H_MAGIC + 8].copy_from_slice(&MAGIC.to_ne_bytes());
            head[H_CREATOR..H_CREATOR + 8].copy_from_slice(&creator.to_ne_bytes());
            std::fs::write(&path, head).unwrap();
            path
        };
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id() as u64;
        child.wait().unwrap();
        let id = std::process::id();
        let stale = write_segment(&format!("ffn-comm-unit-stale-{id}"), dead);
        let live = write_segment(&format!("ffn-comm-unit-live-{id}"), id as u64);
        let other = PathBuf::from("/dev/shm").join(format!("ffn-comm-unit-other-{id}"));
        std::fs::write(&other, b"not a segment").unwrap();
        let o = opts("sweep");
        with_ranks(2, 16, &o, |c| c.barrier().map_err(Into::into));
        assert!(!stale.exists(), "the dead job's segment was not removed");
        assert!(
            live.exists() && other.exists(),
            "a live segment or a foreign file was removed"
        );
        for p in [live, other] {
            std::fs::remove_file(p).unwrap();
        }
    }

    #[test]
    fn a_name_in_use_by_a_running_job_is_refused() {
        let o = CommOptions {
            timeout: Duration::from_secs(2),
            ..opts("inuse")
        };
        let path = PathBuf::from("/dev/shm").join(o.shm_name.as_ref().unwrap());
        std::thread::scope(|s| {
            let o2 = &o;
            let h =
                s.spawn(move || ShmComm::connect(WorldInfo { rank: 0, size: 2 }, o2).map(|_| ()));
            wait_for(&path);
            std::thread::sleep(Duration::from_millis(50));
            let e = ShmComm::connect(WorldInfo { rank: 0, size: 2 }, &o)
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("in use by the job of pid"), "{e}");
            assert!(h.join().unwrap().is_err(), "the first rank 0 had no rank 1");
        });
    }

    #[test]
    fn a_missing_name_is_a_clear_error() {
        let o = CommOptions::default();
        let e = ShmComm::connect(WorldInfo { rank: 0, size: 2 }, &o)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("FFN_SHM_NAME"), "{e}");
    }
}
