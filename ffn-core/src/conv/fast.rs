//! Fast convolution on zero-padded channels-last buffers: a virtual im2col matrix (strided view,
//! never materialised) times the weights, one output plane per task.
//!
//! Every function takes the padded geometry `g` of its buffers ([`Padded`], border `g.pad >= kernel /
//! 2`), and the conv sizes `p` (`p.batch == g.batch`, `p.size == g.size`). Inputs must be zero on the
//! border (as [`Padded::pad_from`] and the outputs of these functions leave them); outputs are
//! written with a zero border. The conv functions take the [`Simd`] level whose kernels run (or the
//! widest this CPU has below it); [`Simd::active`] is the usual choice.

use super::gemm::{View, sgemm};
use super::{Conv3dParams, Kernels, Simd};
use crate::parallel;
use crate::tensor::Padded;
use alloc::vec::Vec;

/// Rows of one output plane that the GEMMs cover: from the first interior voxel to the last one
/// (the border voxels between interior rows are computed too and zeroed afterwards).
#[derive(Clone, Copy)]
struct PlaneRows {
    /// First covered voxel, relative to the plane start.
    first: usize,
    /// Number of covered voxels.
    count: usize,
}

fn plane_rows(g: &Padded) -> Option<PlaneRows> {
    if g.size.contains(&0) || g.batch == 0 {
        return None;
    }
    let [_, _, dx] = g.dims();
    let p = g.pad;
    let first = p * dx + p;
    let last = (p + g.size[1] - 1) * dx + p + g.size[2] - 1;
    Some(PlaneRows {
        first,
        count: last + 1 - first,
    })
}

fn check(p: &Conv3dParams, g: &Padded) {
    assert!(
        p.kernel % 2 == 1,
        "conv3d: kernel edge must be odd, found {}",
        p.kernel
    );
    assert_eq!(
        (p.batch, p.size),
        (g.batch, g.size),
        "conv3d: geometry does not match the conv"
    );
    assert!(
        g.pad >= p.half(),
        "conv3d: border {} narrower than half the kernel {}",
        g.pad,
        p.half()
    );
}

/// Voxel offset, relative to an output voxel, of tap `(tz, ty, 0)` for kernel half-width `h`.
fn tap_back(g: &Padded, h: usize) -> usize {
    h * g.plane_voxels() + h * g.dims()[2] + h
}

/// Core kernel: `out = act(conv(input, w) + bias)` over all planes, `k` kernel, `cin -> cout`.
#[allow(clippy::too_many_arguments)]
fn conv_planes(
    simd: Simd,
    g: &Padded,
    k: usize,
    cin: usize,
    cout: usize,
    input: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    relu: bool,
    out: &mut [f32],
) {
    assert_eq!(input.len(), g.len(cin), "conv3d: padded input length");
    assert_eq!(out.len(), g.len(cout), "conv3d: padded output length");
    assert_eq!(w.len(), k * k * k * cin * cout, "conv3d: weights length");
    if let Some(b) = bias {
        assert_eq!(b.len(), cout, "conv3d: bias length");
    }
    let plane = g.plane_voxels();
    if out.is_empty() || cout == 0 {
        return;
    }
    let [dz, _, dx] = g.dims();
    let rows = plane_rows(g);
    let h = k / 2;
    let back = tap_back(g, h);
    let (p, sz) = (g.pad, g.size[0]);
    let direct = super::simd_kernels(cout, simd);
    parallel::for_each_chunk_mut(out, plane * cout, |idx, chunk| {
        let zp = idx % dz;
        let Some(rows) = rows.filter(|_| zp >= p && zp < p + sz) else {
            chunk.fill(0.0);
            return;
        };
        if let Some(kernels) = direct {
            direct_rows(kernels, g, k, cin, cout, input, w, idx, chunk);
        } else {
            let row0 = idx * plane + rows.first;
            let dst = &mut chunk[rows.first * cout..];
            for tz in 0..k {
                for ty in 0..k {
                    let start = row0 + tz * plane + ty * dx - back;
                    let lhs = View {
                        data: &input[start * cin..],
                        rs: cin,
                        cs: 1,
                    };
                    let wo = (tz * k + ty) * k * cin * cout;
                    let rhs = View {
                        data: &w[wo..wo + k * cin * cout],
                        rs: cout,
                        cs: 1,
                    };
                    sgemm(rows.count, cout, k * cin, dst, cout, tz + ty > 0, lhs, rhs);
                }
            }
        }
        if bias.is_some() || relu {
            for y in p..p + g.size[1] {
                let a = (y * dx + p) * cout;
                let row = &mut chunk[a..a + g.size[2] * cout];
                for v in row.chunks_exact_mut(cout) {
                    if let Some(b) = bias {
                        v.iter_mut().zip(b).for_each(|(v, b)| *v += b);
                    }
                    if relu {
                        v.iter_mut().for_each(|v| *v = v.max(0.0));
                    }
                }
            }
        }
        g.zero_plane_border(chunk, zp, cout);
    });
}

/// The interior rows of output plane `idx` (whole-buffer plane index) with the direct kernel.
#[allow(clippy::too_many_arguments)]
fn direct_rows(
    kernels: Kernels,
    g: &Padded,
    k: usize,
    cin: usize,
    cout: usize,
    input: &[f32],
    w: &[f32],
    idx: usize,
    chunk: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        let [_, _, dx] = g.dims();
        let plane = g.plane_voxels();
        let back = tap_back(g, k / 2);
        let (p, sx) = (g.pad, g.size[2]);
        assert_eq!(w.len(), k * k * k * cin * cout, "conv3d: weights length");
        assert_eq!(input.len(), g.len(cin), "conv3d: padded input length");
        for y in p..p + g.size[1] {
            let first = y * dx + p;
            let in0 = idx * plane + first - back;
            let last_in = in0 + (k - 1) * (plane + dx) + sx - 1 + (k - 1);
            assert!(
                last_in < g.voxels() && (first + sx) * cout <= chunk.len(),
                "conv3d: direct kernel bounds"
            );
            // SAFETY: the instruction set was detected (simd_kernels), cout is a multiple of 32, and
            // the asserts above bound every input voxel read and every output voxel written.
            unsafe {
                kernels.row(
                    input.as_ptr().add(in0 * cin),
                    cin,
                    k,
                    |tz, ty| tz * plane + ty * dx,
                    w.as_ptr(),
                    cout,
                    chunk.as_mut_ptr().add(first * cout),
                    sx,
                );
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernels, g, k, cin, cout, input, w, idx, chunk);
        unreachable!("direct kernel selected without SIMD support");
    }
}

/// Forward pass: `out = conv(input, weights) + bias`, followed by ReLU when `relu`, with the
/// kernels of `simd` (or the widest this CPU has below it: [`Simd::usable`]; [`Simd::active`] is
/// the default).
///
/// Buffers: `input` `g.len(in)`, `out` `g.len(out)`, `weights` `[k, k, k, in, out]`, `bias` `[out]`.
///
/// # Panics
/// When a length or the geometry does not match `p`.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    simd: Simd,
    p: &Conv3dParams,
    g: &Padded,
    input: &[f32],
    weights: &[f32],
    bias: &[f32],
    relu: bool,
    out: &mut [f32],
) {
    check(p, g);
    conv_planes(
        simd,
        g,
        p.kernel,
        p.in_channels,
        p.out_channels,
        input,
        weights,
        Some(bias),
        relu,
        out,
    );
}

/// Rearranges weights `[kz, ky, kx, in, out]` into the flipped, transposed kernel
/// `[k-1-kz, k-1-ky, k-1-kx, out, in]` that turns the input gradient into a forward conv.
///
/// # Panics
/// When a length does not match `p`.
pub fn flip_weights(p: &Conv3dParams, weights: &[f32], flipped: &mut [f32]) {
    assert_eq!(
        weights.len(),
        p.weights_len(),
        "flip_weights: weights length"
    );
    assert_eq!(
        flipped.len(),
        p.weights_len(),
        "flip_weights: flipped length"
    );
    let taps = p.kernel.pow(3);
    let (ci, co) = (p.in_channels, p.out_channels);
    for t in 0..taps {
        let ft = taps - 1 - t; // reversing z, y and x at once reverses the flat tap index
        for c in 0..ci {
            for o in 0..co {
                flipped[(ft * co + o) * ci + c] = weights[(t * ci + c) * co + o];
            }
        }
    }
}

/// Input gradient: `grad_in = d(loss)/d(input)` from `grad_out`, using weights flipped by
/// [`flip_weights`]. `grad_out` must be zero on the border.
///
/// # Panics
/// When a length or the geometry does not match `p`.
pub fn backward_input(
    simd: Simd,
    p: &Conv3dParams,
    g: &Padded,
    grad_out: &[f32],
    flipped_weights: &[f32],
    grad_in: &mut [f32],
) {
    check(p, g);
    conv_planes(
        simd,
        g,
        p.kernel,
        p.out_channels,
        p.in_channels,
        grad_out,
        flipped_weights,
        None,
        false,
        grad_in,
    );
}

/// Weight and bias gradients (overwritten). `grad_out` must be zero on the border. `scratch`
/// holds one partial sum per thread; it grows on the first call and is reused afterwards.
///
/// # Panics
/// When a length or the geometry does not match `p`.
#[allow(clippy::too_many_arguments)]
pub fn backward_weights(
    simd: Simd,
    p: &Conv3dParams,
    g: &Padded,
    input: &[f32],
    grad_out: &[f32],
    grad_w: &mut [f32],
    grad_b: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    check(p, g);
    let (k, cin, cout) = (p.kernel, p.in_channels, p.out_channels);
    assert_eq!(input.len(), g.len(cin), "conv3d: padded input length");
    assert_eq!(
        grad_out.len(),
        g.len(cout),
        "conv3d: padded output gradient length"
    );
    assert_eq!(
        grad_w.len(),
        p.weights_len(),
        "conv3d: weight gradient length"
    );
    assert_eq!(grad_b.len(), cout, "conv3d: bias gradient length");
    let wl = p.weights_len();
    let plen = wl + cout;
    let Some(rows) = plane_rows(g) else {
        grad_w.fill(0.0);
        grad_b.fill(0.0);
        return;
    };
    if plen == 0 {
        return;
    }
    let [_, _, dx] = g.dims();
    let plane = g.plane_voxels();
    let back = tap_back(g, k / 2);
    let none = &mut Vec::new();
    let parts = super::plane_partials(g, cout, grad_out, wl, scratch, none, 0, |idx, _, pw, _| {
        let row0 = idx * plane + rows.first;
        let gout = View {
            data: &grad_out[row0 * cout..],
            rs: cout,
            cs: 1,
        };
        for tz in 0..k {
            for ty in 0..k {
                let start = row0 + tz * plane + ty * dx - back;
                let lhs = View {
                    data: &input[start * cin..],
                    rs: 1,
                    cs: cin,
                };
                let wo = (tz * k + ty) * k * cin * cout;
                super::accumulate_products(
                    simd,
                    k * cin,
                    cout,
                    rows.count,
                    &mut pw[wo..],
                    cout,
                    lhs,
                    gout,
                );
            }
        }
    });
    let (first, rest) = parts.split_at(plen);
    grad_w.copy_from_slice(&first[..wl]);
    grad_b.copy_from_slice(&first[wl..]);
    for part in rest.chunks_exact(plen) {
        grad_w
            .iter_mut()
            .zip(&part[..wl])
            .for_each(|(g, v)| *g += v);
        grad_b
            .iter_mut()
            .zip(&part[wl..])
            .for_each(|(g, v)| *g += v);
    }
}
