//! How many kernel threads a process runs: all cores for a lone process, an equal share of the
//! node's cores for each rank when several ranks share it, so that ranks never oversubscribe.
//!
//! | source | meaning |
//! | --- | --- |
//! | `RAYON_NUM_THREADS` | set by the user: taken as it is |
//! | `LOCAL_WORLD_SIZE` | ranks on this node (`ffn launch`, torchrun) |
//! | `OMPI_COMM_WORLD_LOCAL_SIZE` | the same under Open MPI's `mpirun` |
//! | `MPI_LOCALNRANKS` | the same under MPICH's `mpiexec` |
//!
//! Without any of them the process is alone and takes every core. The caller sizes its thread
//! pool with the answer (`ffn` sizes rayon's global pool at start-up).

use anyhow::{Context, Result, bail};

/// Variables that give the number of ranks on this node, in the order they are read.
const LOCAL_SIZE_VARS: [&str; 3] = [
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
];

/// The thread count for `cores` cores, reading the environment through `get`; `None` when
/// `RAYON_NUM_THREADS` decides (rayon reads it itself).
///
/// # Errors
/// A local-size variable that is not a positive integer, named with its value.
pub fn kernel_threads(cores: usize, get: impl Fn(&str) -> Option<String>) -> Result<Option<usize>> {
    if get("RAYON_NUM_THREADS").is_some_and(|v| !v.trim().is_empty()) {
        return Ok(None);
    }
    for var in LOCAL_SIZE_VARS {
        if let Some(v) = get(var) {
            let ranks: usize = v.trim().parse().with_context(|| {
                format!("{var}: expected the number of ranks on this node, found '{v}'")
            })?;
            if ranks == 0 {
                bail!("{var}: expected at least 1 rank on this node, found 0");
            }
            return Ok(Some((cores / ranks).max(1)));
        }
    }
    Ok(Some(cores.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn ranks_on_a_node_share_its_cores() {
        assert_eq!(kernel_threads(16, env(&[])).unwrap(), Some(16));
        assert_eq!(
            kernel_threads(16, env(&[("LOCAL_WORLD_SIZE", "4")])).unwrap(),
            Some(4)
        );
        assert_eq!(
            kernel_threads(16, env(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "3")])).unwrap(),
            Some(5)
        );
        assert_eq!(
            kernel_threads(2, env(&[("MPI_LOCALNRANKS", "8")])).unwrap(),
            Some(1)
        );
        assert_eq!(
            kernel_threads(
                16,
                env(&[("RAYON_NUM_THREADS", "7"), ("LOCAL_WORLD_SIZE", "4")])
            )
            .unwrap(),
            None
        );
    }

    #[test]
    fn malformed_local_sizes_are_named() {
        let e = kernel_threads(4, env(&[("LOCAL_WORLD_SIZE", "two")])).unwrap_err();
        assert!(format!("{e:#}").contains("LOCAL_WORLD_SIZE") && format!("{e:#}").contains("two"));
        let e = kernel_threads(4, env(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "0")])).unwrap_err();
        assert!(format!("{e:#}").contains("OMPI_COMM_WORLD_LOCAL_SIZE"));
    }
}
