//! The `hier` backend (feature `zmq`): a job that spans hosts, with shared memory inside a host and
//! ZeroMQ between the hosts' leaders.
//!
//! # Layout
//! Ranks are placed host by host: `rank = host * local_size + local_rank`, and every host runs the
//! same number of ranks ([`HostLayout`], read from `LOCAL_RANK` / `LOCAL_WORLD_SIZE`,
//! `SLURM_LOCALID` / `SLURM_NTASKS_PER_NODE` or Open MPI's local variables). The ranks of a host
//! form an [`ShmComm`] group (segment: the job's `FFN_SHM_NAME` followed by `-host<H>`, so that
//! hosts sharing one `/dev/shm`, such as network namespaces of one machine, do not collide); the
//! leaders (local rank 0) form a [`ZmqComm`] group of `hosts` ranks, rank `host`, with the job's
//! `MASTER_ADDR` / `MASTER_PORT` (world rank 0 is host 0's leader), `FFN_COMM_BIND` (each leader's
//! own address) and `FFN_COMM_TOKEN`.
//!
//! # Collectives
//! * `allreduce_sum`: shm allreduce inside each host (local-rank order), zmq allreduce among the
//!   leaders (host order), shm broadcast of the result from each leader.
//! * `broadcast_bytes` from any root: inside the root's host from the root (which reaches its
//!   leader), among the leaders from the root's host, then inside every other host from its leader.
//! * `barrier`: shm barrier, leaders' zmq barrier, shm barrier.
//!
//! With one host the group is shm only, with one rank per host zmq only; the summation order is
//! the same definition in every case.
//!
//! # Determinism
//! Per element the result is `((x_0 + .. + x_{k-1}) + (x_k + .. + x_{2k-1})) + ...` with
//! `k = local_size`: each host's sum in local-rank order, then the host sums in host order
//! ([`reduce::sum_in_host_order`], [`Summation::HostThenRank`]). It is bitwise identical on every
//! rank and in every run, whatever the timing; it equals the flat rank order of the other backends
//! exactly with one host or one rank per host, and otherwise differs from it by rounding only
//! (each is within `(n-1) eps sum|x_i|` of the exact sum).
//!
//! # Failure
//! Timeouts and dead peers are detected by the two transports (bounded by `FFN_COMM_TIMEOUT`);
//! their errors are rewritten to name world ranks. A leader whose inter-host step fails aborts its
//! host's shm group, so the host's other ranks fail at once instead of waiting for the timeout.
//!
//! [`reduce::sum_in_host_order`]: crate::reduce::sum_in_host_order

use crate::shm::ShmComm;
use crate::zmq_backend::ZmqComm;
use crate::{CommError, CommOptions, Communicator, HostLayout, Summation, WorldInfo, check_root};

/// One rank of a hierarchical group.
pub struct HierComm {
    world: WorldInfo,
    layout: HostLayout,
    /// The ranks of this host.
    local: ShmComm,
    /// The hosts' leaders: `Some` on a leader when there is more than one host.
    leaders: Option<ZmqComm>,
}

impl HierComm {
    /// Joins the job from the environment: rank and size ([`WorldInfo::from_env`]) and the host
    /// layout ([`HostLayout::from_env`]).
    pub fn from_env(opts: &CommOptions) -> Result<Self, CommError> {
        let world = WorldInfo::from_env()?;
        Self::connect(world, HostLayout::from_env(world)?, opts)
    }

    /// Joins the group `world` placed as `layout`: the host's shm group first, then (leaders) the
    /// leaders' zmq group, then a barrier of everybody, so that a returned communicator is
    /// connected on every rank.
    pub fn connect(
        world: WorldInfo,
        layout: HostLayout,
        opts: &CommOptions,
    ) -> Result<Self, CommError> {
        let world = WorldInfo::new(world.rank, world.size)?;
        if HostLayout::new(world, layout.local_size).ok() != Some(layout) {
            return Err(CommError::Config {
                field: "host layout",
                expected: format!(
                    "rank {} of {} placed host by host (rank = host * local_size + local_rank)",
                    world.rank, world.size
                ),
                actual: format!("{layout:?}"),
            });
        }
        let local_opts = CommOptions {
            shm_name: opts
                .shm_name
                .as_ref()
                .map(|n| format!("{n}-host{}", layout.host)),
            ..opts.clone()
        };
        let local = ShmComm::connect(
            WorldInfo {
                rank: layout.local_rank,
                size: layout.local_size,
            },
            &local_opts,
        )
        .map_err(|e| in_host(e, &layout))?;
        let leaders = if layout.local_rank == 0 && layout.hosts > 1 {
            let leaders = ZmqComm::connect(
                WorldInfo {
                    rank: layout.host,
                    size: layout.hosts,
                },
                opts,
            );
            match leaders {
                Ok(z) => Some(z),
                Err(e) => {
                    local.abort();
                    return Err(between_hosts(e, &layout));
                }
            }
        } else {
            None
        };
        let mut comm = HierComm {
            world,
            layout,
            local,
            leaders,
        };
        comm.barrier()?;
        Ok(comm)
    }

    /// Where this rank sits: host, number of hosts, local rank and ranks per host.
    pub fn layout(&self) -> HostLayout {
        self.layout
    }

    /// The host's shm step; errors name world ranks.
    fn in_host<T>(
        &mut self,
        f: impl FnOnce(&mut ShmComm) -> Result<T, CommError>,
    ) -> Result<T, CommError> {
        let layout = self.layout;
        f(&mut self.local).map_err(|e| in_host(e, &layout))
    }

    /// The leaders' zmq step (nothing on other ranks or with one host); on failure the host's shm
    /// group is aborted so that its other ranks fail at once. Errors name world ranks.
    fn among_leaders(
        &mut self,
        f: impl FnOnce(&mut ZmqComm) -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        let Some(z) = self.leaders.as_mut() else {
            return Ok(());
        };
        f(z).map_err(|e| {
            self.local.abort();
            between_hosts(e, &self.layout)
        })
    }
}

impl Communicator for HierComm {
    fn rank(&self) -> usize {
        self.world.rank
    }

    fn size(&self) -> usize {
        self.world.size
    }

    fn backend(&self) -> &'static str {
        "hier"
    }

    fn summation(&self) -> Summation {
        Summation::HostThenRank {
            local_size: self.layout.local_size,
        }
    }

    fn allreduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        self.in_host(|c| c.allreduce_sum(buf))?;
        if self.layout.hosts > 1 {
            self.among_leaders(|z| z.allreduce_sum(buf))?;
            self.in_host(|c| c.broadcast(buf, 0))?;
        }
        Ok(())
    }

    fn broadcast_bytes(&mut self, buf: &mut [u8], root: usize) -> Result<(), CommError> {
        check_root(root, self.world.size)?;
        let (root_host, root_local) =
            (root / self.layout.local_size, root % self.layout.local_size);
        let on_root_host = self.layout.host == root_host;
        if on_root_host {
            self.in_host(|c| c.broadcast_bytes(buf, root_local))?;
        }
        if self.layout.hosts > 1 {
            self.among_leaders(|z| z.broadcast_bytes(buf, root_host))?;
            if !on_root_host {
                self.in_host(|c| c.broadcast_bytes(buf, 0))?;
            }
        }
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        self.in_host(|c| c.barrier())?;
        if self.layout.hosts > 1 {
            self.among_leaders(|z| z.barrier())?;
            self.in_host(|c| c.barrier())?;
        }
        Ok(())
    }
}

/// An error of the host's shm group (local ranks) with world ranks instead.
fn in_host(e: CommError, l: &HostLayout) -> CommError {
    renumber(e, |r| l.world_rank(l.host, r))
}

/// An error of the leaders' zmq group (host indices) with the leaders' world ranks instead.
fn between_hosts(e: CommError, l: &HostLayout) -> CommError {
    renumber(e, |h| l.world_rank(h, 0))
}

/// Rewrites the ranks an error names through `world`.
fn renumber(e: CommError, world: impl Fn(usize) -> usize) -> CommError {
    match e {
        CommError::Timeout {
            rank,
            peers,
            op,
            waited,
        } => CommError::Timeout {
            rank: world(rank),
            peers: peers.into_iter().map(&world).collect(),
            op,
            waited,
        },
        CommError::PeerLost {
            rank,
            peer,
            op,
            detail,
        } => CommError::PeerLost {
            rank: world(rank),
            peer: world(peer),
            op,
            detail,
        },
        CommError::LengthMismatch {
            rank,
            peer,
            op,
            expected,
            actual,
        } => CommError::LengthMismatch {
            rank: world(rank),
            peer: world(peer),
            op,
            expected,
            actual,
        },
        CommError::Refused {
            rank,
            field,
            expected,
            actual,
        } => CommError::Refused {
            rank: world(rank),
            field,
            expected,
            actual,
        },
        CommError::Protocol { rank, peer, detail } => CommError::Protocol {
            rank: world(rank),
            peer: world(peer),
            detail,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests;
