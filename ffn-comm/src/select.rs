//! Choosing a backend by name at run time.

use crate::{CommError, CommOptions, Communicator, WorldInfo};
use std::str::FromStr;

/// The communicator backends, whether or not this build contains them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Threads of one process ([`crate::local`]); from the command line only a group of one.
    Local,
    /// Processes on one host sharing memory ([`crate::shm`]).
    Shm,
    /// MPI (feature `mpi`).
    Mpi,
    /// ZeroMQ over TCP (feature `zmq`).
    Zmq,
    /// Hierarchical: shm inside a host, ZeroMQ between host leaders ([`crate::hier`], feature
    /// `zmq`).
    Hier,
}

impl Backend {
    /// All backends, compiled in or not.
    pub const ALL: [Backend; 5] = [
        Backend::Local,
        Backend::Shm,
        Backend::Mpi,
        Backend::Zmq,
        Backend::Hier,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Local => "local",
            Backend::Shm => "shm",
            Backend::Mpi => "mpi",
            Backend::Zmq => "zmq",
            Backend::Hier => "hier",
        }
    }

    /// Whether this build contains the backend.
    pub fn compiled_in(self) -> bool {
        match self {
            Backend::Local | Backend::Shm => true,
            Backend::Mpi => cfg!(feature = "mpi"),
            Backend::Zmq | Backend::Hier => cfg!(feature = "zmq"),
        }
    }

    /// The error for a backend this build lacks, or `Ok`.
    pub fn ensure_compiled_in(self) -> Result<(), CommError> {
        match self {
            _ if self.compiled_in() => Ok(()),
            Backend::Mpi => Err(CommError::NotCompiled {
                backend: "MPI",
                feature: "mpi",
            }),
            _ => Err(CommError::NotCompiled {
                backend: "ZeroMQ",
                feature: "zmq",
            }),
        }
    }

    /// Whether ranks are separate processes whose rank and size come from the environment
    /// (`ffn launch`, torchrun-style variables, SLURM).
    pub fn uses_env_world(self) -> bool {
        matches!(self, Backend::Shm | Backend::Zmq | Backend::Hier)
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = CommError;

    fn from_str(s: &str) -> Result<Self, CommError> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| CommError::UnknownBackend {
                name: s.to_string(),
                expected: Backend::ALL.map(|b| b.name()).join(", "),
            })
    }
}

/// Joins the job with the named backend: rank and size from MPI for `mpi`, from the environment
/// ([`WorldInfo::from_env`]) for `shm`, `zmq` and `hier` (which also reads the host layout,
/// [`crate::HostLayout::from_env`]); `local` is a group of one.
pub fn connect(backend: Backend, opts: &CommOptions) -> Result<Box<dyn Communicator>, CommError> {
    backend.ensure_compiled_in()?;
    match backend {
        Backend::Local => Ok(Box::new(crate::local::LocalComm::solo())),
        Backend::Shm => {
            let world = WorldInfo::from_env()?;
            Ok(Box::new(crate::shm::ShmComm::connect(world, opts)?))
        }
        #[cfg(feature = "mpi")]
        Backend::Mpi => Ok(Box::new(crate::mpi_backend::MpiComm::init(opts)?)),
        #[cfg(feature = "zmq")]
        Backend::Zmq => {
            let world = WorldInfo::from_env()?;
            Ok(Box::new(crate::zmq_backend::ZmqComm::connect(world, opts)?))
        }
        #[cfg(feature = "zmq")]
        Backend::Hier => Ok(Box::new(crate::hier::HierComm::from_env(opts)?)),
        #[allow(unreachable_patterns)]
        other => Err(CommError::NotCompiled {
            backend: other.name(),
            feature: other.name(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_choices() {
        for b in Backend::ALL {
            assert_eq!(b.name().parse::<Backend>().unwrap(), b);
        }
        let e = "nccl".parse::<Backend>().unwrap_err().to_string();
        assert!(
            e.contains("\"nccl\"") && e.contains("local, shm, mpi, zmq, hier"),
            "{e}"
        );
    }

    #[test]
    fn missing_backends_say_how_to_rebuild() {
        if !cfg!(feature = "mpi") {
            let e = Backend::Mpi.ensure_compiled_in().unwrap_err().to_string();
            assert_eq!(e, "built without MPI support: rebuild with --features mpi");
        }
        if !cfg!(feature = "zmq") {
            let e = Backend::Zmq.ensure_compiled_in().unwrap_err().to_string();
            assert_eq!(
                e,
                "built without ZeroMQ support: rebuild with --features zmq"
            );
            let e = Backend::Hier.ensure_compiled_in().unwrap_err().to_string();
            assert!(e.ends_with("rebuild with --features zmq"), "{e}");
        }
        assert!(
            Backend::Local.ensure_compiled_in().is_ok()
                && Backend::Shm.ensure_compiled_in().is_ok()
        );
    }
}
