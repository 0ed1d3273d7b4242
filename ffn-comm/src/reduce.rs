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
