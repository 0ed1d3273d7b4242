//! The error type of every collective and every backend constructor.

use std::time::Duration;

/// Everything that can go wrong in a collective or while setting up a backend.
///
/// Variants about a peer name its rank, so that a user can tell which process died or stalled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommError {
    /// A peer did not take part in a collective within the timeout (dead, stalled or not started).
    #[error(
        "rank {rank}: {op} timed out after {:.1} s waiting for rank(s) {peers:?} (dead, stalled or \
         not started; set FFN_COMM_TIMEOUT to wait longer)", waited.as_secs_f64()
    )]
    Timeout {
        /// The rank that gave up waiting.
        rank: usize,
        /// The ranks it was waiting for.
        peers: Vec<usize>,
        /// The collective (`"allreduce"`, `"broadcast"`, `"barrier"`, `"connect"`).
        op: &'static str,
        /// How long it waited.
        waited: Duration,
    },
    /// A peer process is known to have exited or closed its connection.
    #[error("rank {rank}: peer rank {peer} is gone during {op}: {detail}")]
    PeerLost {
        /// The rank that noticed.
        rank: usize,
        /// The rank that is gone.
        peer: usize,
        /// The collective in progress.
        op: &'static str,
        /// What was observed (exit, closed connection, abort flag).
        detail: String,
    },
    /// Ranks called different collectives, or passed buffers of different lengths.
    #[error(
        "rank {rank}: {op} mismatch with rank {peer}: expected {expected}, rank {peer} has {actual} \
         (every rank must call the same collectives with the same lengths)"
    )]
    LengthMismatch {
        /// The rank that noticed.
        rank: usize,
        /// The rank whose call differs.
        peer: usize,
        /// The collective.
        op: &'static str,
        /// This rank's call (operation and length).
        expected: String,
        /// The other rank's call.
        actual: String,
    },
    /// A broadcast root outside `0..size`.
    #[error("broadcast root {root} is not a rank of a group of size {size} (expected 0..{size})")]
    InvalidRoot {
        /// The root that was asked for.
        root: usize,
        /// The group size.
        size: usize,
    },
    /// A backend that this build does not contain.
    #[error("built without {backend} support: rebuild with --features {feature}")]
    NotCompiled {
        /// The backend that was asked for.
        backend: &'static str,
        /// The cargo feature that enables it.
        feature: &'static str,
    },
    /// A backend name that does not exist.
    #[error("unknown communicator backend {name:?}: expected one of {expected}")]
    UnknownBackend {
        /// What was asked for.
        name: String,
        /// The accepted names.
        expected: String,
    },
    /// An environment variable (rank, size, address, timeout) is missing or malformed.
    #[error("environment variable {var}={found:?}: expected {expected}")]
    Env {
        /// The variable.
        var: String,
        /// What it should hold.
        expected: String,
        /// What it holds (`"<unset>"` when missing).
        found: String,
    },
    /// A configuration value is out of range (world size 0, rank >= size, ...).
    #[error("invalid communicator setting {field}: expected {expected}, found {actual}")]
    Config {
        /// The setting.
        field: &'static str,
        /// What is allowed.
        expected: String,
        /// What was given.
        actual: String,
    },
    /// A peer was refused during the rendezvous (wrong job token, world size or protocol version).
    #[error(
        "rank {rank}: rendezvous refused: {field} mismatch: expected {expected}, found {actual}"
    )]
    Refused {
        /// The rank reporting (the refused peer or rank 0).
        rank: usize,
        /// What did not match (`"job token"`, `"world size"`, `"protocol version"`, ...).
        field: &'static str,
        /// The value required.
        expected: String,
        /// The value presented.
        actual: String,
    },
    /// A peer sent a message that does not follow the protocol.
    #[error("rank {rank}: bad message from rank {peer}: {detail}")]
    Protocol {
        /// The rank that received it.
        rank: usize,
        /// The sender.
        peer: usize,
        /// What was wrong.
        detail: String,
    },
    /// A shared-memory segment file belongs to another user: never attached to, never removed.
    #[error(
        "shm segment {path} belongs to {owner}, not to this process's {user}: refusing to use or \
         remove another user's segment (choose another FFN_SHM_NAME, or have its owner remove it)"
    )]
    NotOwner {
        /// The segment file.
        path: String,
        /// Its owner (uid and user name).
        owner: String,
        /// This process's effective user.
        user: String,
    },
    /// An operating-system call failed (segment file, mapping, sockets).
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the file or address.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An error reported by the transport library (libzmq, MPI).
    #[error("{backend}: {context}: {detail}")]
    Transport {
        /// The backend.
        backend: &'static str,
        /// What was being done.
        context: String,
        /// The library's message.
        detail: String,
    },
}

impl CommError {
    /// Wraps an I/O error with a context naming the file or address involved.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        CommError::Io {
            context: context.into(),
            source,
        }
    }
}
