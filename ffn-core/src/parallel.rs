//! Data parallelism behind one small helper: rayon's pool with the `rayon` feature, a plain loop
//! without it. Kernels call these helpers and never rayon directly.

/// Runs `f` on a pool of its own with `threads` worker threads (with the `rayon` feature; without
/// it `f` runs on the calling thread), so that the kernels it calls use that many threads.
///
/// # Errors
/// [`CoreError::ThreadPool`] when the pool cannot start.
#[cfg(feature = "std")]
pub fn with_threads<R: Send>(
    threads: usize,
    f: impl FnOnce() -> R + Send,
) -> Result<R, crate::CoreError> {
    #[cfg(feature = "rayon")]
    {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| crate::CoreError::ThreadPool {
                threads,
                reason: e.to_string(),
            })?;
        Ok(pool.install(f))
    }
    #[cfg(not(feature = "rayon"))]
    {
        let _ = threads;
        Ok(f())
    }
}

/// Number of worker threads the helpers will use (rayon's current pool, or 1 without rayon).
pub fn current_num_threads() -> usize {
    #[cfg(feature = "rayon")]
    {
        rayon::current_num_threads()
    }
    #[cfg(not(feature = "rayon"))]
    {
        1
    }
}

/// Calls `f(index, chunk)` for every `chunk_len`-sized chunk of `data` (the last one may be shorter),
/// in parallel with the `rayon` feature. `chunk_len` must be > 0.
pub fn for_each_chunk_mut<T, F>(data: &mut [T], chunk_len: usize, f: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync + Send,
{
    assert!(chunk_len > 0, "for_each_chunk_mut: chunk_len must be > 0");
    #[cfg(feature = "rayon")]
    {
        use rayon::prelude::*;
        data.par_chunks_mut(chunk_len)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    }
    #[cfg(not(feature = "rayon"))]
    {
        data.chunks_mut(chunk_len)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    }
}

/// Calls `f(index, a_chunk, b_chunk)` for the `index`-th chunks of `a` (length `a_len`) and `b`
/// (length `b_len`) together, in parallel with the `rayon` feature; stops at the shorter of the
/// two chunk sequences. Both lengths must be > 0.
pub fn for_each_chunk_pair_mut<A, B, F>(a: &mut [A], a_len: usize, b: &mut [B], b_len: usize, f: F)
where
    A: Send,
    B: Send,
    F: Fn(usize, &mut [A], &mut [B]) + Sync + Send,
{
    assert!(
        a_len > 0 && b_len > 0,
        "for_each_chunk_pair_mut: chunk lengths must be > 0"
    );
    #[cfg(feature = "rayon")]
    {
        use rayon::prelude::*;
        a.par_chunks_mut(a_len)
            .zip(b.par_chunks_mut(b_len))
            .enumerate()
            .for_each(|(i, (x, y))| f(i, x, y));
    }
    #[cfg(not(feature = "rayon"))]
    {
        a.chunks_mut(a_len)
            .zip(b.chunks_mut(b_len))
            .enumerate()
            .for_each(|(i, (x, y))| f(i, x, y));
    }
}

/// Chunk length for element-wise passes over large buffers: big enough to amortise scheduling,
/// small enough to balance two or more threads.
pub const ELEMENTWISE_CHUNK: usize = 1 << 16;

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn every_chunk_visited_once_with_its_index() {
        let mut v = vec![0usize; 1003];
        for_each_chunk_mut(&mut v, 100, |i, c| c.iter_mut().for_each(|x| *x += i + 1));
        for (j, x) in v.iter().enumerate() {
            assert_eq!(*x, j / 100 + 1);
        }
        assert!(current_num_threads() >= 1);
    }

    #[test]
    fn chunk_pairs_are_visited_together_up_to_the_shorter_sequence() {
        let mut a = vec![0usize; 10];
        let mut b = vec![0usize; 4];
        for_each_chunk_pair_mut(&mut a, 3, &mut b, 1, |i, x, y| {
            x.iter_mut().for_each(|v| *v = i + 1);
            y[0] = 10 * (i + 1);
        });
        assert_eq!(a, [1, 1, 1, 2, 2, 2, 3, 3, 3, 4]);
        assert_eq!(b, [10, 20, 30, 40]);
        let mut c = vec![0usize; 2];
        for_each_chunk_pair_mut(&mut a, 3, &mut c, 1, |_, x, y| y[0] = x.len());
        assert_eq!(c, [3, 3]);
    }

    #[cfg(feature = "std")]
    #[test]
    fn with_threads_runs_the_closure_on_a_pool_of_that_size() {
        let want = if cfg!(feature = "rayon") { 3 } else { 1 };
        assert_eq!(super::with_threads(3, super::current_num_threads), Ok(want));
        assert_eq!(super::with_threads(1, || 7), Ok(7));
    }
}
