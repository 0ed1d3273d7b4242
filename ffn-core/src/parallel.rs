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

/// Calls `f(index, region, b_chunk)` for the `regions` regions of `a` between consecutive bounds
/// (`a[bound(i)..bound(i + 1)]`, which may be empty) together with the `index`-th `b_len` chunk
/// of `b`, in parallel with the `rayon` feature (by halves, allocating nothing):
/// [`for_each_chunk_pair_mut`] for regions of different lengths. `bound(0)` must be 0,
/// `bound(regions)` the length of `a`, the bounds must not decrease, and `b` must hold a chunk
/// per region.
pub fn for_each_region_pair_mut<A, B, G, F>(
    a: &mut [A],
    regions: usize,
    bound: G,
    b: &mut [B],
    b_len: usize,
    f: F,
) where
    A: Send,
    B: Send,
    G: Fn(usize) -> usize + Sync,
    F: Fn(usize, &mut [A], &mut [B]) + Sync + Send,
{
    assert!(
        regions > 0 && b_len > 0,
        "for_each_region_pair_mut: regions and chunk length must be > 0"
    );
    assert!(
        bound(0) == 0 && bound(regions) == a.len(),
        "for_each_region_pair_mut: bounds must run from 0 to the length"
    );
    assert!(
        b.len() >= regions * b_len,
        "for_each_region_pair_mut: a chunk of b per region"
    );
    let b = &mut b[..regions * b_len];
    regions_between(a, (0, regions), &bound, b, b_len, &f);
}

/// The regions `lo..hi` of [`for_each_region_pair_mut`] (`a` and `b` cut to them), half each.
fn regions_between<A, B, G, F>(
    a: &mut [A],
    (lo, hi): (usize, usize),
    bound: &G,
    b: &mut [B],
    b_len: usize,
    f: &F,
) where
    A: Send,
    B: Send,
    G: Fn(usize) -> usize + Sync,
    F: Fn(usize, &mut [A], &mut [B]) + Sync + Send,
{
    if hi - lo == 1 {
        f(lo, a, b);
        return;
    }
    let mid = (lo + hi) / 2;
    let (first, at) = (bound(lo), bound(mid));
    assert!(
        first <= at && at - first <= a.len(),
        "for_each_region_pair_mut: bounds decrease"
    );
    let (a1, a2) = a.split_at_mut(at - first);
    let (b1, b2) = b.split_at_mut((mid - lo) * b_len);
    #[cfg(feature = "rayon")]
    rayon::join(
        || regions_between(a1, (lo, mid), bound, b1, b_len, f),
        || regions_between(a2, (mid, hi), bound, b2, b_len, f),
    );
    #[cfg(not(feature = "rayon"))]
    {
        regions_between(a1, (lo, mid), bound, b1, b_len, f);
        regions_between(a2, (mid, hi), bound, b2, b_len, f);
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
    fn every_region_visited_once_with_its_chunk() {
        let mut v = vec![0usize; 10];
        let mut b = vec![0usize; 8];
        let bounds = [0, 3, 3, 10, 10];
        for_each_region_pair_mut(
            &mut v,
            4,
            |i| bounds[i],
            &mut b,
            2,
            |i, r, c| {
                r.iter_mut().for_each(|x| *x += i + 1);
                c[0] = r.len();
            },
        );
        assert_eq!(v, [1, 1, 1, 3, 3, 3, 3, 3, 3, 3]);
        assert_eq!(b, [3, 0, 0, 0, 7, 0, 0, 0]);
    }

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
