//! Rank, size, address and timeout discovery from the environment, like the usual launchers set it.
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `RANK`, `WORLD_SIZE` | rank and number of ranks (torchrun, `ffn launch`) | |
//! | `SLURM_PROCID`, `SLURM_NTASKS` | the same under `srun` | |
//! | `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE` | the same under Open MPI's `mpirun` | |
//! | `LOCAL_RANK`, `LOCAL_WORLD_SIZE` | rank on this host and ranks per host ([`HostLayout`], `hier`) | |
//! | `SLURM_LOCALID`, `SLURM_NTASKS_PER_NODE` | the same under `srun --ntasks-per-node` | |
//! | `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE` | the same under Open MPI | |
//! | `MASTER_ADDR`, `MASTER_PORT` | rank 0's rendezvous address (zmq; never a wildcard) | `127.0.0.1`, `29500` |
//! | `FFN_COMM_MASTER_BIND` | address rank 0 binds the rendezvous to, a wildcard allowed (zmq) | `MASTER_ADDR` |
//! | `FFN_COMM_BIND` | address the zmq data sockets bind to and announce (never a wildcard) | `127.0.0.1` |
//! | `FFN_COMM_TOKEN` | the job secret, at least 16 characters, required for zmq with 2+ ranks | unset (`ffn launch` sets one) |
//! | `FFN_SHM_NAME` | name of the shm segment in `/dev/shm` | keyed hash of the job (see below) |
//! | `FFN_COMM_TIMEOUT` | seconds before a dead or stalled peer is an error | `60` |
//! | `FFN_COMM_STALL_WARNING` | seconds before a waiting collective warns on stderr (0: never) | `20` |
//! | `FFN_SHM_SLOT_BYTES` | bytes per rank and round of the shm allreduce (same on all ranks) | `1M` worth |
//! | `FFN_SHM_SPIN_US` | microseconds an shm waiter spins before yielding | 1000, or 20 when oversubscribed |
//!
//! Without `FFN_SHM_NAME` the shm segment is named `ffn-comm-` and 32 hex digits of
//! HMAC-SHA256(`FFN_COMM_TOKEN`, the job's SLURM ids and `MASTER_PORT`): every rank finds the same
//! name, nobody without the secret can guess it, and it reveals nothing of the secret. Without a
//! token either, the name falls back to one derived from `SLURM_JOB_ID` or `MASTER_PORT`
//! (guessable: another user can then only make the job fail with an error naming them, never
//! read or write its segment, see [`crate::shm`]).
//!
//! Everything is read through a lookup function, so tests (and embedders) need not touch the
//! process environment.

use crate::CommError;
use std::time::Duration;

/// This process's place in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorldInfo {
    /// Rank, `0..size`.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
}

/// Pairs of (rank variable, size variable), in the order they are tried.
const RANK_SOURCES: [VarPair; 4] = [
    ("RANK", "WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
];

impl WorldInfo {
    /// Reads rank and size from the process environment (see the module docs).
    pub fn from_env() -> Result<Self, CommError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads rank and size through `get` (a stand-in for `std::env::var`). A process with none of
    /// the variables is rank 0 of 1.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, CommError> {
        match first_pair(&get, &RANK_SOURCES)? {
            Some((_, rank, size)) => Self::new(rank, size),
            None => Ok(WorldInfo { rank: 0, size: 1 }),
        }
    }

    /// Checks `size >= 1` and `rank < size`.
    pub fn new(rank: usize, size: usize) -> Result<Self, CommError> {
        if size == 0 {
            return Err(CommError::Config {
                field: "world size",
                expected: "at least 1".into(),
                actual: "0".into(),
            });
        }
        if rank >= size {
            return Err(CommError::Config {
                field: "rank",
                expected: format!("0..{size}"),
                actual: rank.to_string(),
            });
        }
        Ok(WorldInfo { rank, size })
    }
}

/// Where this rank sits in a job spread over hosts (the `hier` backend): ranks are placed host by
/// host, `rank = host * local_size + local_rank`, and every host runs `local_size` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLayout {
    /// This rank's host, `0..hosts`.
    pub host: usize,
    /// Number of hosts.
    pub hosts: usize,
    /// This rank's place on its host, `0..local_size` (0: the host's leader).
    pub local_rank: usize,
    /// Ranks per host.
    pub local_size: usize,
}

/// Pairs of (local rank variable, ranks-per-host variable), in the order they are tried.
const LOCAL_SOURCES: [VarPair; 3] = [
    ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
];

impl HostLayout {
    /// Reads the local rank and ranks per host of `world`'s rank from the process environment.
    pub fn from_env(world: WorldInfo) -> Result<Self, CommError> {
        Self::from_lookup(world, |k| std::env::var(k).ok())
    }

    /// Reads the local rank and ranks per host through `get` (`LOCAL_RANK` / `LOCAL_WORLD_SIZE`,
    /// else `SLURM_LOCALID` / `SLURM_NTASKS_PER_NODE`, else Open MPI's) and checks them against
    /// `world`: the ranks per host must divide the world size and the rank must be
    /// `host * local_size + local_rank`. Errors name the variable, the expected and the found value.
    pub fn from_lookup(
        world: WorldInfo,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, CommError> {
        if let Some(((rank_var, size_var), local_rank, local_size)) =
            first_pair(&get, &LOCAL_SOURCES)?
        {
            let env = |var: &str, expected: String, found: usize| CommError::Env {
                var: var.into(),
                expected,
                found: found.to_string(),
            };
            if local_size == 0 || !world.size.is_multiple_of(local_size) {
                return Err(env(
                    size_var,
                    format!(
                        "ranks per host dividing the world size {} (every host runs as many ranks)",
                        world.size
                    ),
                    local_size,
                ));
            }
            if local_rank != world.rank % local_size {
                return Err(env(
                    rank_var,
                    format!(
                        "{} (ranks are placed host by host: rank {} = host {} * {local_size} + \
                         local rank)",
                        world.rank % local_size,
                        world.rank,
                        world.rank / local_size
                    ),
                    local_rank,
                ));
            }
            return Self::new(world, local_size);
        }
        Err(missing(
            "LOCAL_WORLD_SIZE",
            "the ranks per host (LOCAL_RANK and LOCAL_WORLD_SIZE, SLURM_LOCALID and \
             SLURM_NTASKS_PER_NODE, or OMPI_COMM_WORLD_LOCAL_RANK and OMPI_COMM_WORLD_LOCAL_SIZE)",
        ))
    }

    /// The layout of `world`'s rank with `local_size` ranks per host (which must divide the size).
    pub fn new(world: WorldInfo, local_size: usize) -> Result<Self, CommError> {
        if local_size == 0 || !world.size.is_multiple_of(local_size) {
            return Err(CommError::Config {
                field: "ranks per host",
                expected: format!("a divisor of the world size {}", world.size),
                actual: local_size.to_string(),
            });
        }
        Ok(HostLayout {
            host: world.rank / local_size,
            hosts: world.size / local_size,
            local_rank: world.rank % local_size,
            local_size,
        })
    }

    /// The world rank of `local_rank` on `host`.
    pub fn world_rank(&self, host: usize, local_rank: usize) -> usize {
        host * self.local_size + local_rank
    }
}

/// Settings shared by the process-based backends.
#[derive(Debug, Clone, PartialEq)]
pub struct CommOptions {
    /// A collective that waits this long for a peer fails with [`CommError::Timeout`].
    pub timeout: Duration,
    /// A collective that waits this long prints one warning naming the late ranks (zero: never).
    pub stall_warning: Duration,
    /// Rank 0's rendezvous host (zmq).
    pub master_addr: String,
    /// Rank 0's rendezvous port (zmq).
    pub master_port: u16,
    /// Where rank 0 binds the rendezvous (zmq); `None`: `master_addr` (never a wildcard). A
    /// wildcard here (`0.0.0.0`, `::`) is the user's explicit choice.
    pub master_bind: Option<String>,
    /// Address the data sockets bind to and announce (zmq).
    pub bind_addr: String,
    /// The job secret every peer must prove on every connection (zmq; see [`crate::secret`]).
    pub job_token: String,
    /// Name of the shared-memory segment in `/dev/shm` (shm); `None` when nothing names the job.
    pub shm_name: Option<String>,
    /// Bytes per rank and round of the shm allreduce (a multiple of 4; every rank must agree).
    pub shm_slot_bytes: usize,
    /// How long an shm waiter spins before it yields; `None`: 1 ms, or 20 µs when there are more
    /// ranks than cores.
    pub shm_spin: Option<Duration>,
}

impl Default for CommOptions {
    fn default() -> Self {
        CommOptions {
            timeout: Duration::from_secs(60),
            stall_warning: Duration::from_secs(20),
            master_addr: "127.0.0.1".into(),
            master_port: 29500,
            master_bind: None,
            bind_addr: "127.0.0.1".into(),
            job_token: String::new(),
            shm_name: None,
            shm_slot_bytes: 1 << 20,
            shm_spin: None,
        }
    }
}

impl CommOptions {
    /// Reads the options from the process environment (see the module docs).
    pub fn from_env() -> Result<Self, CommError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the options through `get`; unset variables keep their defaults.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, CommError> {
        let mut o = CommOptions::default();
        if let Some(v) = get("FFN_COMM_TOKEN") {
            o.job_token = v;
        }
        if let Some(v) = get("FFN_COMM_TIMEOUT") {
            o.timeout = parse_seconds("FFN_COMM_TIMEOUT", &v, false)?;
        }
        if let Some(v) = get("FFN_COMM_STALL_WARNING") {
            o.stall_warning = parse_seconds("FFN_COMM_STALL_WARNING", &v, true)?;
        }
        if let Some(v) = get("MASTER_ADDR") {
            if v.trim().is_empty() {
                return Err(CommError::Env {
                    var: "MASTER_ADDR".into(),
                    expected: "a host name or IP address".into(),
                    found: v,
                });
            }
            if is_wildcard(&v) {
                return Err(wildcard_master_addr(&v));
            }
            o.master_addr = v.trim().to_string();
        }
        if let Some(v) = get("FFN_COMM_MASTER_BIND") {
            if v.trim().is_empty() || v.contains(['/', ' ']) {
                return Err(CommError::Env {
                    var: "FFN_COMM_MASTER_BIND".into(),
                    expected: "an IP address of this host, or 0.0.0.0 / :: for all interfaces"
                        .into(),
                    found: v,
                });
            }
            o.master_bind = Some(v.trim().to_string());
        }
        if let Some(v) = get("MASTER_PORT") {
            o.master_port = v
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| CommError::Env {
                    var: "MASTER_PORT".into(),
                    expected: "a TCP port 1..65535".into(),
                    found: v.clone(),
                })?;
        }
        if let Some(v) = get("FFN_COMM_BIND") {
            if v.trim().is_empty() || v.contains(['/', ' ']) || is_wildcard(&v) {
                return Err(wildcard_bind(&v));
            }
            o.bind_addr = v.trim().to_string();
        }
        if let Some(v) = get("FFN_SHM_SLOT_BYTES") {
            o.shm_slot_bytes = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|b| *b >= 4 && b.is_multiple_of(4) && *b <= 1 << 32)
                .ok_or_else(|| CommError::Env {
                    var: "FFN_SHM_SLOT_BYTES".into(),
                    expected: "a multiple of 4 bytes in 4 ..= 2^32".into(),
                    found: v.clone(),
                })?;
        }
        if let Some(v) = get("FFN_SHM_SPIN_US") {
            let us = parse_seconds("FFN_SHM_SPIN_US", &v, true)?;
            o.shm_spin = Some(us / 1_000_000);
        }
        o.shm_name = match get("FFN_SHM_NAME") {
            Some(v) => {
                let ok = !v.is_empty()
                    && v.len() <= 200
                    && v.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                    && !v.starts_with('.');
                if !ok {
                    return Err(CommError::Env {
                        var: "FFN_SHM_NAME".into(),
                        expected: "1-200 characters from [A-Za-z0-9-_.], not starting with '.'"
                            .into(),
                        found: v,
                    });
                }
                Some(v)
            }
            None => default_shm_name(&get, &o.job_token, o.master_port),
        };
        Ok(o)
    }
}

/// The shm segment name when `FFN_SHM_NAME` is unset (see the module docs).
fn default_shm_name(
    get: &impl Fn(&str) -> Option<String>,
    token: &str,
    master_port: u16,
) -> Option<String> {
    let clean = |v: Option<String>| -> Option<String> {
        v.map(|s| s.chars().filter(|c| c.is_ascii_alphanumeric()).collect())
    };
    let (job, step, port) = (
        clean(get("SLURM_JOB_ID")),
        clean(get("SLURM_STEP_ID")),
        get("MASTER_PORT").map(|_| master_port),
    );
    if job.is_none() && port.is_none() {
        return None;
    }
    if !token.is_empty() {
        let id = format!(
            "shm-name\0{}\0{}\0{}",
            job.unwrap_or_default(),
            step.unwrap_or_default(),
            port.map(|p| p.to_string()).unwrap_or_default()
        );
        let key = crate::secret::derive(token, &id);
        return Some(format!("ffn-comm-{}", crate::secret::hex(&key[..16])));
    }
    match (job, step) {
        (Some(job), step) if !job.is_empty() => {
            Some(format!("ffn-comm-slurm-{job}.{}", step.unwrap_or_default()))
        }
        _ => port.map(|p| format!("ffn-comm-port-{p}")),
    }
}

/// Whether `host` means "every interface" (`*`, `0.0.0.0`, `::`, `[::]`, ...).
pub(crate) fn is_wildcard(host: &str) -> bool {
    let h = host.trim();
    let bare = h.trim_start_matches('[').trim_end_matches(']');
    h.contains('*')
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified())
}

/// The error for a wildcard (or malformed) `FFN_COMM_BIND`.
pub(crate) fn wildcard_bind(v: &str) -> CommError {
    CommError::Env {
        var: "FFN_COMM_BIND".into(),
        expected: "one IP address of this host that peers can reach (not a wildcard)".into(),
        found: v.into(),
    }
}

/// The error for a wildcard `MASTER_ADDR`.
pub(crate) fn wildcard_master_addr(v: &str) -> CommError {
    CommError::Env {
        var: "MASTER_ADDR".into(),
        expected: "the address of rank 0 that the other ranks connect to, not a wildcard (to \
                   make rank 0 listen on all interfaces, set FFN_COMM_MASTER_BIND=0.0.0.0 \
                   explicitly)"
            .into(),
        found: v.into(),
    }
}

/// A (rank variable, size variable) pair such as (`RANK`, `WORLD_SIZE`).
type VarPair = (&'static str, &'static str);

/// The first pair of `sources` that is set, with both values parsed; `None` when no pair is set.
/// A pair with only one of its variables set is an error.
fn first_pair(
    get: &impl Fn(&str) -> Option<String>,
    sources: &[VarPair],
) -> Result<Option<(VarPair, usize, usize)>, CommError> {
    for &(rank_var, size_var) in sources {
        match (get(rank_var), get(size_var)) {
            (None, None) => continue,
            (Some(r), Some(s)) => {
                let (r, s) = (parse_usize(rank_var, &r)?, parse_usize(size_var, &s)?);
                return Ok(Some(((rank_var, size_var), r, s)));
            }
            (Some(_), None) => {
                return Err(missing(size_var, &format!("set together with {rank_var}")));
            }
            (None, Some(_)) => {
                return Err(missing(rank_var, &format!("set together with {size_var}")));
            }
        }
    }
    Ok(None)
}

fn missing(var: &str, expected: &str) -> CommError {
    CommError::Env {
        var: var.into(),
        expected: expected.into(),
        found: "<unset>".into(),
    }
}

fn parse_usize(var: &str, v: &str) -> Result<usize, CommError> {
    v.trim().parse::<usize>().map_err(|_| CommError::Env {
        var: var.into(),
        expected: "a non-negative integer".into(),
        found: v.into(),
    })
}

fn parse_seconds(var: &str, v: &str, zero_ok: bool) -> Result<Duration, CommError> {
    let err = || CommError::Env {
        var: var.into(),
        expected: if zero_ok {
            "seconds >= 0".into()
        } else {
            "seconds > 0".into()
        },
        found: v.into(),
    };
    let s: f64 = v.trim().parse().map_err(|_| err())?;
    if !s.is_finite() || s < 0.0 || (s == 0.0 && !zero_ok) || s > 1e9 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn world_from_each_launcher() {
        assert_eq!(
            WorldInfo::from_lookup(lookup(&[])).unwrap(),
            WorldInfo { rank: 0, size: 1 }
        );
        let w = WorldInfo::from_lookup(lookup(&[("RANK", "2"), ("WORLD_SIZE", "3")])).unwrap();
        assert_eq!(w, WorldInfo { rank: 2, size: 3 });
        let w = WorldInfo::from_lookup(lookup(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "4")]))
            .unwrap();
        assert_eq!(w, WorldInfo { rank: 1, size: 4 });
        let w = WorldInfo::from_lookup(lookup(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ]))
        .unwrap();
        assert_eq!(w, WorldInfo { rank: 0, size: 2 });
        // torchrun's variables win over SLURM's when both are present.
        let w = WorldInfo::from_lookup(lookup(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
        ]))
        .unwrap();
        assert_eq!(w, WorldInfo { rank: 1, size: 2 });
    }

    #[test]
    fn bad_world_variables_are_named() {
        let e = WorldInfo::from_lookup(lookup(&[("RANK", "x"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert!(e.to_string().contains("RANK=\"x\""), "{e}");
        let e = WorldInfo::from_lookup(lookup(&[("RANK", "1")])).unwrap_err();
        assert!(e.to_string().contains("WORLD_SIZE"), "{e}");
        let e = WorldInfo::from_lookup(lookup(&[("RANK", "2"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert!(e.to_string().contains("rank"), "{e}");
        let e = WorldInfo::from_lookup(lookup(&[("RANK", "0"), ("WORLD_SIZE", "0")])).unwrap_err();
        assert!(e.to_string().contains("world size"), "{e}");
    }

    #[test]
    fn host_layout_from_each_launcher() {
        let w = |rank, size| WorldInfo { rank, size };
        let l = HostLayout::from_lookup(
            w(3, 4),
            lookup(&[("LOCAL_RANK", "1"), ("LOCAL_WORLD_SIZE", "2")]),
        )
        .unwrap();
        assert_eq!(
            l,
            HostLayout {
                host: 1,
                hosts: 2,
                local_rank: 1,
                local_size: 2
            }
        );
        assert_eq!(l.world_rank(1, 0), 2);
        let l = HostLayout::from_lookup(
            w(4, 6),
            lookup(&[("SLURM_LOCALID", "1"), ("SLURM_NTASKS_PER_NODE", "3")]),
        )
        .unwrap();
        assert_eq!((l.host, l.hosts, l.local_rank), (1, 2, 1));
        let l = HostLayout::from_lookup(
            w(2, 4),
            lookup(&[
                ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
            ]),
        )
        .unwrap();
        assert_eq!((l.host, l.hosts, l.local_rank, l.local_size), (2, 4, 0, 1));
    }

    #[test]
    fn bad_host_layouts_name_the_variable_and_both_values() {
        let w = WorldInfo { rank: 3, size: 4 };
        let err = |pairs: &[(&str, &str)]| {
            HostLayout::from_lookup(w, lookup(pairs))
                .unwrap_err()
                .to_string()
        };
        let e = err(&[("LOCAL_RANK", "1"), ("LOCAL_WORLD_SIZE", "3")]);
        assert!(
            e.contains("LOCAL_WORLD_SIZE=\"3\"") && e.contains("dividing the world size 4"),
            "{e}"
        );
        let e = err(&[("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "2")]);
        assert!(
            e.contains("LOCAL_RANK=\"0\"") && e.contains("expected 1 (") && e.contains("host 1"),
            "{e}"
        );
        let e = err(&[("SLURM_LOCALID", "1"), ("SLURM_NTASKS_PER_NODE", "0")]);
        assert!(e.contains("SLURM_NTASKS_PER_NODE=\"0\""), "{e}");
        let e = err(&[("LOCAL_RANK", "x"), ("LOCAL_WORLD_SIZE", "2")]);
        assert!(e.contains("LOCAL_RANK=\"x\""), "{e}");
        let e = err(&[("LOCAL_RANK", "1")]);
        assert!(
            e.contains("LOCAL_WORLD_SIZE") && e.contains("<unset>"),
            "{e}"
        );
        let e = err(&[]);
        assert!(
            e.contains("LOCAL_WORLD_SIZE") && e.contains("SLURM_LOCALID"),
            "{e}"
        );
        let e = HostLayout::new(w, 3).unwrap_err().to_string();
        assert!(e.contains("ranks per host") && e.contains("3"), "{e}");
    }

    #[test]
    fn options_defaults_and_overrides() {
        let o = CommOptions::from_lookup(lookup(&[])).unwrap();
        assert_eq!(o, CommOptions::default());
        assert_eq!(o.timeout, Duration::from_secs(60));
        let o = CommOptions::from_lookup(lookup(&[
            ("FFN_COMM_TIMEOUT", "2.5"),
            ("FFN_COMM_STALL_WARNING", "0"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
            ("FFN_COMM_TOKEN", "abc"),
        ]))
        .unwrap();
        assert_eq!(o.timeout, Duration::from_millis(2500));
        assert_eq!(o.stall_warning, Duration::ZERO);
        assert_eq!((o.master_addr.as_str(), o.master_port), ("10.0.0.1", 1234));
        assert_eq!(o.job_token, "abc");
        let keyed = o.shm_name.clone().unwrap();
        assert!(
            keyed.starts_with("ffn-comm-") && keyed.len() == 9 + 32 && !keyed.contains("abc"),
            "{keyed}"
        );
        // Every rank of the job finds the same name; another token or port gives another one.
        let name =
            |pairs: &[(&str, &str)]| CommOptions::from_lookup(lookup(pairs)).unwrap().shm_name;
        let job = [("MASTER_PORT", "1234"), ("FFN_COMM_TOKEN", "abc")];
        assert_eq!(name(&job), Some(keyed.clone()));
        assert_ne!(
            name(&[("MASTER_PORT", "1234"), ("FFN_COMM_TOKEN", "abd")]),
            Some(keyed.clone())
        );
        assert_ne!(
            name(&[("MASTER_PORT", "1235"), ("FFN_COMM_TOKEN", "abc")]),
            Some(keyed)
        );
        assert_eq!(
            name(&[("MASTER_PORT", "1234")]).as_deref(),
            Some("ffn-comm-port-1234")
        );
        let o = CommOptions::from_lookup(lookup(&[("SLURM_JOB_ID", "77"), ("SLURM_STEP_ID", "3")]))
            .unwrap();
        assert_eq!(o.shm_name.as_deref(), Some("ffn-comm-slurm-77.3"));
    }

    #[test]
    fn bad_options_are_named() {
        for (var, val) in [
            ("FFN_COMM_TIMEOUT", "0"),
            ("FFN_COMM_TIMEOUT", "-1"),
            ("FFN_COMM_TIMEOUT", "soon"),
            ("MASTER_PORT", "70000"),
            ("FFN_COMM_BIND", "0.0.0.0"),
            ("FFN_COMM_BIND", "*"),
            ("FFN_COMM_BIND", "[::]"),
            ("MASTER_ADDR", "0.0.0.0"),
            ("MASTER_ADDR", "*"),
            ("MASTER_ADDR", "::"),
            ("FFN_COMM_MASTER_BIND", ""),
            ("FFN_SHM_NAME", "../etc"),
        ] {
            let e = CommOptions::from_lookup(lookup(&[(var, val)])).unwrap_err();
            assert!(e.to_string().contains(var), "{var}={val}: {e}");
        }
        let e = CommOptions::from_lookup(lookup(&[("MASTER_ADDR", "0.0.0.0")])).unwrap_err();
        assert!(
            e.to_string().contains("FFN_COMM_MASTER_BIND=0.0.0.0"),
            "{e}"
        );
        let o = CommOptions::from_lookup(lookup(&[("FFN_COMM_MASTER_BIND", "0.0.0.0")])).unwrap();
        assert_eq!(o.master_bind.as_deref(), Some("0.0.0.0"));
        assert!(!is_wildcard("127.0.0.1") && !is_wildcard("node-1") && !is_wildcard("::1"));
    }
}
