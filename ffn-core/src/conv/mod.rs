//! 3D convolution with SAME zero padding, bias, and its two backward passes.
//!
//! # Shapes
//! - input `[batch, z, y, x, in]`, output `[batch, z, y, x, out]` (channels-last, see
//!   [`crate::tensor`]); SAME padding keeps the spatial size.
//! - weights `[kz, ky, kx, in, out]` (TensorFlow's layout, as stored in the flat parameter buffer of
//!   [`crate::model_spec`]), bias `[out]`. The kernel is cubic with an odd edge.
//!
//! # Implementations
//! - [`reference`]: direct loops, f64 accumulation, plain layout. Slow and obviously correct.
//! - [`fast`]: works on zero-padded buffers ([`crate::tensor::Padded`]). Because the layout is
//!   channels-last and padded, the `k * in` values of taps `(dz, dy, 0..k)` of consecutive voxels form a
//!   matrix with row stride `in` (a virtual im2col matrix that is never materialised): each conv is
//!   `k * k` GEMMs of depth `k * in` per output plane, accumulated in cache. A 1x1x1 conv is one plain
//!   GEMM. The input gradient is the same kernel run with flipped, transposed weights
//!   ([`fast::flip_weights`]); the weight gradient is a GEMM of the transposed virtual im2col matrix
//!   with the output gradient. Output planes are spread over threads ([`crate::parallel`]).
//! - On x86-64 with AVX2 and FMA, or AVX-512F ([`Simd`]: detected at run time with `std`; without
//!   `std` when the build enables the target features), convs with a multiple of 32
//!   output channels (forward and input gradient of the hidden layers) run a direct register-tiled
//!   kernel instead of the GEMMs: 3 (AVX2) or up to 12 (AVX-512) voxels x 32 channels of
//!   accumulators per tile, the weights of one tap pair kept in L1. Same arithmetic, tested against
//!   the reference like the GEMM path; AVX2 and AVX-512 give the same bits.
//!   The weight gradients accumulate in registers by the same tile shapes
//!   instead of GEMM calls, so a warm training step allocates nothing.
//! - [`winograd`]: 3x3x3 convs by Winograd F(4, 3) along x (forward, input gradient and weight
//!   gradient), 6 multiply-adds where the direct sum needs 12; its [`winograd::ConvAlgorithm`]
//!   chooses the network's algorithm. Tested against the reference with a tolerance scaled to the
//!   sum of absolute terms.
//! - [`winograd2d`]: 3x3x3 convs by Winograd F(4x4, 3x3) over y and x (36 multiply-adds where
//!   direct needs 144), forward and weight gradients, in inference and training with
//!   [`winograd::ConvAlgorithm::Winograd`]; the weight gradients under the default too.
//! - [`winograd3d`]: the forward 3x3x3 convs by F(4x4, 3x3) over y and x and F(4, 3) along z (2x
//!   fewer multiply-adds in the products than [`winograd2d`]) and, in training, the input
//!   gradients, with [`winograd::ConvAlgorithm::Winograd3d`] (the default).

/// `fn $name(kernels, args)`: calls the `#[inline(always)]` function `$inner` inlined into a
/// function compiled for the instruction set of `kernels`, so that the lane arithmetic of the
/// transforms uses the full vector width of the kernels that run.
macro_rules! compiled_for_kernels {
    ($name:ident($($arg:ident: $ty:ty),*) => $inner:ident) => {
        #[allow(clippy::too_many_arguments)]
        fn $name(kernels: $crate::conv::Kernels, $($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                fn avx2($($arg: $ty),*) {
                    $inner($($arg),*)
                }
                #[target_feature(enable = "avx512f,fma")]
                #[allow(clippy::too_many_arguments)]
                fn avx512($($arg: $ty),*) {
                    $inner($($arg),*)
                }
                // SAFETY: `kernels` comes from simd_kernels, which detected the instruction set.
                unsafe {
                    match kernels {
                        $crate::conv::Kernels::Avx2 => avx2($($arg),*),
                        $crate::conv::Kernels::Avx512 => avx512($($arg),*),
                    }
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                let _ = kernels;
                $inner($($arg),*)
            }
        }
    };
}

pub mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod bf16;
pub mod fast;
pub(crate) mod gemm;
pub mod reference;
mod simd;
pub mod winograd;
pub mod winograd2d;
pub mod winograd3d;

pub use simd::Simd;

#[cfg(test)]
mod bf16_tests;
#[cfg(test)]
mod tests;

/// Sizes of one convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv3dParams {
    /// Number of volumes.
    pub batch: usize,
    /// Spatial size `[z, y, x]` of input and output.
    pub size: [usize; 3],
    /// Kernel edge (odd: 1, 3, 5, ...).
    pub kernel: usize,
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
}

impl Conv3dParams {
    /// Interior voxels of all volumes.
    pub fn voxels(&self) -> usize {
        self.batch * self.size.iter().product::<usize>()
    }

    /// Length of a plain input buffer.
    pub fn input_len(&self) -> usize {
        self.voxels() * self.in_channels
    }

    /// Length of a plain output buffer (same spatial size: SAME padding).
    pub fn output_len(&self) -> usize {
        self.voxels() * self.out_channels
    }

    /// Output shape `[batch, z, y, x, out]`.
    pub fn output_shape(&self) -> [usize; 5] {
        let [z, y, x] = self.size;
        [self.batch, z, y, x, self.out_channels]
    }

    /// Number of weights (`k^3 * in * out`).
    pub fn weights_len(&self) -> usize {
        self.kernel.pow(3) * self.in_channels * self.out_channels
    }

    /// FLOPs of the forward pass (2 per multiply-add, zero-padded taps counted).
    pub fn forward_flops(&self) -> u64 {
        2 * self.voxels() as u64 * self.weights_len() as u64
    }

    /// Half the kernel edge: the border a SAME conv needs.
    pub fn half(&self) -> usize {
        self.kernel / 2
    }
}

/// The register-tiled SIMD kernels of one instruction set: the direct kernel of [`fast`], the
/// product kernel of [`winograd`] and the weight-gradient accumulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernels {
    /// [`avx2`]: AVX2 and FMA.
    Avx2,
    /// [`avx512`]: AVX-512F.
    Avx512,
}

/// The SIMD kernels that compute `cout` output channels when `simd` is asked for: the widest
/// this CPU runs up to `simd` ([`Simd::usable`]), when `cout` is a multiple of 32. `None`: the
/// portable code runs (other targets, other CPUs, other widths, or [`Simd::Portable`]).
pub(crate) fn simd_kernels(cout: usize, simd: Simd) -> Option<Kernels> {
    if !cfg!(target_arch = "x86_64") || !cout.is_multiple_of(32) {
        return None;
    }
    match simd.usable() {
        Simd::Portable => None,
        Simd::Avx2 => Some(Kernels::Avx2),
        Simd::Avx512 => Some(Kernels::Avx512),
    }
}

#[cfg(target_arch = "x86_64")]
impl Kernels {
    /// The direct rows of [`avx2::row`] or [`avx512::row`].
    ///
    /// # Safety
    /// `self` must come from [`simd_kernels`] for `cout`; the pointers as [`avx2::row`] says.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn row(
        self,
        inp_row0: *const f32,
        cin: usize,
        k: usize,
        tap_pair: impl Fn(usize, usize) -> usize,
        w: *const f32,
        cout: usize,
        out_row: *mut f32,
        nx: usize,
    ) {
        // SAFETY: the caller's contract; the instruction set was detected by simd_kernels.
        unsafe {
            match self {
                Kernels::Avx2 => avx2::row(inp_row0, cin, k, tap_pair, w, cout, out_row, nx),
                Kernels::Avx512 => avx512::row(inp_row0, cin, k, tap_pair, w, cout, out_row, nx),
            }
        }
    }

    /// The Winograd products of [`avx2::winograd_rows`] or [`avx512::winograd_rows`].
    ///
    /// # Safety
    /// `self` must come from [`simd_kernels`]; the pointers as [`avx2::winograd_rows`] says.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn winograd_rows(
        self,
        taps: &[*const f32],
        cin: usize,
        w: *const f32,
        w_rs: usize,
        sums: *mut f32,
        sums_rs: usize,
        nt: usize,
        accumulate: bool,
    ) {
        // SAFETY: the caller's contract; the instruction set was detected by simd_kernels.
        unsafe {
            match self {
                Kernels::Avx2 => {
                    avx2::winograd_rows(taps, cin, w, w_rs, sums, sums_rs, nt, accumulate)
                }
                Kernels::Avx512 => {
                    avx512::winograd_rows(taps, cin, w, w_rs, sums, sums_rs, nt, accumulate)
                }
            }
        }
    }
}

/// `dst[r][o] += Σ_kk lhs[r][kk] * rhs[kk][o]` (`m x n`, depth `k`, `dst` row stride `dst_rs`):
/// the accumulation of the weight gradients. The SIMD kernels (registers only, no allocation) run
/// when [`simd_kernels`] has them for `n` and `simd`; otherwise the GEMM of [`gemm`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn accumulate_products(
    simd: Simd,
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_rs: usize,
    lhs: gemm::View<'_>,
    rhs: gemm::View<'_>,
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(kernels) = simd_kernels(n, simd).filter(|_| rhs.cs == 1) {
        if m == 0 || k == 0 {
            return;
        }
        assert!(
            dst_rs >= n && (m - 1) * dst_rs + n <= dst.len(),
            "accumulate_products: dst"
        );
        let last =
            |rs: usize, cs: usize, rows: usize, cols: usize| (rows - 1) * rs + (cols - 1) * cs;
        assert!(
            last(lhs.rs, lhs.cs, m, k) < lhs.data.len(),
            "accumulate_products: lhs"
        );
        assert!(
            last(rhs.rs, 1, k, n) < rhs.data.len(),
            "accumulate_products: rhs"
        );
        let args = (lhs.data.as_ptr(), rhs.data.as_ptr(), dst.as_mut_ptr());
        // SAFETY: the instruction set was detected and n % 32 == 0 (simd_kernels); the asserts
        // bound every element of lhs (m x k at strides rs, cs), rhs (k x n, row stride rs) and dst
        // (m rows of n at stride dst_rs) that the kernel touches.
        unsafe {
            let (l, r, d) = args;
            match kernels {
                Kernels::Avx2 => {
                    avx2::accumulate_products(m, n, k, l, lhs.rs, lhs.cs, r, rhs.rs, d, dst_rs)
                }
                Kernels::Avx512 => {
                    avx512::accumulate_products(m, n, k, l, lhs.rs, lhs.cs, r, rhs.rs, d, dst_rs)
                }
            }
        }
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    gemm::sgemm(m, n, k, dst, dst_rs, true, lhs, rhs);
}

/// Per-thread partial sums of a weight gradient and of the bias gradient over the interior planes
/// of `g`, the scheme both weight-gradient implementations share. The planes are split into one
/// contiguous run per thread; for each plane (whole-buffer index `idx`, after the run's plane
/// `prev`), `plane_weights(idx, prev, part, scratch)` adds its weight terms into the thread's `wl`
/// weight values, with `scratch_len` values of scratch of the thread's own (kept from plane to
/// plane of the run; `scratch` grows to one such part per thread), and the plane's interior voxels
/// of `grad_out` (`cout` channels) are summed into the thread's bias values. Returns the partials,
/// `[thread][wl + cout]`; `partials` grows on first use and is reused afterwards. `g` must have at
/// least one interior plane and `wl + cout` must be positive.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plane_partials<'a>(
    g: &crate::tensor::Padded,
    cout: usize,
    grad_out: &[f32],
    wl: usize,
    partials: &'a mut alloc::vec::Vec<f32>,
    scratch: &mut alloc::vec::Vec<f32>,
    scratch_len: usize,
    plane_weights: impl Fn(usize, Option<usize>, &mut [f32], &mut [f32]) + Sync + Send,
) -> &'a [f32] {
    let plen = wl + cout;
    let (pad, [sz, sy, sx]) = (g.pad, g.size);
    let [dz, _, dx] = g.dims();
    let plane = g.plane_voxels();
    let units = g.batch * sz;
    let threads = crate::parallel::current_num_threads().clamp(1, units);
    if partials.len() < threads * plen {
        partials.resize(threads * plen, 0.0);
    }
    let parts = &mut partials[..threads * plen];
    let run = |t: usize, part: &mut [f32], scratch: &mut [f32]| {
        part.fill(0.0);
        let (pw, pb) = part.split_at_mut(wl);
        let mut prev = None;
        for u in t * units / threads..(t + 1) * units / threads {
            let idx = (u / sz) * dz + u % sz + pad;
            plane_weights(idx, prev, pw, scratch);
            prev = Some(idx);
            for y in pad..pad + sy {
                let a = (idx * plane + y * dx + pad) * cout;
                for v in grad_out[a..a + sx * cout].chunks_exact(cout) {
                    pb.iter_mut().zip(v).for_each(|(b, v)| *b += v);
                }
            }
        }
    };
    if scratch_len == 0 {
        crate::parallel::for_each_chunk_mut(parts, plen, |t, part| run(t, part, &mut []));
    } else {
        if scratch.len() < threads * scratch_len {
            scratch.resize(threads * scratch_len, 0.0);
        }
        let scratch = &mut scratch[..threads * scratch_len];
        crate::parallel::for_each_chunk_pair_mut(parts, plen, scratch, scratch_len, run);
    }
    &partials[..threads * plen]
}
