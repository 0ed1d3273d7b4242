//! Weight gradients of 3x3x3 convolutions by Winograd F(4x4, 3x3) over y and x, summed directly
//! over z: the transposed algorithm of the forward pass,
//! `∂L/∂g = Gᵀ [(A ∂L/∂Y Aᵀ) ⊙ (Bᵀ d B)] G` per z tap, the products summed over every tile,
//! plane and input/output channel pair before `Gᵀ · G`. Per plane and channel pair this is
//! `36 x 3` products per tile of 16 outputs where F(4, 3) along x needs `6 x 9` per 4 outputs of
//! a row: 1.8x fewer multiply-adds on 33 x 33 planes.
//!
//! # Implementation
//! Each thread takes a contiguous run of output planes ([`super::super::plane_partials`]). For
//! each, it transforms the input planes before, at and after it by `Bᵀ d B` into a ring of three
//! (the forward pass's transform, `[yx index][tile][in]`) and the plane's output gradient by
//! `A g Aᵀ` (`[yx index][tile][out]`); then, for every yx index and z tap, one product of depth
//! "tiles of the plane" accumulates into the thread's partial sums `[yx index][z tap][in][out]`.
//! The partials of all threads are summed and turned into the 27 taps by `Gᵀ · G`.
//!
//! Rounding: `A` multiplies by up to 8 per axis and `Gᵀ` divides by up to 24; the tests hold
//! the error to the forward pass's bound, `2e-5` of the sum of the absolute terms (the worst
//! seen: `2.3e-6`, against `1.9e-6` for the forward pass).

use super::super::gemm::View;
use super::super::winograd::{self, M, T, WinogradScratch};
use super::super::{Conv3dParams, Simd};
use super::{Lanes, TT};
use crate::tensor::Padded;

compiled_for_kernels!(transform_grad_plane_for(g: &Padded, c: usize, data: &[f32], chunk: &mut [f32]) => transform_grad_plane);

/// The weight and bias gradients of conv `p` (`grad_w` `[3, 3, 3, in, out]`, `grad_b` `[out]`,
/// both overwritten) by F(4x4, 3x3) in y, x with the kernels of `simd`; by F(4, 3)
/// ([`winograd::backward_weights`]) where `simd` has no SIMD kernels for the output width or the
/// volume is empty.
///
/// Buffers as in [`super::super::fast::backward_weights`]: padded `input` and `grad_out` (zero
/// border).
///
/// # Panics
/// When the kernel is not 3, the border is narrower than 1, or a length or the geometry does not
/// match `p`.
#[allow(clippy::too_many_arguments)]
pub fn backward_weights(
    simd: Simd,
    p: &Conv3dParams,
    g: &Padded,
    input: &[f32],
    grad_out: &[f32],
    grad_w: &mut [f32],
    grad_b: &mut [f32],
    scratch: &mut WinogradScratch,
) {
    let (cin, cout) = (p.in_channels, p.out_channels);
    let kernels = super::super::simd_kernels(cout, simd).filter(|_| p.voxels() > 0 && cin > 0);
    let Some(kernels) = kernels else {
        winograd::backward_weights(simd, p, g, input, grad_out, grad_w, grad_b, scratch);
        return;
    };
    winograd::check_gradients(p, g, input, grad_out, grad_w, grad_b);
    let ntiles = winograd::tiles(g.size[1]) * winograd::tiles(g.size[2]);
    let (lin, lgrad) = (TT * ntiles * cin, TT * ntiles * cout);
    let pair = cin * cout;
    let wl = TT * 3 * pair;
    let (partials, ring) = scratch.gradient_buffers();
    let parts = super::super::plane_partials(
        g,
        cout,
        grad_out,
        wl,
        partials,
        ring,
        3 * lin + lgrad,
        |idx, prev, pw, ring| {
            let (tin, tgrad) = ring.split_at_mut(3 * lin);
            for q in winograd::ring_planes(idx, prev) {
                let slot = &mut tin[(q % 3) * lin..][..lin];
                super::transform_input_plane(kernels, g, cin, input, q, false, slot);
            }
            let data = &grad_out[idx * g.plane_voxels() * cout..][..g.plane_voxels() * cout];
            transform_grad_plane_for(kernels, g, cout, data, tgrad);
            for k in 0..TT {
                let rhs = View {
                    data: &tgrad[k * ntiles * cout..][..ntiles * cout],
                    rs: cout,
                    cs: 1,
                };
                for tz in 0..3 {
                    let plane = (idx + tz - 1) % 3;
                    let lhs = View {
                        data: &tin[plane * lin + k * ntiles * cin..][..ntiles * cin],
                        rs: 1,
                        cs: cin,
                    };
                    let dst = &mut pw[(k * 3 + tz) * pair..][..pair];
                    super::super::accumulate_products(simd, cin, cout, ntiles, dst, cout, lhs, rhs);
                }
            }
        },
    );
    grad_w.fill(0.0);
    grad_b.fill(0.0);
    for part in parts.chunks_exact(wl + cout) {
        grad_b
            .iter_mut()
            .zip(&part[wl..])
            .for_each(|(g, v)| *g += v);
        for tz in 0..3 {
            for co in 0..pair {
                let prod = |iy: usize, ix: usize| part[((iy * T + ix) * 3 + tz) * pair + co];
                // Gᵀ along x for each of the six rows, then along y for each of the three taps.
                let rows: [[f32; 3]; T] = core::array::from_fn(|iy| {
                    winograd::tap_grads(core::array::from_fn(|ix| prod(iy, ix)))
                });
                for kx in 0..3 {
                    let col = winograd::tap_grads(core::array::from_fn(|iy| rows[iy][kx]));
                    for (ky, v) in col.into_iter().enumerate() {
                        grad_w[((tz * 3 + ky) * 3 + kx) * pair + co] += v;
                    }
                }
            }
        }
    }
}

/// One padded plane `data` of an output gradient into `chunk` (`[yx index][tile][c]`): the 4 x 4
/// outputs of every tile (from the first interior voxel, at a step of 4) transformed by `A g Aᵀ`;
/// voxels beyond the plane count as zero.
#[inline(always)]
fn transform_grad_plane(g: &Padded, c: usize, data: &[f32], chunk: &mut [f32]) {
    assert_eq!(
        data.len(),
        g.plane_voxels() * c,
        "winograd2d: padded gradient plane"
    );
    let grad_transform = winograd::grad_transform::<Lanes>;
    super::transform_tiles::<M>(g, c, data, g.pad, false, grad_transform, chunk);
}
