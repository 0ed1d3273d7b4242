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

/// `Bᵀ d` of [`super::winograd::input_transform`] on 16 lanes: the same expressions in the same
/// order (a multiply and an add for every term, no fused multiply-add), so the same bits.
#[target_feature(enable = "avx512f")]
#[inline]
fn input_transform(d: [__m512; 6]) -> [__m512; 6] {
    let k = _mm512_set1_ps;
    let (add, sub, mul) = (_mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps);
    [
        add(sub(mul(k(4.0), d[0]), mul(k(5.0), d[2])), d[4]),
        add(add(sub(mul(k(-4.0), d[1]), mul(k(4.0), d[2])), d[3]), d[4]),
        add(sub(sub(mul(k(4.0), d[1]), mul(k(4.0), d[2])), d[3]), d[4]),
        add(add(sub(mul(k(-2.0), d[1]), d[2]), mul(k(2.0), d[3])), d[4]),
        add(sub(sub(mul(k(2.0), d[1]), d[2]), mul(k(2.0), d[3])), d[4]),
        add(sub(mul(k(4.0), d[1]), mul(k(5.0), d[3])), d[5]),
    ]
}

/// The F(4x4, 3x3) input transform of one padded plane, as
/// [`super::winograd2d`]'s portable lanes compute it (bit for bit), for `c` a multiple of 16:
/// `data` holds `dy` rows of `dx` voxels x `c` channels; the tile `t` (row-major over `ntx`
/// columns) starts at voxel `(y0, x0) = (origin + 4 (t / ntx), origin + 4 (t % ntx))`; voxels
/// beyond the plane count as zero; the 36 values of yx index `k` of tile `t` go to
/// `chunk[(k * ntiles + t) * c + channel]`.
///
/// # Panics
/// When `c` is not a multiple of 16 or a slice is shorter than that.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
pub(crate) fn winograd2d_input_plane(
    dims: [usize; 2],
    origin: usize,
    tiles: [usize; 2],
    c: usize,
    data: &[f32],
    relu: bool,
    chunk: &mut [f32],
) {
    let ([dy, dx], [nty, ntx]) = (dims, tiles);
    let ntiles = nty * ntx;
    assert!(c.is_multiple_of(16), "winograd2d input: channels");
    assert!(data.len() >= dy * dx * c, "winograd2d input: plane");
    assert!(chunk.len() >= 36 * ntiles * c, "winograd2d input: chunk");
    let zero = _mm512_setzero_ps();
    let mut rows = [[zero; 6]; 6];
    for t in 0..ntiles {
        let (y0, x0) = (origin + 4 * (t / ntx), origin + 4 * (t % ntx));
        let (ny, nx) = (dy.saturating_sub(y0).min(6), dx.saturating_sub(x0).min(6));
        for c0 in (0..c).step_by(16) {
            for (r, out) in rows.iter_mut().enumerate() {
                let mut v = [zero; 6];
                if r < ny {
                    let at = ((y0 + r) * dx + x0) * c + c0;
                    for (s, v) in v.iter_mut().enumerate().take(nx) {
                        // SAFETY: x0 + s < dx and y0 + r < dy, so the 16 values at
                        // ((y0 + r) * dx + x0 + s) * c + c0 lie inside data (asserted above).
                        let x = unsafe { _mm512_loadu_ps(data.as_ptr().add(at + s * c)) };
                        *v = if relu { _mm512_max_ps(x, zero) } else { x };
                    }
                }
                *out = input_transform(v);
            }
            let at = t * c + c0;
            for j in 0..6 {
                let col = input_transform(core::array::from_fn(|r| rows[r][j]));
                for (i, u) in col.into_iter().enumerate() {
                    let o = ((i * 6 + j) * ntiles) * c + at;
                    // SAFETY: o + 16 <= 36 * ntiles * c <= chunk.len() (asserted above).
                    unsafe { _mm512_storeu_ps(chunk.as_mut_ptr().add(o), u) };
                }
            }
        }
    }
}

/// `Aᵀ m` of [`super::winograd::output_transform`] on 16 lanes, the same expressions in the same
/// order (so the same bits).
#[target_feature(enable = "avx512f")]
#[inline]
fn output_transform(m: [__m512; 6]) -> [__m512; 4] {
    let k = _mm512_set1_ps;
    let (add, sub, mul) = (_mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps);
    let (s12, d12) = (add(m[1], m[2]), sub(m[1], m[2]));
    let (s34, d34) = (add(m[3], m[4]), sub(m[3], m[4]));
    [
        add(add(m[0], s12), s34),
        add(d12, mul(k(2.0), d34)),
        add(s12, mul(k(4.0), s34)),
        add(add(d12, mul(k(8.0), d34)), m[5]),
    ]
}

/// The z components of [`super::winograd3d`] on 16 lanes, as its portable lanes compute them (bit
/// for bit): `Bᵀ` of F(4, 3) over the six `planes` (`n` values each, `n` a multiple of 16),
/// component `j` into `out[j * n..][..n]`.
///
/// # Panics
/// When `n` is not a multiple of 16 or a length does not match.
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)]
pub(crate) fn winograd3d_z_components(planes: [&[f32]; 6], out: &mut [f32]) {
    let n = planes[0].len();
    assert!(
        n.is_multiple_of(16) && planes.iter().all(|p| p.len() == n) && out.len() == 6 * n,
        "winograd3d_z_components: lengths"
    );
    for i in (0..n).step_by(16) {
        let mut d = [_mm512_setzero_ps(); 6];
        for j in 0..6 {
            // SAFETY: i + 16 <= n, the length of every plane (asserted).
            d[j] = unsafe { _mm512_loadu_ps(planes[j].as_ptr().add(i)) };
        }
        let v = input_transform(d);
        for j in 0..6 {
            // SAFETY: j * n + i + 16 <= 6 * n, the length of out (asserted).
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(j * n + i), v[j]) };
        }
    }
}

/// The z sums of [`super::winograd3d`] on 16 lanes, as its portable lanes compute them (bit for
/// bit): `Aᵀ` of F(4, 3) over the six runs of `products` (`[z component][tile][cout]`, `cout` a
/// multiple of 16), output plane `m` of tile `b` into `sums[m][first + b * stride..][..cout]`.
///
/// # Panics
/// When `cout` is not a multiple of 16 or a slice is shorter than that.
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)]
pub(crate) fn winograd3d_z_sums(
    products: &[f32],
    cout: usize,
    first: usize,
    stride: usize,
    sums: [&mut [f32]; 4],
) {
    let n = products.len() / 6;
    assert!(
        cout > 0 && cout.is_multiple_of(16) && n.is_multiple_of(cout),
        "winograd3d_z_sums: widths"
    );
    let tiles = n / cout;
    if tiles == 0 {
        return;
    }
    let end = first + (tiles - 1) * stride + cout;
    assert!(
        sums.iter().all(|s| s.len() >= end),
        "winograd3d_z_sums: sums length"
    );
    for b in 0..tiles {
        let at = first + b * stride;
        for o in (0..cout).step_by(16) {
            let mut m = [_mm512_setzero_ps(); 6];
            for zc in 0..6 {
                // SAFETY: zc * n + b * cout + o + 16 <= 6 * n (o + 16 <= cout, b < tiles).
                m[zc] = unsafe { _mm512_loadu_ps(products.as_ptr().add(zc * n + b * cout + o)) };
            }
            let v = output_transform(m);
            for j in 0..4 {
                // SAFETY: at + o + 16 <= end <= sums[j].len() (asserted).
                unsafe { _mm512_storeu_ps(sums[j].as_mut_ptr().add(at + o), v[j]) };
            }
        }
    }
}

/// The element-wise work after a conv's sums, in this order: bias, ReLU, residual (the order of
/// [`super::winograd::Fusion`]).
#[derive(Clone, Copy)]
pub(crate) struct Finish<'a> {
    /// Bias `[cout]`.
    pub bias: Option<&'a [f32]>,
    /// ReLU after the bias.
    pub relu: bool,
    /// The plane of the residual, laid out as the output plane.
    pub residual: Option<&'a [f32]>,
}

/// The F(4x4, 3x3) output transform of one plane, as [`super::winograd2d`]'s portable lanes and
/// its element-wise pass compute it (bit for bit), for `cout` a multiple of 16: `sums` holds
/// `[tile][yx index (36)][cout]` for the tiles of the `size = [sy, sx]` interior (row-major,
/// 4 x 4 outputs each); output `(y, x)` of the interior goes to
/// `chunk[((pad + y) * dx + pad + x) * cout + o]`, through `finish`. The border is not written.
///
/// # Panics
/// When `cout` is not a multiple of 16 or a slice is shorter than that.
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)]
pub(crate) fn winograd2d_inverse_plane(
    dx: usize,
    pad: usize,
    size: [usize; 2],
    cout: usize,
    sums: &[f32],
    finish: Finish<'_>,
    chunk: &mut [f32],
) {
    let [sy, sx] = size;
    let ntx = sx.div_ceil(4);
    let ntiles = sy.div_ceil(4) * ntx;
    assert!(cout.is_multiple_of(16), "winograd2d inverse: channels");
    assert!(sums.len() >= ntiles * 36 * cout, "winograd2d inverse: sums");
    let end = ((pad + sy) * dx) * cout;
    assert!(chunk.len() >= end, "winograd2d inverse: plane");
    if let Some(b) = finish.bias {
        assert!(b.len() >= cout, "winograd2d inverse: bias");
    }
    if let Some(r) = finish.residual {
        assert!(r.len() >= end, "winograd2d inverse: residual");
    }
    let zero = _mm512_setzero_ps();
    let mut rows = [[zero; 4]; 6];
    for t in 0..ntiles {
        let (ty, tx) = (4 * (t / ntx), 4 * (t % ntx));
        let (vy, vx) = ((sy - ty).min(4), (sx - tx).min(4));
        let tile = &sums[t * 36 * cout..][..36 * cout];
        for o0 in (0..cout).step_by(16) {
            for (i, out) in rows.iter_mut().enumerate() {
                // SAFETY: (i * 6 + j) * cout + o0 + 16 <= 36 * cout = tile.len().
                let v = core::array::from_fn(|j| unsafe {
                    _mm512_loadu_ps(tile.as_ptr().add((i * 6 + j) * cout + o0))
                });
                *out = output_transform(v);
            }
            // SAFETY: o0 + 16 <= cout <= bias.len() (asserted above).
            let bias = finish
                .bias
                .map(|b| unsafe { _mm512_loadu_ps(b.as_ptr().add(o0)) });
            for q in 0..vx {
                let col = output_transform(core::array::from_fn(|i| rows[i][q]));
                for (u, mut v) in col.into_iter().enumerate().take(vy) {
                    let at = ((pad + ty + u) * dx + pad + tx + q) * cout + o0;
                    if let Some(b) = bias {
                        v = _mm512_add_ps(v, b);
                    }
                    if finish.relu {
                        v = _mm512_max_ps(v, zero);
                    }
                    if let Some(r) = finish.residual {
                        // SAFETY: at + 16 <= end <= r.len() (y < sy, x < sx; asserted above).
                        v = _mm512_add_ps(v, unsafe { _mm512_loadu_ps(r.as_ptr().add(at)) });
                    }
                    // SAFETY: at + 16 <= end <= chunk.len() (asserted above).
                    unsafe { _mm512_storeu_ps(chunk.as_mut_ptr().add(at), v) };
                }
            }
        }
    }
}
