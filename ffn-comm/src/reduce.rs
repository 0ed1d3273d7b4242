//! The arithmetic shared by all backends: how a buffer is cut into per-rank chunks and the fixed order
//! in which contributions are added. Keeping both in one place is what makes every backend give the
//! same bits.

use std::ops::Range;

/// The part of a buffer of `len` elements owned by `rank` in a group of `size`: `size` contiguous,
/// balanced chunks (lengths differ by at most one; chunks are empty when `len < size`).
///
/// # Panics
/// If `size == 0` or `rank >= size` (callers validate both when the group is built).
pub fn chunk_range(len: usize, size: usize, rank: usize) -> Range<usize> {
    assert!(
        size > 0 && rank < size,
        "chunk_range: rank {rank} of size {size}"
    );
    let start = (len as u128 * rank as u128 / size as u128) as usize;
    let end = (len as u128 * (rank as u128 + 1) / size as u128) as usize;
    start..end
}

/// Adds `src` into `acc` element-wise (`acc[i] = acc[i] + src[i]`): one step of the rank-order sum.
#[inline]
pub fn add_assign(acc: &mut [f32], src: &[f32]) {
    debug_assert_eq!(acc.len(), src.len());
    for (a, s) in acc.iter_mut().zip(src) {
        *a += *s;
    }
}

/// The reference reduction: `out[i] = ((parts[0][i] + parts[1][i]) + parts[2][i]) + ...`.
///
/// Every backend must produce exactly these bits. With no parts, `out` is left unchanged.
pub fn sum_in_rank_order(out: &mut [f32], parts: &[&[f32]]) {
    if let Some((first, rest)) = parts.split_first() {
        out.copy_from_slice(first);
        for p in rest {
            add_assign(out, p);
        }
    }
}

/// The hierarchical reduction of [`crate::hier`]: the parts are `parts.len() / local_size` hosts of
/// `local_size` consecutive ranks each; every host's parts are summed in rank order, then the host
/// sums in host order:
/// `out[i] = ((x_0 + .. + x_{k-1}) + (x_k + .. + x_{2k-1})) + ...` with `k = local_size`.
///
/// With one host (`local_size == parts.len()`) or one rank per host (`local_size == 1`) this is
/// exactly [`sum_in_rank_order`]. With no parts, `out` is left unchanged.
///
/// # Panics
/// If `local_size` is 0 or does not divide `parts.len()` (callers validate the layout).
pub fn sum_in_host_order(out: &mut [f32], parts: &[&[f32]], local_size: usize) {
    assert!(
        local_size > 0 && parts.len().is_multiple_of(local_size),
        "sum_in_host_order: {} parts in hosts of {local_size}",
        parts.len()
    );
    let mut hosts = parts.chunks(local_size);
    let Some(first) = hosts.next() else { return };
    sum_in_rank_order(out, first);
    let mut host_sum = vec![0.0; out.len()];
    for host in hosts {
        sum_in_rank_order(&mut host_sum, host);
        add_assign(out, &host_sum);
    }
}

/// The order in which a communicator adds the contributions of the ranks to each element (see
/// [`crate::Communicator::summation`]); the conformance suite checks results bit for bit against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Summation {
    /// `((x_0 + x_1) + x_2) + ...` ([`sum_in_rank_order`]): every flat backend.
    RankOrder,
    /// Each host's `local_size` ranks in rank order, then the host sums in host order
    /// ([`sum_in_host_order`]): the `hier` backend.
    HostThenRank {
        /// Ranks per host.
        local_size: usize,
    },
}

impl Summation {
    /// Reduces `parts` (one per rank, in rank order) into `out` in this order.
    pub fn sum(self, out: &mut [f32], parts: &[&[f32]]) {
        match self {
            Summation::RankOrder => sum_in_rank_order(out, parts),
            Summation::HostThenRank { local_size } => sum_in_host_order(out, parts, local_size),
        }
    }
}

/// Views an `f32` slice as its bytes (native endianness); used to move floats bit for bit.
pub fn as_bytes_mut(buf: &mut [f32]) -> &mut [u8] {
    let len = std::mem::size_of_val(buf);
    // SAFETY: u8 has alignment 1 and no invalid bit patterns; the length covers exactly the same
    // memory, and the returned borrow keeps `buf` borrowed mutably for its lifetime.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), len) }
}

/// Views an `f32` slice as its bytes (native endianness).
pub fn as_bytes(buf: &[f32]) -> &[u8] {
    let len = std::mem::size_of_val(buf);
    // SAFETY: as in `as_bytes_mut`, read-only.
    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_buffer_without_overlap() {
        for len in [0usize, 1, 2, 7, 100, 1001] {
            for size in 1..6 {
                let mut next = 0;
                for r in 0..size {
                    let c = chunk_range(len, size, r);
                    assert_eq!(c.start, next, "len {len} size {size} rank {r}");
                    assert!(c.len() <= len / size + 1);
                    assert!(c.len() >= len / size);
                    next = c.end;
                }
                assert_eq!(next, len);
            }
        }
    }

    #[test]
    fn rank_order_sum_is_left_to_right() {
        // 1e8 + 1 - 1e8 in f32: left to right gives 0 (1 is lost), another order gives 1.
        let a = [1e8f32];
        let b = [1.0f32];
        let c = [-1e8f32];
        let mut out = [f32::NAN];
        sum_in_rank_order(&mut out, &[&a, &b, &c]);
        assert_eq!(out[0], (1e8f32 + 1.0) - 1e8);
        assert_eq!(out[0], 0.0);
    }

    #[test]
    fn host_order_sums_each_host_then_the_hosts() {
        // (1e8 + 1) + (-1e8 + 1) in f32 is 0 + ... : host sums 1e8 and -1e8 (the ones are lost),
        // so the host order gives 0, the rank order ((1e8 + 1) - 1e8) + 1 gives 1.
        let p: [&[f32]; 4] = [&[1e8], &[1.0], &[-1e8], &[1.0]];
        let mut out = [f32::NAN];
        sum_in_host_order(&mut out, &p, 2);
        assert_eq!(out[0], (1e8f32 + 1.0) + (-1e8f32 + 1.0));
        assert_eq!(out[0], 0.0);
        Summation::RankOrder.sum(&mut out, &p);
        assert_eq!(out[0], 1.0);
        // One host, or one rank per host, is the rank order, bit for bit.
        let inputs: Vec<Vec<f32>> = (0..6)
            .map(|r| {
                (0..50)
                    .map(|i| crate::conformance::input_value(3, r, i))
                    .collect()
            })
            .collect();
        let parts: Vec<&[f32]> = inputs.iter().map(|v| v.as_slice()).collect();
        let mut flat = vec![0.0; 50];
        sum_in_rank_order(&mut flat, &parts);
        for k in [1, 6] {
            let mut h = vec![0.0; 50];
            Summation::HostThenRank { local_size: k }.sum(&mut h, &parts);
            assert_eq!(bits(&h), bits(&flat), "local_size {k}");
        }
        let mut h = vec![0.0; 50];
        sum_in_host_order(&mut h, &parts, 3);
        assert_ne!(bits(&h), bits(&flat));
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Distance in units in the last place (adjacent floats are 1 apart, +0 and -0 are 0 apart).
    fn ulps(a: f32, b: f32) -> u64 {
        let key = |x: f32| {
            let b = x.to_bits() as i32;
            if b < 0 {
                i32::MIN as i64 - b as i64
            } else {
                b as i64
            }
        };
        key(a).abs_diff(key(b))
    }

    /// How far the hierarchical sum (2 hosts x 2 ranks) is from the flat rank-order sum on
    /// gradient-like data: 4 ranks x 1M values, per-parameter scales log-uniform in 1e-6 ..
    /// 1e-1, a signal shared by the ranks plus per-rank noise (seed: FFN_TEST_SEED or 1).
    /// `cargo test -p ffn-comm --lib hierarchical_sum_differs -- --nocapture` prints the figures.
    #[test]
    fn hierarchical_sum_differs_from_the_flat_sum_by_rounding_only() {
        let seed = std::env::var("FFN_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let (ranks, len) = (4usize, 1usize << 20);
        let mut rng = ffn_core::rng::Rng::new(seed);
        let scale: Vec<f64> = (0..len)
            .map(|_| 10f64.powf(-6.0 + 5.0 * rng.next_f64()))
            .collect();
        let signal: Vec<f64> = (0..len).map(|_| rng.normal()).collect();
        let inputs: Vec<Vec<f32>> = (0..ranks)
            .map(|_| {
                (0..len)
                    .map(|i| (scale[i] * (0.3 * signal[i] + rng.normal())) as f32)
                    .collect()
            })
            .collect();
        let parts: Vec<&[f32]> = inputs.iter().map(|v| v.as_slice()).collect();
        let (mut flat, mut hier) = (vec![0.0; len], vec![0.0; len]);
        sum_in_rank_order(&mut flat, &parts);
        sum_in_host_order(&mut hier, &parts, 2);
        let (mut max_abs, mut max_rel_l1, mut max_ulp, mut differ) = (0f64, 0f64, 0u64, 0usize);
        let mut one_ulp = 0usize;
        let (mut diff2, mut norm2) = (0f64, 0f64);
        for i in 0..len {
            let d = (hier[i] as f64 - flat[i] as f64).abs();
            let l1: f64 = parts.iter().map(|p| (p[i] as f64).abs()).sum();
            // Each computed sum is within (n-1) eps sum|x| of the exact one, so the two are
            // within 2 (n-1) eps sum|x| of each other.
            let bound = 2.0 * (ranks - 1) as f64 * f32::EPSILON as f64 * l1;
            assert!(d <= bound, "element {i}: {} vs {}", hier[i], flat[i]);
            max_abs = max_abs.max(d);
            max_rel_l1 = max_rel_l1.max(d / l1 / f32::EPSILON as f64);
            let u = ulps(hier[i], flat[i]);
            max_ulp = max_ulp.max(u);
            one_ulp += usize::from(u == 1);
            differ += usize::from(d > 0.0);
            diff2 += d * d;
            norm2 += (flat[i] as f64).powi(2);
        }
        eprintln!(
            "hier (2x2) vs flat (4 ranks), {len} values: {differ} differ ({:.2}%; {:.1}% of those by \
             1 ulp), max abs {max_abs:.3e}, max |diff| / sum|x| {max_rel_l1:.3} eps, max {max_ulp} \
             ulp (where the sum nearly cancels), relative L2 {:.3e}",
            100.0 * differ as f64 / len as f64,
            100.0 * one_ulp as f64 / differ.max(1) as f64,
            (diff2 / norm2).sqrt()
        );
        assert!(differ > 0, "the orders must differ somewhere on such data");
        assert!((diff2 / norm2).sqrt() < 1e-6);
    }

    #[test]
    fn byte_views_round_trip() {
        let mut v = vec![1.5f32, -0.0, f32::MIN_POSITIVE];
        let bits: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
        let bytes = as_bytes_mut(&mut v).to_vec();
        assert_eq!(bytes.len(), 12);
        let mut w = vec![0f32; 3];
        as_bytes_mut(&mut w).copy_from_slice(&bytes);
        assert_eq!(w.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), bits);
        assert_eq!(as_bytes(&w), &bytes[..]);
    }
}
