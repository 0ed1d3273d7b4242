//! Forward 3x3x3 convolutions by Winograd F(4x4, 3x3) over y and x, summed directly over z: 36
//! multiply-adds per 16 outputs and `(z tap, input channel)` where the direct sum needs 144 (4x
//! fewer; F(4, 3) along x alone saves 2x, see [`super::winograd`]): the forward passes of
//! inference and training, the input gradients and (by the transposed algorithm, [`backward`])
//! the weight gradients under [`super::winograd::ConvAlgorithm::Winograd`] (and the weight
//! gradients under the default [`super::winograd::ConvAlgorithm::Winograd3d`]).
//!
//! # Implementation
//! 1. Every padded plane of the input is cut into tiles of 6 x 6 voxels (y, x) at a step of 4 and
//!    transformed by `Bᵀ d B` into `[yx index (36)][tile][in]`; the weights of each z tap by
//!    `G g Gᵀ` into `[yx index][z tap][in][out]`. Each thread takes a contiguous run of output
//!    planes and transforms the input planes as its run reaches them, into a ring of three (the
//!    tap planes of the current output plane), so the transformed planes are read back from the
//!    caches: on Zen 4 this made the whole forward pass 1.7x faster than transforming every
//!    plane first (2.25x the input's size, out of the caches) and reading it back.
//! 2. For each output plane, yx index and 32-channel block, the products of all tiles of the plane
//!    are summed over the three z taps and the input channels by the SIMD product kernel of
//!    [`super::winograd`] (its three "tap rows" are here the three input planes).
//! 3. `Aᵀ m A` turns each tile's 36 sums into 4 x 4 outputs; bias, ReLU and a residual follow
//!    ([`Fusion`]).
//!
//! Rounding: the tests hold it to `2e-5` of the sum of the absolute terms of each output, the
//! bound of F(4, 3) (the worst seen there: `1.9e-6`); on Google's FIB-25 model it segments the
//! central 80^3 box of `training_sample2` byte for byte as F(4, 3) does. The AVX2 and AVX-512
//! builds of the transforms and products give the same bits. Without SIMD kernels for the output
//! width, [`forward_fused`] computes the conv by F(4, 3).

pub mod backward;

pub use backward::backward_weights;

use super::winograd::{self, Fusion, M, T, WinogradScratch};
use super::{Conv3dParams, Kernels, Simd};
use crate::tensor::Padded;
use alloc::vec::Vec;

/// Transformed values per 2D tile.
pub(super) const TT: usize = T * T;

/// Whether [`forward_fused`] computes conv `p` by F(4x4, 3x3) with the kernels of `simd`: a 3x3x3
/// kernel and an output width that the SIMD product kernels take (a multiple of 32 channels).
pub fn preferred(p: &Conv3dParams, simd: Simd) -> bool {
    winograd::supports(p) && super::simd_kernels(p.out_channels, simd).is_some()
}

compiled_for_kernels!(transform_plane_for(g: &Padded, c: usize, data: &[f32], relu: bool, chunk: &mut [f32]) => transform_plane);
compiled_for_kernels!(inverse_plane_for(g: &Padded, cout: usize, sums: &[f32], chunk: &mut [f32]) => inverse_plane);

/// Channels transformed together: one 512-bit register of f32.
pub(super) const L: usize = 16;

/// `L` channels of one voxel, the values the 2D transforms compute on: each operation runs lane
/// by lane (vectorised), with the roundings of the scalar expressions.
#[derive(Clone, Copy)]
pub(super) struct Lanes([f32; L]);

impl Lanes {
    /// All lanes zero.
    const ZERO: Lanes = Lanes([0.0; L]);

    /// The first `w` values of `v` (the other lanes zero), through a ReLU when `relu`.
    #[inline(always)]
    pub(super) fn load(v: &[f32], w: usize, relu: bool) -> Self {
        // Element by element: a copy of variable length would be a memcpy call per block.
        let mut a = match v.get(..L).filter(|_| w == L) {
            Some(full) => <[f32; L]>::try_from(full).expect("L values"),
            None => {
                let mut a = [0.0; L];
                a.iter_mut().zip(&v[..w]).for_each(|(a, v)| *a = *v);
                a
            }
        };
        if relu {
            a.iter_mut().for_each(|x| *x = x.max(0.0));
        }
        Lanes(a)
    }

    /// The first `w` lanes into `dst`.
    #[inline(always)]
    pub(super) fn store(&self, dst: &mut [f32], w: usize) {
        if w == L {
            let full: &mut [f32; L] = (&mut dst[..L]).try_into().expect("L values");
            *full = self.0;
            return;
        }
        dst[..w].iter_mut().zip(&self.0).for_each(|(d, v)| *d = *v);
    }
}

impl core::ops::Add for Lanes {
    type Output = Lanes;
    #[inline(always)]
    fn add(self, o: Lanes) -> Lanes {
        Lanes(core::array::from_fn(|i| self.0[i] + o.0[i]))
    }
}

impl core::ops::Sub for Lanes {
    type Output = Lanes;
    #[inline(always)]
    fn sub(self, o: Lanes) -> Lanes {
        Lanes(core::array::from_fn(|i| self.0[i] - o.0[i]))
    }
}

impl core::ops::Mul<Lanes> for f32 {
    type Output = Lanes;
    #[inline(always)]
    fn mul(self, v: Lanes) -> Lanes {
        Lanes(core::array::from_fn(|i| self * v.0[i]))
    }
}

/// Values of the transformed weights of conv `p` ([`transform_weights`]).
pub fn transformed_weights_len(p: &Conv3dParams) -> usize {
    TT * 3 * p.in_channels * p.out_channels
}

/// Weights `[3, 3, 3, in, out]` into `[yx index][z tap][in][out]` (`36 * 3 * in * out` values),
/// the form [`forward_fused_with`] takes; independent of the SIMD level, batch and size.
///
/// # Panics
/// When a length does not match `p`.
pub fn transform_weights(p: &Conv3dParams, w: &[f32], out: &mut [f32]) {
    let (ci, co) = (p.in_channels, p.out_channels);
    assert_eq!(w.len(), p.weights_len(), "winograd2d: weights length");
    assert_eq!(
        out.len(),
        TT * 3 * ci * co,
        "winograd2d: transformed weights"
    );
    for tz in 0..3 {
        for c in 0..ci {
            for o in 0..co {
                let tap = |ky: usize, kx: usize| w[(((tz * 3 + ky) * 3 + kx) * ci + c) * co + o];
                let rows: [[f32; T]; 3] = core::array::from_fn(|ky| {
                    winograd::weight_transform(core::array::from_fn(|kx| tap(ky, kx)))
                });
                for j in 0..T {
                    let col = winograd::weight_transform(core::array::from_fn(|ky| rows[ky][j]));
                    for (i, v) in col.into_iter().enumerate() {
                        out[(((i * T + j) * 3 + tz) * ci + c) * co + o] = v;
                    }
                }
            }
        }
    }
}

/// Padded plane `plane` of `input` (`g.len(c)`) into `out` (`[yx index][tile][c]`), read
/// through a ReLU when `relu`; voxels beyond the plane count as zero.
pub(super) fn transform_input_plane(
    kernels: Kernels,
    g: &Padded,
    c: usize,
    input: &[f32],
    plane: usize,
    relu: bool,
    out: &mut [f32],
) {
    let [_, dy, dx] = g.dims();
    let data = &input[plane * dy * dx * c..][..dy * dx * c];
    #[cfg(target_arch = "x86_64")]
    if kernels == Kernels::Avx512 && c.is_multiple_of(L) {
        let tiles = [winograd::tiles(g.size[1]), winograd::tiles(g.size[2])];
        // SAFETY: Kernels::Avx512 comes from simd_kernels, which detected AVX-512F.
        unsafe {
            super::avx512::winograd2d_input_plane([dy, dx], g.pad - 1, tiles, c, data, relu, out);
        }
        return;
    }
    transform_plane_for(kernels, g, c, data, relu, out);
}

/// One padded plane `data` of [`transform_input_plane`] into its `chunk`: per tile and block of
/// channels, the six rows transformed along x, then the six columns of the result along y.
#[inline(always)]
fn transform_plane(g: &Padded, c: usize, data: &[f32], relu: bool, chunk: &mut [f32]) {
    let input_transform = winograd::input_transform::<Lanes>;
    transform_tiles::<T>(g, c, data, g.pad - 1, relu, input_transform, chunk);
}

/// The 2D transform `f` (on `N` values, along x then along y) of the `N x N` voxels of every
/// tile of one padded plane `data` into `chunk` (`[yx index][tile][c]`), tiles from `origin` in y
/// and x at a step of 4, a block of channels at a time; read through a ReLU when `relu`; voxels
/// beyond the plane count as zero.
#[inline(always)]
fn transform_tiles<const N: usize>(
    g: &Padded,
    c: usize,
    data: &[f32],
    origin: usize,
    relu: bool,
    f: impl Fn([Lanes; N]) -> [Lanes; T],
    chunk: &mut [f32],
) {
    let [_, dy, dx] = g.dims();
    let ntx = winograd::tiles(g.size[2]);
    let ntiles = winograd::tiles(g.size[1]) * ntx;
    assert_eq!(
        chunk.len(),
        TT * ntiles * c,
        "winograd2d: transformed plane"
    );
    let mut it = chunk.chunks_exact_mut(ntiles * c);
    let parts: [&mut [f32]; TT] =
        core::array::from_fn(|_| it.next().expect("36 transformed parts"));
    let mut rows = [[Lanes::ZERO; T]; N];
    for t in 0..ntiles {
        let (y0, x0) = (origin + M * (t / ntx), origin + M * (t % ntx));
        for c0 in (0..c).step_by(L) {
            let w = L.min(c - c0);
            for (r, out) in rows.iter_mut().enumerate() {
                let mut v = [Lanes::ZERO; N];
                if y0 + r < dy {
                    let row = &data[(y0 + r) * dx * c..][..dx * c];
                    for (s, v) in v.iter_mut().enumerate().take(dx.saturating_sub(x0)) {
                        *v = Lanes::load(&row[(x0 + s) * c + c0..], w, relu);
                    }
                }
                *out = f(v);
            }
            for j in 0..T {
                let col = f(core::array::from_fn(|r| rows[r][j]));
                for (i, u) in col.iter().enumerate() {
                    u.store(&mut parts[i * T + j][t * c + c0..], w);
                }
            }
        }
    }
}

/// `out = residual + act(conv(relu?(input), weights) + bias)` by F(4x4, 3x3) in y, x with the
/// kernels of `simd`, the element-wise work of `fusion` in the same passes. Buffers and panics as
/// [`winograd::forward_fused`], which computes the conv instead (by F(4, 3)) where `simd` has no
/// SIMD kernels for the output width, or the volume is empty.
#[allow(clippy::too_many_arguments)]
pub fn forward_fused(
    simd: Simd,
    p: &Conv3dParams,
    g: &Padded,
    input: &[f32],
    weights: &[f32],
    fusion: Fusion<'_>,
    out: &mut [f32],
    scratch: &mut WinogradScratch,
) {
    forward_fused_with(simd, p, g, input, weights, None, fusion, out, scratch);
}

/// [`forward_fused`] with the weights already transformed where `transformed` is given (by
/// [`transform_weights`] from `weights`, e.g. kept between the calls of an inference run, whose
/// weights do not change): the same bits without the transform.
///
/// # Panics
/// As [`forward_fused`]; also when `transformed` has not [`transformed_weights_len`] values.
#[allow(clippy::too_many_arguments)]
pub fn forward_fused_with(
    simd: Simd,
    p: &Conv3dParams,
    g: &Padded,
    input: &[f32],
    weights: &[f32],
    transformed: Option<&[f32]>,
    fusion: Fusion<'_>,
    out: &mut [f32],
    scratch: &mut WinogradScratch,
) {
    let layout = (
        transformed_weights_len(p),
        transform_weights as WeightTransform,
    );
    let Some(prepared) = prepare(
        simd,
        p,
        g,
        input,
        weights,
        transformed,
        fusion,
        out,
        scratch,
        layout,
    ) else {
        return;
    };
    let Prepared {
        kernels,
        weights: tw,
        sums,
    } = prepared;
    let (cin, cout) = (p.in_channels, p.out_channels);
    let ntiles = winograd::tiles(g.size[1]) * winograd::tiles(g.size[2]);
    let plane_len = TT * ntiles * cin;
    let plane = g.plane_voxels();
    let sums_len = ntiles * TT * cout;
    // Per thread: the plane sums, and the transformed tap planes idx - 1, idx, idx + 1 in a ring
    // of three (plane q in slot q % 3): each plane of a run is transformed once, while it is in
    // the caches.
    winograd::for_each_output_plane(
        g,
        cout,
        out,
        sums,
        sums_len + 3 * plane_len,
        |idx, prev, zp, chunk, scratch| {
            let (sums, ring) = scratch.split_at_mut(sums_len);
            for q in winograd::ring_planes(idx, prev) {
                let slot = &mut ring[(q % 3) * plane_len..][..plane_len];
                transform_input_plane(kernels, g, cin, input, q, fusion.relu_input, slot);
            }
            let taps = core::array::from_fn(|tz| {
                let q = idx + tz - 1;
                &ring[(q % 3) * plane_len..][..plane_len]
            });
            plane_products(kernels, taps, tw, cin, cout, ntiles, sums);
            let residual = fusion
                .residual
                .map(|r| &r[idx * plane * cout..][..plane * cout]);
            inverse_and_finish(kernels, g, cout, sums, fusion, residual, chunk);
            g.zero_plane_border(chunk, zp, cout);
        },
    );
}

/// A weight transform: weights `[3, 3, 3, in, out]` of a conv into the form of its algorithm.
pub(super) type WeightTransform = fn(&Conv3dParams, &[f32], &mut [f32]);

/// What a SIMD forward pass starts from ([`prepare`]).
pub(super) struct Prepared<'a> {
    /// The SIMD kernels for the output width.
    pub kernels: Kernels,
    /// The transformed weights.
    pub weights: &'a [f32],
    /// The per-thread buffers of the pass.
    pub sums: &'a mut Vec<f32>,
}

/// The start of a fused forward pass by F(4x4, 3x3) or [`super::winograd3d`]: where `simd` has
/// no SIMD kernels for the output width, or the volume is empty, [`winograd::forward_fused`]
/// computes the conv (by F(4, 3)) and `None` comes back; else the checks of
/// [`winograd::check_fused`], and the transformed weights: `transformed` (which must hold
/// `layout.0` values), or `weights` transformed by `layout.1` into the scratch.
#[allow(clippy::too_many_arguments)]
pub(super) fn prepare<'a>(
    simd: Simd,
    p: &Conv3dParams,
    g: &Padded,
    input: &[f32],
    weights: &[f32],
    transformed: Option<&'a [f32]>,
    fusion: Fusion<'_>,
    out: &mut [f32],
    scratch: &'a mut WinogradScratch,
    (len, transform): (usize, WeightTransform),
) -> Option<Prepared<'a>> {
    let (cin, cout) = (p.in_channels, p.out_channels);
    let kernels = super::simd_kernels(cout, simd).filter(|_| p.voxels() > 0 && cin > 0);
    let Some(kernels) = kernels else {
        winograd::forward_fused(simd, p, g, input, weights, fusion, out, scratch);
        return None;
    };
    winograd::check_fused(p, g, input, fusion, out);
    let buffers = scratch.buffers();
    let weights = match transformed {
        Some(tw) => {
            assert_eq!(tw.len(), len, "winograd: transformed weights length");
            tw
        }
        None => {
            buffers.weights.resize(len, 0.0);
            transform(p, weights, buffers.weights);
            &buffers.weights[..]
        }
    };
    Some(Prepared {
        kernels,
        weights,
        sums: buffers.sums,
    })
}

/// The sums `[tile][yx index][out]` of one output plane: for every yx index and 32-channel
/// block, one call of the SIMD product kernel over all tiles, its three tap rows the transformed
/// planes `taps` (the input planes before, at and after the output plane).
#[allow(clippy::too_many_arguments)]
pub(super) fn plane_products(
    kernels: Kernels,
    taps: [&[f32]; 3],
    tw: &[f32],
    cin: usize,
    cout: usize,
    ntiles: usize,
    sums: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        let plane_len = TT * ntiles * cin;
        assert!(
            taps.iter().all(|t| t.len() == plane_len),
            "winograd2d: tap planes"
        );
        assert_eq!(
            tw.len(),
            TT * 3 * cin * cout,
            "winograd2d: transformed weights"
        );
        assert_eq!(sums.len(), ntiles * TT * cout, "winograd2d: plane sums");
        for k in 0..TT {
            let rows: [*const f32; 3] =
                core::array::from_fn(|tz| taps[tz][k * ntiles * cin..].as_ptr());
            for ob in (0..cout).step_by(32) {
                // SAFETY: the instruction set was detected and cout % 32 == 0 (simd_kernels); the
                // asserts keep the three tap planes (each read at t * cin + c for t < ntiles,
                // c < cin from yx index k), the weights (read at (tz * cin + c) * cout + ob + 0..32
                // from (k * 3 * cin) * cout) and the sums (written at t * 36 * cout + k * cout + ob
                // + 0..32) inside their slices.
                unsafe {
                    kernels.winograd_rows(
                        &rows,
                        cin,
                        tw[k * 3 * cin * cout + ob..].as_ptr(),
                        cout,
                        sums.as_mut_ptr().add(k * cout + ob),
                        TT * cout,
                        ntiles,
                        false,
                    );
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernels, taps, tw, cin, cout, ntiles, sums);
        unreachable!("SIMD Winograd kernel selected without SIMD support");
    }
}

/// The 4 x 4 outputs of every tile of one interior plane (`chunk`, padded) from its sums by
/// `Aᵀ m A`, a block of channels at a time, each output written straight into the plane.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // q indexes the inner arrays of every row
fn inverse_plane(g: &Padded, cout: usize, sums: &[f32], chunk: &mut [f32]) {
    let [_, _, dx] = g.dims();
    let (pad, [_, sy, sx]) = (g.pad, g.size);
    let ntx = winograd::tiles(sx);
    let mut rows = [[Lanes::ZERO; M]; T];
    for (t, tile) in sums.chunks_exact(TT * cout).enumerate() {
        let (ty, tx) = (M * (t / ntx), M * (t % ntx));
        let (vy, vx) = ((sy - ty).min(M), (sx - tx).min(M));
        for o0 in (0..cout).step_by(L) {
            let w = L.min(cout - o0);
            for (i, out) in rows.iter_mut().enumerate() {
                let mut v = [Lanes::ZERO; T];
                for (j, v) in v.iter_mut().enumerate() {
                    *v = Lanes::load(&tile[(i * T + j) * cout + o0..], w, false);
                }
                *out = winograd::output_transform(v);
            }
            for q in 0..vx {
                let col = winograd::output_transform(core::array::from_fn(|i| rows[i][q]));
                for (u, v) in col.iter().enumerate().take(vy) {
                    let at = ((pad + ty + u) * dx + pad + tx + q) * cout + o0;
                    v.store(&mut chunk[at..], w);
                }
            }
        }
    }
}

/// The outputs of one interior plane from its sums ([`inverse_plane`]), then the bias, ReLU and
/// residual of `fusion` ([`finish_plane`]): in one pass with the AVX-512 kernels (the same bits).
#[allow(clippy::too_many_arguments)]
pub(super) fn inverse_and_finish(
    kernels: Kernels,
    g: &Padded,
    cout: usize,
    sums: &[f32],
    fusion: Fusion<'_>,
    residual: Option<&[f32]>,
    chunk: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if kernels == Kernels::Avx512 && cout.is_multiple_of(L) {
        let finish = super::avx512::Finish {
            bias: fusion.bias,
            relu: fusion.relu,
            residual,
        };
        let (dx, size) = (g.dims()[2], [g.size[1], g.size[2]]);
        // SAFETY: Kernels::Avx512 comes from simd_kernels, which detected AVX-512F.
        unsafe {
            super::avx512::winograd2d_inverse_plane(dx, g.pad, size, cout, sums, finish, chunk);
        }
        return;
    }
    inverse_plane_for(kernels, g, cout, sums, chunk);
    finish_plane(g, cout, fusion, residual, chunk);
}

/// Bias, ReLU and the residual of `fusion`, in that order, over the interior rows of one plane.
pub(super) fn finish_plane(
    g: &Padded,
    cout: usize,
    fusion: Fusion<'_>,
    residual: Option<&[f32]>,
    chunk: &mut [f32],
) {
    let [_, _, dx] = g.dims();
    let (pad, [_, sy, sx]) = (g.pad, g.size);
    for y in pad..pad + sy {
        let at = (y * dx + pad) * cout;
        let row = &mut chunk[at..at + sx * cout];
        if let Some(b) = fusion.bias {
            for v in row.chunks_exact_mut(cout) {
                v.iter_mut().zip(b).for_each(|(v, b)| *v += b);
            }
        }
        if fusion.relu {
            row.iter_mut().for_each(|v| *v = v.max(0.0));
        }
        if let Some(r) = residual {
            row.iter_mut()
                .zip(&r[at..at + sx * cout])
                .for_each(|(v, r)| *v += r);
        }
    }
}
