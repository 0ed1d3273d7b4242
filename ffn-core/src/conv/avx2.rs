//! Micro-kernels for x86-64 with AVX2 and FMA (chosen by [`super::Simd`]: detected at run time
//! with `std`, at compile time without it), for output widths that are multiples of 32 channels: the direct convolution,
//! the Winograd products and the weight-gradient accumulation.
//!
//! For one output row, one `(dz, dy)` tap pair and one block of 32 output channels, a tile of up to
//! three consecutive voxels keeps its 3 x 4 accumulators in registers while it walks the `k * in`
//! inputs of those taps: per input value one broadcast and four FMAs against a 32-wide weight row.
//! The weight block of one tap pair (`k * in * 32` values, 12 KiB for `in` = 32) stays in L1 across
//! the row. It computes exactly what the GEMM path computes, and is tested against the reference.

use core::arch::x86_64::*;

/// Output channels per block.
pub(crate) const BLOCK: usize = 32;

/// `out[i][0..32] (+)= sum_kk inp[i * cin + kk * ks] * w[kk * w_rs + 0..32]` for `i < NV`.
///
/// # Safety
/// AVX2 and FMA must be available; `inp` must be readable at `i * cin + kk * ks` for `i < NV`,
/// `kk < depth`; `w` at `kk * w_rs + 0..32`; `out` writable at `i * out_rs + 0..32`.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn tile<const NV: usize>(
    inp: *const f32,
    cin: usize,
    ks: usize,
    depth: usize,
    w: *const f32,
    w_rs: usize,
    out: *mut f32,
    out_rs: usize,
    accumulate: bool,
) {
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 4]; NV];
        if accumulate {
            for (i, a) in acc.iter_mut().enumerate() {
                for (j, v) in a.iter_mut().enumerate() {
                    *v = _mm256_loadu_ps(out.add(i * out_rs + 8 * j));
                }
            }
        }
        for kk in 0..depth {
            let mut x = [_mm256_setzero_ps(); NV];
            for (i, x) in x.iter_mut().enumerate() {
                *x = _mm256_broadcast_ss(&*inp.add(i * cin + kk * ks));
            }
            let wp = w.add(kk * w_rs);
            for j in 0..4 {
                let wv = _mm256_loadu_ps(wp.add(8 * j));
                for i in 0..NV {
                    acc[i][j] = _mm256_fmadd_ps(x[i], wv, acc[i][j]);
                }
            }
        }
        for (i, a) in acc.iter().enumerate() {
            for (j, v) in a.iter().enumerate() {
                _mm256_storeu_ps(out.add(i * out_rs + 8 * j), *v);
            }
        }
    }
}

/// One output row: `nx` voxels, all tap pairs, all output blocks.
///
/// `inp_row0` points at the input voxel of tap `(0, 0, 0)` for the first output voxel of the row;
/// `tap_pair(tz, ty)` gives the voxel offset of tap pair `(tz, ty)` from it. `w` is the full
/// `[k, k, k, cin, cout]` weight tensor, `out_row` the first output voxel's channels.
///
/// # Safety
/// AVX2 and FMA available; `cout % 32 == 0`; every input voxel `inp_row0 + tap_pair(tz, ty) + x + dx`
/// (`x < nx`, `dx < k`) and every output voxel `out_row + x` lies inside its buffer.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn row(
    inp_row0: *const f32,
    cin: usize,
    k: usize,
    tap_pair: impl Fn(usize, usize) -> usize,
    w: *const f32,
    cout: usize,
    out_row: *mut f32,
    nx: usize,
) {
    let depth = k * cin;
    unsafe {
        for tz in 0..k {
            for ty in 0..k {
                let acc = tz + ty > 0;
                let inp = inp_row0.add(tap_pair(tz, ty) * cin);
                let wg = w.add((tz * k + ty) * depth * cout);
                for ob in (0..cout).step_by(BLOCK) {
                    let mut x = 0;
                    while x + 3 <= nx {
                        let (i, o) = (inp.add(x * cin), out_row.add(x * cout + ob));
                        tile::<3>(i, cin, 1, depth, wg.add(ob), cout, o, cout, acc);
                        x += 3;
                    }
                    let (i, o) = (inp.add(x * cin), out_row.add(x * cout + ob));
                    match nx - x {
                        2 => tile::<2>(i, cin, 1, depth, wg.add(ob), cout, o, cout, acc),
                        1 => tile::<1>(i, cin, 1, depth, wg.add(ob), cout, o, cout, acc),
                        _ => {}
                    }
                }
            }
        }
    }
}

/// Winograd product sums of one output row, one transformed index `i`, one 32-channel block and
/// one kernel plane `tz`: `sums[t * sums_rs + 0..32] (+)= Σ_ty Σ_c taps[ty][t * cin + c] *
/// w[(ty * cin + c) * w_rs + 0..32]` for the `nt` tiles of the row, three tiles at a time with
/// their accumulators in registers. The tap rows are usually three (the kernel rows or planes of
/// a 3x3x3 conv); [`super::winograd3d`] passes one.
///
/// # Safety
/// AVX2 and FMA must be available; every `taps[ty]` must be readable at `t * cin + c` (`t < nt`,
/// `c < cin`); `w` at `(ty * cin + c) * w_rs + 0..32` (`ty < taps.len()`); `sums` readable and writable at
/// `t * sums_rs + 0..32`.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn winograd_rows(
    taps: &[*const f32],
    cin: usize,
    w: *const f32,
    w_rs: usize,
    sums: *mut f32,
    sums_rs: usize,
    nt: usize,
    accumulate: bool,
) {
    unsafe {
        let mut t = 0;
        while t + 3 <= nt {
            let s = sums.add(t * sums_rs);
            winograd_tile::<3>(taps, t * cin, cin, w, w_rs, s, sums_rs, accumulate);
            t += 3;
        }
        let s = sums.add(t * sums_rs);
        match nt - t {
            2 => winograd_tile::<2>(taps, t * cin, cin, w, w_rs, s, sums_rs, accumulate),
            1 => winograd_tile::<1>(taps, t * cin, cin, w, w_rs, s, sums_rs, accumulate),
            _ => {}
        }
    }
}

/// `NV` tiles of [`winograd_rows`], starting at offset `off` of every tap row.
///
/// # Safety
/// As [`winograd_rows`] for the `NV` tiles.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn winograd_tile<const NV: usize>(
    taps: &[*const f32],
    off: usize,
    cin: usize,
    w: *const f32,
    w_rs: usize,
    sums: *mut f32,
    sums_rs: usize,
    accumulate: bool,
) {
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 4]; NV];
        if accumulate {
            for (v, a) in acc.iter_mut().enumerate() {
                for (j, r) in a.iter_mut().enumerate() {
                    *r = _mm256_loadu_ps(sums.add(v * sums_rs + 8 * j));
                }
            }
        }
        for (ty, &tap) in taps.iter().enumerate() {
            let inp = tap.add(off);
            let wq = w.add(ty * cin * w_rs);
            for c in 0..cin {
                let mut x = [_mm256_setzero_ps(); NV];
                for (v, x) in x.iter_mut().enumerate() {
                    *x = _mm256_broadcast_ss(&*inp.add(v * cin + c));
                }
                let wp = wq.add(c * w_rs);
                for j in 0..4 {
                    let wv = _mm256_loadu_ps(wp.add(8 * j));
                    for v in 0..NV {
                        acc[v][j] = _mm256_fmadd_ps(x[v], wv, acc[v][j]);
                    }
                }
            }
        }
        for (v, a) in acc.iter().enumerate() {
            for (j, r) in a.iter().enumerate() {
                _mm256_storeu_ps(sums.add(v * sums_rs + 8 * j), *r);
            }
        }
    }
}

/// `out[r * out_rs + o] += Σ_kk inp[r * rs + kk * ks] * w[kk * w_rs + o]` for `r < m`, `o < n`:
/// a GEMM with accumulation, as the weight gradients need it (`m` weight rows, `depth` voxels),
/// three rows x 32 columns of accumulators in registers while the whole depth streams through.
///
/// # Safety
/// AVX2 and FMA must be available; `n % 32 == 0`; `inp` readable at `r * rs + kk * ks`, `w` at
/// `kk * w_rs + o`, `out` readable and writable at `r * out_rs + o` for `r < m`, `kk < depth`,
/// `o < n`.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn accumulate_products(
    m: usize,
    n: usize,
    depth: usize,
    inp: *const f32,
    rs: usize,
    ks: usize,
    w: *const f32,
    w_rs: usize,
    out: *mut f32,
    out_rs: usize,
) {
    unsafe {
        for ob in (0..n).step_by(BLOCK) {
            let mut r = 0;
            while r + 3 <= m {
                let (i, o) = (inp.add(r * rs), out.add(r * out_rs + ob));
                tile::<3>(i, rs, ks, depth, w.add(ob), w_rs, o, out_rs, true);
                r += 3;
            }
            let (i, o) = (inp.add(r * rs), out.add(r * out_rs + ob));
            match m - r {
                2 => tile::<2>(i, rs, ks, depth, w.add(ob), w_rs, o, out_rs, true),
                1 => tile::<1>(i, rs, ks, depth, w.add(ob), w_rs, o, out_rs, true),
                _ => {}
            }
        }
    }
}
