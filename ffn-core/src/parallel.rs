//! Data parallelism behind one small helper: rayon's pool with the `rayon` feature, a plain loop
//! without it. Kernels call these helpers and never rayon directly.

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
}
