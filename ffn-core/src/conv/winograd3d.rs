//! Forward 3x3x3 convolutions by Winograd over all three axes: F(4x4, 3x3) over y and x as in
//! [`super::winograd2d`], and F(4, 3) along z on top of it. Per tile of 4 output planes and yx
//! index, six products (one per transformed z component) where the two-axis algorithm needs
//! twelve (three z taps for each of four planes): 2x fewer multiply-adds in the products, 8x
//! fewer than direct summation. The default ([`super::winograd::ConvAlgorithm::Winograd3d`]) for
//! the forward convs of inference and training and for the input gradients.
//!
//! # Implementation
//! 1. The interior planes of every volume are cut, from the first, into z tiles of 4 output
//!    planes; the 1 to 3 planes left at the end of a volume are computed one by one by
//!    F(4x4, 3x3) ([`super::winograd2d`], the same bits as there). The z tiles and planes are
//!    shared out over the threads as contiguous runs of about equal work, aligned the same way
//!    for every thread count, so the bits do not depend on it.
//! 2. Each thread transforms the input planes by `Bᵀ d B` over y and x into a ring of six (the
//!    input planes of one z tile; a plane shared by two z tiles is transformed once).
//! 3. For each block of 12 tiles and yx index: the six planes are transformed along z by `Bᵀ`
//!    of F(4, 3), each of the six components is multiplied with the weights transformed along
//!    all three axes (one call of the SIMD product kernel with one tap row, over the block's
//!    tiles and the input channels), and `Aᵀ` of F(4, 3) turns the six products into the sums of
//!    the four output planes. The block's components and products stay in L1. The z transforms
//!    run as AVX-512 kernels where the widths allow, else as lanes compiled for the kernels'
//!    instruction set: the same bits.
//! 4. Each output plane is finished as in [`super::winograd2d`]: `Aᵀ m A`, bias, ReLU, residual.
//!
//! Rounding: the tests hold it to `1e-4` of the sum of the absolute terms of each output (the
//! worst seen `1.35e-5`, against `1.9e-6` for F(4x4, 3x3): the three-axis transforms grow the
//! values that are rounded). On Google's FIB-25 model the whole `training_sample2` volume
//! differs from Google's segmentation in 25 voxels (adapted Rand error 2.2e-6).

use super::winograd::{self, Fusion, M, T, WinogradScratch};
use super::winograd2d::{self, L, Lanes, Prepared, TT};
use super::{Conv3dParams, Kernels, Simd};
use crate::parallel;
use crate::tensor::Padded;

/// Output planes per z tile.
const MZ: usize = M;
/// Input planes, and transformed components, per z tile.
const NZ: usize = T;
/// Tiles of a plane whose z components are transformed and multiplied together.
const TILE_BLOCK: usize = 12;

/// Whether [`forward_fused_with`] computes conv `p` by the three-axis algorithm with the kernels
/// of `simd`: where [`winograd2d::preferred`] holds.
pub fn preferred(p: &Conv3dParams, simd: Simd) -> bool {
    winograd2d::preferred(p, simd)
}

/// Values of the transformed weights of conv `p` ([`transform_weights`]).
pub fn transformed_weights_len(p: &Conv3dParams) -> usize {
    winograd2d::transformed_weights_len(p) + TT * NZ * p.in_channels * p.out_channels
}

/// Weights `[3, 3, 3, in, out]` into the form [`forward_fused_with`] takes: those of
/// [`winograd2d::transform_weights`] (for the planes computed one by one), then the same
/// transformed along z too, `[yx index][z component][in][out]`.
///
/// # Panics
/// When a length does not match `p`.
pub fn transform_weights(p: &Conv3dParams, w: &[f32], out: &mut [f32]) {
    let (ci, co) = (p.in_channels, p.out_channels);
    assert_eq!(
        out.len(),
        transformed_weights_len(p),
        "winograd3d: transformed weights"
    );
    let (two, three) = out.split_at_mut(winograd2d::transformed_weights_len(p));
    winograd2d::transform_weights(p, w, two);
    for k in 0..TT {
        for c in 0..ci {
            for o in 0..co {
                let taps = core::array::from_fn(|tz| two[((k * 3 + tz) * ci + c) * co + o]);
                for (zc, v) in winograd::weight_transform(taps).into_iter().enumerate() {
                    three[((k * NZ + zc) * ci + c) * co + o] = v;
                }
            }
        }
    }
}

/// The units of work of one forward pass: z tiles of [`MZ`] output planes from the first
/// interior plane of every volume, then the planes left over, one unit each.
#[derive(Clone, Copy)]
struct Units {
    /// Padded planes per volume.
    dz: usize,
    /// Border width.
    pad: usize,
    /// z tiles per volume.
    tiles: usize,
    /// Units per volume (z tiles and planes left over).
    per_volume: usize,
    /// Volumes.
    batch: usize,
}

impl Units {
    fn new(g: &Padded) -> Self {
        let sz = g.size[0];
        let tiles = sz / MZ;
        Self {
            dz: g.dims()[0],
            pad: g.pad,
            tiles,
            per_volume: tiles + sz % MZ,
            batch: g.batch,
        }
    }

    fn len(&self) -> usize {
        self.batch * self.per_volume
    }

    /// Unit `u`: its first output plane (whole-buffer index) and its number of planes.
    fn get(&self, u: usize) -> (usize, usize) {
        let (b, j) = (u / self.per_volume, u % self.per_volume);
        let base = b * self.dz + self.pad;
        if j < self.tiles {
            (base + MZ * j, MZ)
        } else {
            (base + MZ * self.tiles + (j - self.tiles), 1)
        }
    }

    /// Relative work of unit `u`: two per product, one per output plane finished.
    fn cost(&self, u: usize) -> usize {
        match self.get(u).1 {
            1 => 2 * 3 + 1,
            _ => 2 * NZ + MZ,
        }
    }

    /// The first unit of run `th` of `threads` contiguous runs of about equal work
    /// ([`Units::len`] for `th == threads`).
    fn start(&self, th: usize, threads: usize) -> usize {
        let n = self.len();
        if th >= threads {
            return n;
        }
        let total: usize = (0..n).map(|u| self.cost(u)).sum();
        let target = total * th / threads;
        let (mut done, mut u) = (0, 0);
        while u < n && done + self.cost(u) / 2 < target {
            done += self.cost(u);
            u += 1;
        }
        u
    }
}

/// `out = residual + act(conv(relu?(input), weights) + bias)` by the three-axis algorithm:
/// [`forward_fused_with`], the weights transformed on every call.
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

/// [`winograd2d::forward_fused_with`] by the three-axis algorithm, with the weights already
/// transformed where `transformed` is given (by [`transform_weights`]). Where `simd` has no SIMD
/// kernels for the output width, or the volume is empty, [`winograd::forward_fused`] computes the
/// conv instead (by F(4, 3)).
///
/// # Panics
/// As [`winograd::forward_fused`]; also when `transformed` has not [`transformed_weights_len`]
/// values.
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
        transform_weights as winograd2d::WeightTransform,
    );
    let Some(prepared) = winograd2d::prepare(
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
        sums: buffers,
    } = prepared;
    let (cin, cout) = (p.in_channels, p.out_channels);
    let (tw2, tw3) = tw.split_at(winograd2d::transformed_weights_len(p));
    let ntiles = winograd::tiles(g.size[1]) * winograd::tiles(g.size[2]);
    let sizes = ThreadBuffers {
        plane: TT * ntiles * cin,
        components: NZ * TILE_BLOCK.min(ntiles) * cin,
        products: NZ * TILE_BLOCK.min(ntiles) * cout,
        sums: ntiles * TT * cout,
    };
    let units = Units::new(g);
    let threads = parallel::current_num_threads().clamp(1, units.len());
    let plane_len = g.plane_voxels() * cout;
    let planes = g.batch * units.dz;
    // Run th holds the planes from its first unit's to the next run's (the border planes
    // between them included); the first from plane 0, the last to the end.
    let bound = |th: usize| match units.start(th, threads) {
        _ if th == 0 => 0,
        u if u < units.len() => units.get(u).0 * plane_len,
        _ => planes * plane_len,
    };
    let sz = g.size[0];
    buffers.resize(threads * sizes.len(), 0.0);
    let len = sizes.len();
    parallel::for_each_region_pair_mut(out, threads, bound, buffers, len, |th, region, buf| {
        let first = bound(th) / plane_len;
        for (i, chunk) in region.chunks_exact_mut(plane_len).enumerate() {
            let zp = (first + i) % units.dz;
            if zp < g.pad || zp >= g.pad + sz {
                chunk.fill(0.0);
            }
        }
        let mut ring = Ring::new(sizes.split(buf));
        let ctx = Pass {
            kernels,
            g,
            cin,
            cout,
            ntiles,
            input,
            relu_input: fusion.relu_input,
        };
        for u in units.start(th, threads)..units.start(th + 1, threads) {
            let (z0, n) = units.get(u);
            if n == MZ {
                ring.z_tile_sums(&ctx, z0, tw3);
            } else {
                ring.plane_sums(&ctx, z0, tw2);
            }
            for m in 0..n {
                let q = z0 + m;
                let chunk = &mut region[(q - first) * plane_len..][..plane_len];
                let residual = fusion.residual.map(|r| &r[q * plane_len..][..plane_len]);
                let sums = &ring.sums[m * sizes.sums..][..sizes.sums];
                winograd2d::inverse_and_finish(kernels, g, cout, sums, fusion, residual, chunk);
                g.zero_plane_border(chunk, q % units.dz, cout);
            }
        }
    });
}

/// Lengths of the per-thread buffers of one pass.
#[derive(Clone, Copy)]
struct ThreadBuffers {
    /// One input plane transformed over y and x (`[yx index][tile][in]`).
    plane: usize,
    /// The z components of one yx index and block of tiles (`[z component][tile][in]`).
    components: usize,
    /// Their products (`[z component][tile][out]`).
    products: usize,
    /// The sums of one output plane (`[tile][yx index][out]`).
    sums: usize,
}

impl ThreadBuffers {
    fn len(&self) -> usize {
        NZ * self.plane + self.components + self.products + MZ * self.sums
    }

    /// `buf` cut into the ring's planes, components, products and sums.
    fn split<'a>(&self, buf: &'a mut [f32]) -> Parts<'a> {
        let (ring, rest) = buf.split_at_mut(NZ * self.plane);
        let (components, rest) = rest.split_at_mut(self.components);
        let (products, rest) = rest.split_at_mut(self.products);
        Parts {
            plane_len: self.plane,
            ring,
            components,
            products,
            sums: &mut rest[..MZ * self.sums],
        }
    }
}

/// The per-thread buffers, cut.
struct Parts<'a> {
    plane_len: usize,
    ring: &'a mut [f32],
    components: &'a mut [f32],
    products: &'a mut [f32],
    sums: &'a mut [f32],
}

/// What every unit of one pass shares.
struct Pass<'a> {
    kernels: Kernels,
    g: &'a Padded,
    cin: usize,
    cout: usize,
    ntiles: usize,
    input: &'a [f32],
    relu_input: bool,
}

/// One thread's transformed input planes (plane `q` in slot `q % 6`, `held` saying which plane
/// each slot holds) and its other buffers.
struct Ring<'a> {
    held: [Option<usize>; NZ],
    plane_len: usize,
    planes: &'a mut [f32],
    components: &'a mut [f32],
    products: &'a mut [f32],
    sums: &'a mut [f32],
}

impl<'a> Ring<'a> {
    fn new(parts: Parts<'a>) -> Self {
        Self {
            held: [None; NZ],
            plane_len: parts.plane_len,
            planes: parts.ring,
            components: parts.components,
            products: parts.products,
            sums: parts.sums,
        }
    }

    /// Transforms the input planes `range` into their slots where a slot does not hold them yet.
    fn hold(&mut self, ctx: &Pass<'_>, range: core::ops::RangeInclusive<usize>) {
        for q in range {
            if self.held[q % NZ] != Some(q) {
                let slot = &mut self.planes[(q % NZ) * self.plane_len..][..self.plane_len];
                winograd2d::transform_input_plane(
                    ctx.kernels,
                    ctx.g,
                    ctx.cin,
                    ctx.input,
                    q,
                    ctx.relu_input,
                    slot,
                );
                self.held[q % NZ] = Some(q);
            }
        }
    }

    /// The sums of output plane `q` alone, by F(4x4, 3x3) with its weights `tw2`, into the first
    /// sums buffer.
    fn plane_sums(&mut self, ctx: &Pass<'_>, q: usize, tw2: &[f32]) {
        self.hold(ctx, q - 1..=q + 1);
        let (planes, len) = (&*self.planes, self.plane_len);
        let taps = core::array::from_fn(|tz| &planes[((q + tz - 1) % NZ) * len..][..len]);
        let sums = &mut self.sums[..ctx.ntiles * TT * ctx.cout];
        winograd2d::plane_products(ctx.kernels, taps, tw2, ctx.cin, ctx.cout, ctx.ntiles, sums);
    }

    /// The sums of the output planes `z0..z0 + 4`, by F(4, 3) along z with the weights `tw3`
    /// transformed over all three axes, into the four sums buffers.
    fn z_tile_sums(&mut self, ctx: &Pass<'_>, z0: usize, tw3: &[f32]) {
        self.hold(ctx, z0 - 1..=z0 + MZ);
        let (nt, cin, cout) = (ctx.ntiles, ctx.cin, ctx.cout);
        let (held, len, slice) = (&*self.planes, self.plane_len, nt * cin);
        // A block of tiles at a time, so that its components and products stay in L1 and its
        // sums in L2.
        for t0 in (0..nt).step_by(TILE_BLOCK) {
            let nb = TILE_BLOCK.min(nt - t0);
            let (components, products) = (
                &mut self.components[..NZ * nb * cin],
                &mut self.products[..NZ * nb * cout],
            );
            for k in 0..TT {
                let planes: [&[f32]; NZ] = core::array::from_fn(|j| {
                    &held[((z0 + j - 1) % NZ) * len + k * slice + t0 * cin..][..nb * cin]
                });
                transform_components(ctx.kernels, planes, components);
                let tw = &tw3[k * NZ * cin * cout..];
                z_products(ctx.kernels, nb, cin, cout, components, tw, products);
                sum_products(ctx.kernels, products, nt, t0, cout, k, self.sums);
            }
        }
    }
}

compiled_for_kernels!(z_components_for(planes: [&[f32]; NZ], out: &mut [f32]) => z_components);
compiled_for_kernels!(z_sums_for(products: &[f32], nt: usize, t0: usize, cout: usize, k: usize, sums: &mut [f32]) => z_sums);

/// [`z_components`], by the AVX-512 kernel where it applies (the same bits).
fn transform_components(kernels: Kernels, planes: [&[f32]; NZ], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if kernels == Kernels::Avx512 && planes[0].len().is_multiple_of(L) {
        // SAFETY: Kernels::Avx512 comes from simd_kernels, which detected AVX-512F.
        unsafe { super::avx512::winograd3d_z_components(planes, out) };
        return;
    }
    z_components_for(kernels, planes, out);
}

/// [`z_sums`], by the AVX-512 kernel where it applies (the same bits).
fn sum_products(
    kernels: Kernels,
    products: &[f32],
    nt: usize,
    t0: usize,
    cout: usize,
    k: usize,
    sums: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if kernels == Kernels::Avx512 && cout.is_multiple_of(L) {
        let mut planes = sums.chunks_exact_mut(nt * TT * cout);
        let planes = core::array::from_fn(|_| planes.next().expect("four sums buffers"));
        let (first, stride) = ((t0 * TT + k) * cout, TT * cout);
        // SAFETY: Kernels::Avx512 comes from simd_kernels, which detected AVX-512F.
        unsafe { super::avx512::winograd3d_z_sums(products, cout, first, stride, planes) };
        return;
    }
    z_sums_for(kernels, products, nt, t0, cout, k, sums);
}

/// `Bᵀ` of F(4, 3) along z: the six input planes (one yx index) into six components
/// (`[z component][tile][in]`), [`L`] values at a time.
#[inline(always)]
fn z_components(planes: [&[f32]; NZ], out: &mut [f32]) {
    let n = planes[0].len();
    let mut parts = out.chunks_exact_mut(n);
    let mut outs: [&mut [f32]; NZ] =
        core::array::from_fn(|_| parts.next().expect("six components"));
    for i in (0..n).step_by(L) {
        let w = L.min(n - i);
        let d = core::array::from_fn(|j| Lanes::load(&planes[j][i..], w, false));
        for (o, v) in outs.iter_mut().zip(winograd::input_transform(d)) {
            v.store(&mut o[i..], w);
        }
    }
}

/// The products of each z component of `nt` tiles with its transformed weights (`tw`:
/// `[z component][in][out]` of one yx index), summed over the input channels, into `out`
/// (`[z component][tile][out]`).
fn z_products(
    kernels: Kernels,
    nt: usize,
    cin: usize,
    cout: usize,
    components: &[f32],
    tw: &[f32],
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(components.len(), NZ * nt * cin, "winograd3d: components");
        assert!(
            tw.len() >= NZ * cin * cout,
            "winograd3d: transformed weights"
        );
        assert_eq!(out.len(), NZ * nt * cout, "winograd3d: products");
        for zc in 0..NZ {
            let row = [components[zc * nt * cin..].as_ptr()];
            for ob in (0..cout).step_by(32) {
                // SAFETY: the instruction set was detected and cout % 32 == 0 (simd_kernels); the
                // asserts keep the component (read at t * cin + c for t < nt, c < cin), the
                // weights (read at c * cout + ob + 0..32 from zc * cin * cout) and the products
                // (written at t * cout + ob + 0..32 from zc * nt * cout) inside their slices.
                unsafe {
                    kernels.winograd_rows(
                        &row,
                        cin,
                        tw[zc * cin * cout + ob..].as_ptr(),
                        cout,
                        out.as_mut_ptr().add(zc * nt * cout + ob),
                        cout,
                        nt,
                        false,
                    );
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernels, nt, cin, cout, components, tw, out);
        unreachable!("SIMD Winograd kernel selected without SIMD support");
    }
}

/// `Aᵀ` of F(4, 3) along z: the six products of yx index `k` of the tiles from `t0` into the
/// sums of the four output planes (`sums`: four buffers `[tile][yx index][out]` of `nt` tiles),
/// [`L`] channels at a time.
#[inline(always)]
fn z_sums(products: &[f32], nt: usize, t0: usize, cout: usize, k: usize, sums: &mut [f32]) {
    let n = products.len() / NZ;
    let comps: [&[f32]; NZ] = core::array::from_fn(|zc| &products[zc * n..][..n]);
    let mut planes = sums.chunks_exact_mut(nt * TT * cout);
    let mut outs: [&mut [f32]; MZ] =
        core::array::from_fn(|_| planes.next().expect("four sums buffers"));
    for b in 0..n / cout {
        let at = ((t0 + b) * TT + k) * cout;
        for o in (0..cout).step_by(L) {
            let (w, i) = (L.min(cout - o), b * cout + o);
            let m = core::array::from_fn(|zc| Lanes::load(&comps[zc][i..], w, false));
            for (dst, v) in outs.iter_mut().zip(winograd::output_transform(m)) {
                v.store(&mut dst[at + o..], w);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn units_cover_every_interior_plane_once_in_order() {
        for (batch, sz, pad) in [(1, 33, 1), (2, 25, 1), (3, 6, 2), (1, 3, 1)] {
            let g = Padded::new(batch, [sz, 5, 5], pad);
            let units = Units::new(&g);
            let planes: Vec<usize> = (0..units.len())
                .flat_map(|u| {
                    let (z0, n) = units.get(u);
                    z0..z0 + n
                })
                .collect();
            let dz = sz + 2 * pad;
            let interior: Vec<usize> = (0..batch * dz)
                .filter(|q| (pad..pad + sz).contains(&(q % dz)))
                .collect();
            assert_eq!(planes, interior, "batch {batch}, z {sz}, pad {pad}");
        }
    }

    #[test]
    fn runs_are_contiguous_and_of_similar_work() {
        let units = Units::new(&Padded::new(1, [33, 5, 5], 1));
        assert_eq!(units.len(), 9);
        let starts: Vec<usize> = (0..=2).map(|th| units.start(th, 2)).collect();
        assert_eq!(starts.first(), Some(&0));
        assert_eq!(starts.last(), Some(&9));
        let work = |a: usize, b: usize| (a..b).map(|u| units.cost(u)).sum::<usize>();
        let (w0, w1) = (work(starts[0], starts[1]), work(starts[1], starts[2]));
        assert!(w0.abs_diff(w1) <= 16, "runs of work {w0} and {w1}");
        // More runs than units: some are empty, none is skipped.
        let many: Vec<usize> = (0..=16).map(|th| units.start(th, 16)).collect();
        assert_eq!((many[0], many[16]), (0, 9));
        assert!(many.windows(2).all(|w| w[0] <= w[1]));
    }
}
