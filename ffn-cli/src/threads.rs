//! Sizes rayon's kernel thread pool for this process: an equal share of the node's cores per rank
//! ([`ffn_comm::threads::kernel_threads`]).

use anyhow::{Context, Result};
use ffn_comm::threads::kernel_threads;

/// Sizes rayon's global pool for this process (see the module documentation).
///
/// # Errors
/// A malformed local-size variable, or a pool that cannot start.
pub fn configure() -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(n) = kernel_threads(cores, |k| std::env::var(k).ok())? {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .context("starting the kernel thread pool")?;
    }
    Ok(())
}
