//! # ffn-comm
//!
//! Collective communication for synchronous data-parallel training: one small trait,
//! [`Communicator`], and four backends that all give bitwise identical results:
//!
//! | backend | ranks are | module |
//! | --- | --- | --- |
//! | `local` | threads of one process | [`local`] |
//! | `shm` | processes on one host sharing a segment in `/dev/shm` | [`shm`] |
//! | `mpi` | MPI processes (feature `mpi`) | `mpi_backend` |
//! | `zmq` | processes talking TCP through libzmq (feature `zmq`) | `zmq_backend` |
//! | `hier` | processes on several hosts: shm inside a host, zmq between host leaders (feature `zmq`) | `hier` |
//!
//! ## Determinism
//!
//! Every flat backend reduces in the same fixed order: the buffer is cut into `size` balanced chunks
//! ([`chunk_range`]), the owner of each chunk adds the contributions in rank order
//! `((x0 + x1) + x2) + ...` ([`reduce::sum_in_rank_order`]) and every rank then copies the owner's
//! result. So all ranks hold bitwise identical results, the same inputs give the same result run after
//! run, and the backends agree with each other bit for bit. The hierarchical backend `hier` sums
//! each host in rank order, then the host sums in host order ([`reduce::sum_in_host_order`]): just as
//! deterministic, and equal to the flat order up to rounding ([`Communicator::summation`] says
//! which order a communicator uses).
//!
//! ## Failure
//!
//! A dead or stalled peer becomes a [`CommError`] naming the rank within [`CommOptions::timeout`]
//! (default 60 s); a warning goes to stderr once a collective has waited
//! [`CommOptions::stall_warning`]. MPI collectives cannot be interrupted, so the MPI backend aborts the
//! whole job with a message instead.
//!
//! # Examples
//!
//! ```
//! use ffn_comm::{Communicator, local::LocalComm};
//!
//! let sums = LocalComm::run(3, |comm| {
//!     let mut buf = vec![comm.rank() as f32; 4];
//!     comm.allreduce_sum(&mut buf)?;
//!     Ok::<_, ffn_comm::CommError>(buf)
//! })
//! .unwrap();
//! assert!(sums.iter().all(|b| b == &vec![3.0; 4]));
//! ```
#![warn(missing_docs)]

pub mod bench;
pub mod conformance;
pub mod data_parallel;
pub mod env;
mod error;
#[cfg(feature = "zmq")]
pub mod hier;
pub mod launch;
pub mod local;
#[cfg(feature = "mpi")]
pub mod mpi_backend;
pub mod reduce;
pub mod secret;
pub mod select;
pub mod shm;
mod stall;
pub mod stop;
pub mod threads;
#[cfg(feature = "zmq")]
pub mod zmq_backend;
pub mod zmq_wire;

pub use env::{CommOptions, HostLayout, WorldInfo};
pub use error::CommError;
pub use reduce::{Summation, chunk_range};
pub use select::{Backend, connect};

/// The version of this crate, as written in its manifest.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A group of `size` ranks that run collectives together.
///
/// Every rank must call the same collectives in the same order with buffers of the same length
/// (backends that can check this return [`CommError::LengthMismatch`] instead of hanging).
/// Every call returns a `Result`: a dead or stalled peer is an error, never a hang.
///
/// The trait is object-safe; code that does not care about the transport takes
/// `&mut dyn Communicator`.
pub trait Communicator {
    /// This process's (or thread's) rank, `0..size()`.
    fn rank(&self) -> usize;

    /// The number of ranks.
    fn size(&self) -> usize;

    /// The backend's name as accepted by [`connect`] (`"local"`, `"shm"`, `"mpi"`, `"zmq"`, `"hier"`).
    fn backend(&self) -> &'static str;

    /// Element-wise sum of `buf` over all ranks, in place: afterwards every rank holds
    /// `x_0 + x_1 + ... + x_{n-1}`, added per element in the order [`summation`](Self::summation)
    /// names (rank order for every flat backend), bitwise identical on all ranks.
    fn allreduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError>;

    /// The fixed order in which [`allreduce_sum`](Self::allreduce_sum) adds the ranks'
    /// contributions: [`Summation::RankOrder`] unless the backend says otherwise (`hier`:
    /// [`Summation::HostThenRank`]). The conformance suite checks results against it bit for bit.
    fn summation(&self) -> Summation {
        Summation::RankOrder
    }

    /// Copies `root`'s `buf` into every other rank's `buf` (all ranks pass the same length).
    fn broadcast_bytes(&mut self, buf: &mut [u8], root: usize) -> Result<(), CommError>;

    /// Returns once every rank has entered the barrier.
    fn barrier(&mut self) -> Result<(), CommError>;

    /// Copies `root`'s `buf` into every other rank's `buf`, bit for bit.
    fn broadcast(&mut self, buf: &mut [f32], root: usize) -> Result<(), CommError> {
        self.broadcast_bytes(reduce::as_bytes_mut(buf), root)
    }

    /// Element-wise mean over all ranks: [`allreduce_sum`](Self::allreduce_sum), then division by
    /// the number of ranks (the same division on every rank, so results stay bitwise identical).
    fn allreduce_mean(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        self.allreduce_sum(buf)?;
        let n = self.size() as f32;
        for x in buf.iter_mut() {
            *x /= n;
        }
        Ok(())
    }

    /// Sums several buffers with one collective (tensor fusion): the buffers are packed into one,
    /// reduced, and copied back. The result is identical to reducing each buffer on its own.
    fn allreduce_sum_many(&mut self, bufs: &mut [&mut [f32]]) -> Result<(), CommError> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut packed = Vec::with_capacity(total);
        for b in bufs.iter() {
            packed.extend_from_slice(b);
        }
        self.allreduce_sum(&mut packed)?;
        let mut offset = 0;
        for b in bufs.iter_mut() {
            let n = b.len();
            b.copy_from_slice(&packed[offset..offset + n]);
            offset += n;
        }
        Ok(())
    }
}

/// Checks a broadcast root against the group size.
pub(crate) fn check_root(root: usize, size: usize) -> Result<(), CommError> {
    if root >= size {
        return Err(CommError::InvalidRoot { root, size });
    }
    Ok(())
}

/// A free TCP port on the loopback interface (the rendezvous ports of the ZeroMQ and hierarchical
/// backends' unit tests).
#[cfg(all(test, feature = "zmq"))]
pub(crate) fn free_loopback_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[cfg(test)]
mod object_safety {
    use super::Communicator;

    /// Compile test: the trait must stay usable as a trait object.
    fn takes_dyn(comm: &mut dyn Communicator) -> usize {
        comm.rank() + comm.size()
    }

    #[test]
    fn communicator_is_object_safe() {
        let mut comm = crate::local::LocalComm::solo();
        let boxed: Box<dyn Communicator> = Box::new(crate::local::LocalComm::solo());
        assert_eq!(takes_dyn(&mut comm), 1);
        assert_eq!(boxed.size(), 1);
    }
}
