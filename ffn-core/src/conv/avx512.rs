//! Micro-kernels for x86-64 with AVX-512F, beside the AVX2 ones of [`super::avx2`] and with the same
//! contracts: the direct convolution rows, the Winograd products and the weight-gradient
//! accumulation, for output widths that are multiples of 32 channels.
//!
//! A register tile holds up to [`MAX_TILE`] voxels (or tiles, or weight rows) x 32 channels: two
//! 512-bit accumulators each, 24 of the 32 registers, against 12 of 16 for AVX2's 3 x 32. Per input
//! value: one broadcast and two FMAs against a 32-wide weight row loaded once per tile, so each
//! weight load feeds up to 24 FMAs instead of 3.
//!
//! Every output lane makes the same FMAs in the same order as the AVX2 kernels (tap pairs, then
//! inputs, in order; the first term multiplied into a zero accumulator), so the results are
//! bitwise identical to theirs: the tests check that, and both against the f64 reference.

use core::arch::x86_64::*;

/// Voxels (or rows) per register tile.
pub(crate) const MAX_TILE: usize = 12;

/// Calls `$f::<N>($args)` for the tile width `N = $n` (1 to [`MAX_TILE`]).
macro_rules! with_tile_width {
    ($n:expr, $f:ident, ($($arg:expr),* $(,)?)) => {
        match $n {
            1 => $f::<1>($($arg),*),
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*),
            5 => $f::<5>($($arg),*),
            6 => $f::<6>($($arg),*),
            7 => $f::<7>($($arg),*),
            8 => $f::<8>($($arg),*),
            9 => $f::<9>($($arg),*),
            10 => $f::<10>($($arg),*),
            11 => $f::<11>($($arg),*),
            12 => $f::<12>($($arg),*),
            _ => unreachable!("tile width out of range"),
        }
    };
}

/// `out[i][0..32] (+)= sum_kk inp[i * cin + kk * ks] * w[kk * w_rs + 0..32]` for `i < NV`.
///
/// # Safety
/// AVX-512F and FMA must be available; `inp` must be readable at `i * cin + kk * ks` for `i < NV`,
/// `kk < depth`; `w` at `kk * w_rs + 0..32`; `out` writable at `i * out_rs + 0..32`.
#[target_feature(enable = "avx512f,fma")]
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
        let mut acc = [[_mm512_setzero_ps(); 2]; NV];
        if accumulate {
            for (i, a) in acc.iter_mut().enumerate() {
                for (j, v) in a.iter_mut().enumerate() {
                    *v = _mm512_loadu_ps(out.add(i * out_rs + 16 * j));
                }
            }
        }
        for kk in 0..depth {
            let wp = w.add(kk * w_rs);
            let (w0, w1) = (_mm512_loadu_ps(wp), _mm512_loadu_ps(wp.add(16)));
            let x = inp.add(kk * ks);
            for i in 0..NV {
                let v = _mm512_set1_ps(*x.add(i * cin));
                acc[i][0] = _mm512_fmadd_ps(v, w0, acc[i][0]);
                acc[i][1] = _mm512_fmadd_ps(v, w1, acc[i][1]);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            for (j, v) in a.iter().enumerate() {
                _mm512_storeu_ps(out.add(i * out_rs + 16 * j), *v);
            }
        }
    }
}

/// One output row, as [`super::avx2::row`]: `nx` voxels, all tap pairs, all output blocks.
///
/// # Safety
/// As [`super::avx2::row`], with AVX-512F instead of AVX2.
#[target_feature(enable = "avx512f,fma")]
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
                for ob in (0..cout).step_by(super::avx2::BLOCK) {
                    let mut x = 0;
                    while x < nx {
                        let n = (nx - x).min(MAX_TILE);
                        let (i, o) = (inp.add(x * cin), out_row.add(x * cout + ob));
                        with_tile_width!(
                            n,
                            tile,
                            (i, cin, 1, depth, wg.add(ob), cout, o, cout, acc)
                        );
                        x += n;
                    }
                }
            }
        }
    }
}

/// Winograd product sums of one output row, as [`super::avx2::winograd_rows`], up to
/// [`MAX_TILE`] tiles at a time.
///
/// # Safety
/// As [`super::avx2::winograd_rows`], with AVX-512F instead of AVX2.
#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn winograd_rows(
    taps: &[*const f32; 3],
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
        while t < nt {
            let n = (nt - t).min(MAX_TILE);
            let s = sums.add(t * sums_rs);
            with_tile_width!(
                n,
                winograd_tile,
                (taps, t * cin, cin, w, w_rs, s, sums_rs, accumulate)
            );
            t += n;
        }
    }
}

/// `NV` tiles of [`winograd_rows`], starting at offset `off` of every tap row.
///
/// # Safety
/// As [`winograd_rows`] for the `NV` tiles.
#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn winograd_tile<const NV: usize>(
    taps: &[*const f32; 3],
    off: usize,
    cin: usize,
    w: *const f32,
    w_rs: usize,
    sums: *mut f32,
    sums_rs: usize,
    accumulate: bool,
) {
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; NV];
        if accumulate {
            for (v, a) in acc.iter_mut().enumerate() {
                for (j, r) in a.iter_mut().enumerate() {
                    *r = _mm512_loadu_ps(sums.add(v * sums_rs + 16 * j));
                }
            }
        }
        for (ty, &tap) in taps.iter().enumerate() {
            let inp = tap.add(off);
            let wq = w.add(ty * cin * w_rs);
            for c in 0..cin {
                let wp = wq.add(c * w_rs);
                let (w0, w1) = (_mm512_loadu_ps(wp), _mm512_loadu_ps(wp.add(16)));
                for v in 0..NV {
                    let x = _mm512_set1_ps(*inp.add(v * cin + c));
                    acc[v][0] = _mm512_fmadd_ps(x, w0, acc[v][0]);
                    acc[v][1] = _mm512_fmadd_ps(x, w1, acc[v][1]);
                }
            }
        }
        for (v, a) in acc.iter().enumerate() {
            for (j, r) in a.iter().enumerate() {
                _mm512_storeu_ps(sums.add(v * sums_rs + 16 * j), *r);
            }
        }
    }
}

/// The weight-gradient GEMM with accumulation, as [`super::avx2::accumulate_products`], up to
/// [`MAX_TILE`] rows at a time.
///
/// # Safety
/// As [`super::avx2::accumulate_products`], with AVX-512F instead of AVX2.
#[target_feature(enable = "avx512f,fma")]
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
        for ob in (0..n).step_by(super::avx2::BLOCK) {
            let mut r = 0;
            while r < m {
                let nr = (m - r).min(MAX_TILE);
                let (i, o) = (inp.add(r * rs), out.add(r * out_rs + ob));
                with_tile_width!(
                    nr,
                    tile,
                    (i, rs, ks, depth, w.add(ob), w_rs, o, out_rs, true)
                );
                r += nr;
            }
        }
    }
}
