//! 3x3x3 convolution with one-dimensional Winograd transforms F(4, 3) along x: the cheaper
//! arithmetic path of the forward pass, the input gradient and the weight gradient.
//!
//! # The transform
//! Along x, four outputs of a 3-tap correlation need 12 multiplies directly. Winograd's minimal
//! filtering algorithm F(4, 3) (interpolation points 0, 1, -1, 2, -2 and infinity; Lavin & Gray
//! 2016) gets them from 6 products of transformed values: `y = Aᵀ [(G g) ⊙ (Bᵀ d)]` for the six
//! inputs `d` under a tile of four outputs. The products are summed over the nine `(dz, dy)` tap
//! pairs and all input channels *in the transformed domain*, so a 3x3x3 conv becomes, per tile and
//! per transformed index `i < 6`, one dot product of depth `9 * in` for every output channel:
//! 6 / 12 of the direct multiply-adds. Rows whose length is not a multiple of 4 compute a partial
//! last tile (33 voxels: 9 tiles of 4), so the saving on a 33-voxel row is 1.83x. The weight
//! gradient is the transposed algorithm, `∂L/∂g = Gᵀ [(A ∂L/∂y) ⊙ (Bᵀ d)]`, with the products
//! summed over all tiles, rows and planes before `Gᵀ`.
//!
//! # Accuracy
//! The transforms multiply by at most 8 (and by 1/24 on the weights), so results differ from the
//! direct sum by rounding: the tests bound the difference against the f64 reference at `2e-5`
//! relative to the magnitude of the terms. [`ConvAlgorithm::Direct`] keeps the plain arithmetic
//! for users who want it.
//!
//! # Implementation
//! 1. The input is transformed once per call into `[plane][i][row][tile][in]` (every padded row);
//!    the weights into `[i][tz][ty][in][out]` ([`transform_weights`]).
//! 2. For each output plane, `i`, 32-channel block and `tz`, the products of every row and tile
//!    are accumulated over the three `ty` tap rows and the input channels: on x86-64 with AVX2 and
//!    FMA or AVX-512F by a register-tiled kernel (3 or up to 12 tiles x 32 channels; the 12 KiB of
//!    weights stay in L1 across the plane), elsewhere by portable loops.
//! 3. The inverse transform turns the six sums of each tile into four outputs, adds the bias,
//!    applies ReLU and adds a residual ([`Fusion`]).
//! 4. Weight gradients: the output gradient is transformed by `A`, and per plane, `i` and tap row
//!    one product of depth `rows x tiles` accumulates into per-thread partial sums.
//!
//! Every buffer lives in a [`WinogradScratch`] that the caller keeps: warm calls allocate nothing.

use super::gemm::View;
use super::{Conv3dParams, Kernels, Simd};
use crate::parallel;
use crate::tensor::Padded;
use alloc::vec::Vec;
use core::ops::{Add, Mul, Sub};

/// How the 3x3x3 convolutions of the forward pass and of the input gradient are computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConvAlgorithm {
    /// Winograd for 3x3x3 kernels where a SIMD kernel runs it ([`preferred`]: AVX2 and FMA or
    /// AVX-512F, multiples of 32 channels): the forward convs of inference by F(4x4, 3x3) over y
    /// and x ([`super::winograd2d`], 4x fewer multiply-adds than direct), in training too, and
    /// the input and weight gradients likewise; rounding differences of order 1e-6 relative.
    /// Other convs run directly. Reproduces Google's FIB-25 segmentation voxel for voxel.
    Winograd,
    /// Direct summation (register-tiled SIMD kernel or GEMMs), every multiply-add performed.
    Direct,
    /// Winograd F(4, 3) along x for every conv that [`ConvAlgorithm::Winograd`] computes by
    /// Winograd, inference included: the algorithm of ffn-rs before F(4x4, 3x3), kept selectable.
    Winograd1d,
    /// [`ConvAlgorithm::Winograd`], but the 3x3x3 convs of the inference forward pass with 32k
    /// input and output channels computed directly from inputs and weights rounded to bfloat16,
    /// summed in float32 ([`super::bf16`]): AMX tile products where the CPU has them
    /// ([`super::amx::available`]), else an emulation on the float32 direct kernels (slower than
    /// float32). Opt-in: segmentations differ from float32's. Training (forward and backward)
    /// computes as [`ConvAlgorithm::Winograd`].
    Bf16,
    /// The default: [`ConvAlgorithm::Winograd`], but the 3x3x3 forward convs and input gradients
    /// by Winograd over all three axes ([`super::winograd3d`]: F(4x4, 3x3) over y and x, F(4, 3)
    /// along z; 2x fewer multiply-adds in the products than F(4x4, 3x3)); the weight gradients as
    /// [`ConvAlgorithm::Winograd`]'s. Its rounding differs from [`ConvAlgorithm::Winograd`]'s
    /// (1.35e-5 of the magnitude at worst in the tests, against 1.9e-6): Google's FIB-25
    /// segmentation within adapted Rand error 2.2e-6.
    #[default]
    Winograd3d,
}

impl ConvAlgorithm {
    /// The name used on the command line (`winograd`, `direct`, `winograd1d`, `bf16`,
    /// `winograd3d`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Winograd => "winograd",
            Self::Direct => "direct",
            Self::Winograd1d => "winograd1d",
            Self::Bf16 => "bf16",
            Self::Winograd3d => "winograd3d",
        }
    }

    /// Whether the forward convs run by F(4x4, 3x3) (where [`ConvAlgorithm::Bf16`] and
    /// [`ConvAlgorithm::Winograd3d`] do not apply) and the weight gradients by F(4x4, 3x3)
    /// ([`ConvAlgorithm::Winograd`], [`ConvAlgorithm::Bf16`], [`ConvAlgorithm::Winograd3d`]).
    pub fn two_axes(self) -> bool {
        matches!(self, Self::Winograd | Self::Bf16 | Self::Winograd3d)
    }

    /// Parses [`ConvAlgorithm::name`]; `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "winograd" => Some(Self::Winograd),
            "direct" => Some(Self::Direct),
            "winograd1d" => Some(Self::Winograd1d),
            "bf16" => Some(Self::Bf16),
            "winograd3d" => Some(Self::Winograd3d),
            _ => None,
        }
    }
}

/// Outputs per tile.
pub(super) const M: usize = 4;
/// Transformed values per tile (`M + 3 - 1`).
pub(super) const T: usize = 6;

/// Buffers reused between calls: the transformed input (of every plane for F(4, 3) forward, the
/// per-thread rings of input and output-gradient planes of the weight gradient), the transformed
/// weights, and the per-thread partial sums of the weight gradient. They grow on first use.
#[derive(Clone, Debug, Default)]
pub struct WinogradScratch {
    input: Vec<f32>,
    weights: Vec<f32>,
    partials: Vec<f32>,
    /// Per-thread sums of one output plane (forward).
    sums: Vec<f32>,
    /// One voxel of zeros (reads beyond a row).
    zeros: Vec<f32>,
}

impl WinogradScratch {
    /// Empty buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// The buffers of a weight gradient, for [`super::winograd2d`]: the per-thread partial
    /// sums, the per-thread rings of transformed planes.
    pub(super) fn gradient_buffers(&mut self) -> (&mut Vec<f32>, &mut Vec<f32>) {
        (&mut self.partials, &mut self.input)
    }

    /// The buffers of the bf16 precision ([`super::bf16`]): the rounded input (emulation), the
    /// per-thread rings of bfloat16 planes (AMX).
    pub(super) fn bf16_buffers(&mut self) -> (&mut Vec<f32>, &mut Vec<f32>) {
        (&mut self.input, &mut self.sums)
    }

    /// The buffers of a forward pass, for [`super::winograd2d`].
    pub(super) fn buffers(&mut self) -> ForwardBuffers<'_> {
        ForwardBuffers {
            weights: &mut self.weights,
            sums: &mut self.sums,
        }
    }
}

/// The buffers of [`WinogradScratch`] that a forward pass uses.
pub(super) struct ForwardBuffers<'a> {
    /// Transformed weights.
    pub weights: &'a mut Vec<f32>,
    /// Per-thread sums of one output plane.
    pub sums: &'a mut Vec<f32>,
}

/// Whether [`forward`] computes this conv (3x3x3 kernel, border at least 1).
pub fn supports(p: &Conv3dParams) -> bool {
    p.kernel == 3
}

/// Whether Winograd is the faster way to compute this conv here: a 3x3x3 kernel and an output
/// width that the SIMD product kernels of `simd` take (AVX2 or AVX-512, a multiple of 32 channels). The
/// portable loops are correct for every width but slower than the direct GEMM path, so
/// [`ConvAlgorithm::Winograd`] computes the other convs directly.
pub fn preferred(p: &Conv3dParams, simd: Simd) -> bool {
    supports(p) && super::simd_kernels(p.out_channels, simd).is_some()
}

/// The checks every entry point makes: a 3x3x3 kernel, the geometry of `p` with a border of at
/// least 1, and a padded input of `p.in_channels`.
pub(super) fn check(p: &Conv3dParams, g: &Padded, input: &[f32]) {
    assert!(
        supports(p),
        "winograd: kernel must be 3, found {}",
        p.kernel
    );
    assert_eq!(
        (p.batch, p.size),
        (g.batch, g.size),
        "winograd: geometry does not match the conv"
    );
    assert!(g.pad >= 1, "winograd: border must be at least 1");
    assert_eq!(
        input.len(),
        g.len(p.in_channels),
        "winograd: padded input length"
    );
}

/// Tiles per row of `sx` voxels.
pub(super) fn tiles(sx: usize) -> usize {
    sx.div_ceil(M)
}

/// What the input and output transforms compute on: `f32`, or a block of channels of
/// [`super::winograd2d`] (the same expressions, so the same roundings per value).
pub(super) trait Value: Copy + Add<Output = Self> + Sub<Output = Self> {}

impl<V: Copy + Add<Output = V> + Sub<Output = V>> Value for V {}

/// `Bᵀ d` for six inputs.
#[inline(always)]
pub(super) fn input_transform<V: Value>(d: [V; T]) -> [V; T]
where
    f32: Mul<V, Output = V>,
{
    [
        4.0 * d[0] - 5.0 * d[2] + d[4],
        -4.0 * d[1] - 4.0 * d[2] + d[3] + d[4],
        4.0 * d[1] - 4.0 * d[2] - d[3] + d[4],
        -2.0 * d[1] - d[2] + 2.0 * d[3] + d[4],
        2.0 * d[1] - d[2] - 2.0 * d[3] + d[4],
        4.0 * d[1] - 5.0 * d[3] + d[5],
    ]
}

/// `G g` for three taps.
#[inline(always)]
pub(super) fn weight_transform(g: [f32; 3]) -> [f32; T] {
    let (a, b, c) = (g[0], g[1], g[2]);
    [
        a / 4.0,
        -(a + b + c) / 6.0,
        -(a - b + c) / 6.0,
        a / 24.0 + b / 12.0 + c / 6.0,
        a / 24.0 - b / 12.0 + c / 6.0,
        c,
    ]
}

/// `Aᵀ m`: four outputs from six sums.
#[inline(always)]
pub(super) fn output_transform<V: Value>(m: [V; T]) -> [V; M]
where
    f32: Mul<V, Output = V>,
{
    let (s12, d12) = (m[1] + m[2], m[1] - m[2]);
    let (s34, d34) = (m[3] + m[4], m[3] - m[4]);
    [
        m[0] + s12 + s34,
        d12 + 2.0 * d34,
        s12 + 4.0 * s34,
        d12 + 8.0 * d34 + m[5],
    ]
}

/// `A g` for the gradients of four outputs (the transpose of [`output_transform`]).
#[inline(always)]
pub(super) fn grad_transform<V: Value>(g: [V; M]) -> [V; T]
where
    f32: Mul<V, Output = V>,
{
    [
        g[0],
        g[0] + g[1] + g[2] + g[3],
        g[0] - g[1] + g[2] - g[3],
        g[0] + 2.0 * g[1] + 4.0 * g[2] + 8.0 * g[3],
        g[0] - 2.0 * g[1] + 4.0 * g[2] - 8.0 * g[3],
        g[3],
    ]
}

/// `Gᵀ p`: the gradients of three taps from six transformed products (the transpose of
/// [`weight_transform`]).
#[inline(always)]
pub(super) fn tap_grads(p: [f32; T]) -> [f32; 3] {
    [
        p[0] / 4.0 - (p[1] + p[2]) / 6.0 + (p[3] + p[4]) / 24.0,
        (p[2] - p[1]) / 6.0 + (p[3] - p[4]) / 12.0,
        (p[3] + p[4] - p[1] - p[2]) / 6.0 + p[5],
    ]
}

/// Weights `[3, 3, 3, in, out]` into `[i][tz][ty][in][out]` (`6 * 9 * in * out` values).
///
/// # Panics
/// When `p.kernel != 3` or a length does not match.
pub fn transform_weights(p: &Conv3dParams, w: &[f32], out: &mut [f32]) {
    assert_eq!(p.kernel, 3, "winograd: kernel must be 3");
    let (ci, co) = (p.in_channels, p.out_channels);
    assert_eq!(w.len(), p.weights_len(), "winograd: weights length");
    assert_eq!(
        out.len(),
        T * 9 * ci * co,
        "winograd: transformed weights length"
    );
    let at = |q: usize, x: usize, c: usize, o: usize| w[((q * 3 + x) * ci + c) * co + o];
    for q in 0..9 {
        for c in 0..ci {
            for o in 0..co {
                let u = weight_transform([at(q, 0, c, o), at(q, 1, c, o), at(q, 2, c, o)]);
                for (i, v) in u.into_iter().enumerate() {
                    out[((i * 9 + q) * ci + c) * co + o] = v;
                }
            }
        }
    }
}

/// Every padded row of `data` (`g.len(c)`) into `[plane][i][row][tile][c]` by `f`, tile `t` reading
/// the `N` voxels from `x0 + 4t` of its row (voxels beyond the buffer's row count as zero). The
/// arithmetic runs over the channels of `N` voxels at a time (contiguous: vectorised).
#[allow(clippy::too_many_arguments)]
fn transform_rows<const N: usize>(
    g: &Padded,
    c: usize,
    data: &[f32],
    x0: usize,
    f: impl Fn([f32; N]) -> [f32; T] + Sync,
    zeros: &[f32],
    out: &mut [f32],
) {
    let [dz, dy, _] = g.dims();
    let nt = tiles(g.size[2]);
    let plane_len = T * dy * nt * c;
    assert_eq!(
        out.len(),
        g.batch * dz * plane_len,
        "winograd: transformed length"
    );
    assert_eq!(data.len(), g.len(c), "winograd: padded buffer length");
    assert!(zeros.len() >= c, "winograd: zero voxel");
    parallel::for_each_chunk_mut(out, plane_len, |plane, chunk| {
        transform_plane_rows::<N>(g, c, data, plane, x0, &f, zeros, chunk);
    });
}

/// Plane `plane` of [`transform_rows`] into its `chunk` (`[i][row][tile][c]`).
#[allow(clippy::too_many_arguments)]
fn transform_plane_rows<const N: usize>(
    g: &Padded,
    c: usize,
    data: &[f32],
    plane: usize,
    x0: usize,
    f: &impl Fn([f32; N]) -> [f32; T],
    zeros: &[f32],
    chunk: &mut [f32],
) {
    let [_, dy, dx] = g.dims();
    let nt = tiles(g.size[2]);
    assert_eq!(chunk.len(), T * dy * nt * c, "winograd: transformed plane");
    assert!(zeros.len() >= c, "winograd: zero voxel");
    {
        let mut it = chunk.chunks_exact_mut(dy * nt * c);
        let mut parts: [&mut [f32]; T] =
            core::array::from_fn(|_| it.next().expect("six transformed planes"));
        for y in 0..dy {
            let row = &data[(plane * dy + y) * dx * c..][..dx * c];
            for t in 0..nt {
                let d: [&[f32]; N] = core::array::from_fn(|s| {
                    let x = x0 + M * t + s;
                    if x < dx {
                        &row[x * c..(x + 1) * c]
                    } else {
                        &zeros[..c]
                    }
                });
                let at = (y * nt + t) * c;
                let mut dst = parts.each_mut().map(|part| &mut part[at..at + c]);
                for ch in 0..c {
                    let u = f(core::array::from_fn(|s| d[s][ch]));
                    for (part, u) in dst.iter_mut().zip(u) {
                        part[ch] = u;
                    }
                }
            }
        }
    }
}

/// Plane `plane` of the input of a conv, transformed by `Bᵀ` into `out` (`[i][row][tile][cin]`)
/// for [`backward_weights`].
fn transform_input_plane(
    g: &Padded,
    cin: usize,
    input: &[f32],
    plane: usize,
    zeros: &[f32],
    out: &mut [f32],
) {
    let f = input_transform::<f32>;
    transform_plane_rows::<T>(g, cin, input, plane, g.pad - 1, &f, zeros, out);
}

/// The input of a conv, transformed by `Bᵀ` for [`forward`].
/// With `relu`, the input is read through a ReLU (the fused activation of [`Fusion::relu_input`]).
fn transform_input(
    g: &Padded,
    cin: usize,
    input: &[f32],
    relu: bool,
    zeros: &[f32],
    out: &mut [f32],
) {
    let x0 = g.pad - 1;
    if relu {
        let f = |d: [f32; T]| input_transform(d.map(|v| v.max(0.0)));
        transform_rows::<T>(g, cin, input, x0, f, zeros, out);
    } else {
        transform_rows::<T>(g, cin, input, x0, input_transform::<f32>, zeros, out);
    }
}

/// Element-wise work fused into [`forward_fused`], applied in this order: ReLU of the input as it
/// is read, the conv, the bias, ReLU, the residual.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fusion<'a> {
    /// Read the input through a ReLU (`conv(relu(input))`), saving a separate pass.
    pub relu_input: bool,
    /// Bias `[out]` added to every output voxel.
    pub bias: Option<&'a [f32]>,
    /// ReLU after the bias.
    pub relu: bool,
    /// A padded buffer like `out`, added last (a residual connection).
    pub residual: Option<&'a [f32]>,
}

/// `out = act(conv(input, weights) + bias)` by Winograd F(4, 3) along x; without `bias`, no bias.
///
/// Buffers as in [`super::fast::forward`]: padded `input` (`g.len(in)`, zero border), padded `out`
/// (`g.len(out)`, written with a zero border), weights `[3, 3, 3, in, out]`.
///
/// # Panics
/// When the kernel is not 3, the border is narrower than 1, or a length or the geometry does not
/// match `p`.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    simd: Simd,
    p: &Conv3dParams,
    g: &Padded,
    input: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    relu: bool,
    out: &mut [f32],
    scratch: &mut WinogradScratch,
) {
    let fusion = Fusion {
        bias,
        relu,
        ..Fusion::default()
    };
    forward_fused(simd, p, g, input, weights, fusion, out, scratch);
}

/// [`forward`] with the element-wise work of `fusion` done in the same passes:
/// `out = residual + act(conv(relu?(input), weights) + bias)`.
///
/// # Panics
/// As [`forward`]; also when the residual's length differs from `out`'s.
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
    let (bias, relu) = (fusion.bias, fusion.relu);
    check_fused(p, g, input, fusion, out);
    let (cin, cout) = (p.in_channels, p.out_channels);
    if out.is_empty() || cout == 0 {
        return;
    }
    if p.voxels() == 0 || cin == 0 {
        out.fill(0.0);
        if let Some(b) = bias.filter(|_| p.voxels() > 0) {
            fill_interior(g, cout, b, relu, out);
        }
        if let Some(r) = fusion.residual {
            out.iter_mut().zip(r).for_each(|(o, r)| *o += r);
        }
        return;
    }
    let [dz, dy, dx] = g.dims();
    let nt = tiles(g.size[2]);
    let row_len = nt * cin;
    let istride = dy * row_len;
    scratch.input.resize(g.batch * dz * T * istride, 0.0);
    scratch.weights.resize(T * 9 * cin * cout, 0.0);
    scratch.zeros.resize(scratch.zeros.len().max(cin), 0.0);
    transform_input(
        g,
        cin,
        input,
        fusion.relu_input,
        &scratch.zeros,
        &mut scratch.input,
    );
    transform_weights(p, weights, &mut scratch.weights);
    let (tin, tw) = (&scratch.input[..], &scratch.weights[..]);
    let (pad, [_, sy, sx]) = (g.pad, g.size);
    let plane = g.plane_voxels();
    let kernels = super::simd_kernels(cout, simd);
    let plane_sums = nt * T * cout;
    for_each_output_plane(
        g,
        cout,
        out,
        &mut scratch.sums,
        sy * plane_sums,
        |idx, _, zp, chunk, sums| {
            // Offset of tap row (tz, ty) of output row y (padded coordinates), transformed index 0.
            let tap_row = |tz: usize, ty: usize, y: usize| {
                (idx + tz - 1) * T * istride + (y + ty - 1) * row_len
            };
            if let Some(kernels) = kernels {
                let rows = PlaneRows {
                    nt,
                    istride,
                    pad,
                    sy,
                };
                simd_plane(kernels, tin, tw, cin, cout, rows, tap_row, sums);
            } else {
                for (r, sums) in sums.chunks_exact_mut(plane_sums).enumerate() {
                    let taps = core::array::from_fn(|q| tap_row(q / 3, q % 3, pad + r));
                    portable_row(tin, &taps, istride, tw, cin, cout, nt, sums);
                }
            }
            for (r, sums) in sums.chunks_exact(plane_sums).enumerate() {
                let at = ((pad + r) * dx + pad) * cout;
                let dst = &mut chunk[at..][..sx * cout];
                let residual = fusion
                    .residual
                    .map(|res| &res[idx * plane * cout + at..][..sx * cout]);
                match kernels {
                    Some(k) => inverse_row_for(k, sums, cout, sx, bias, relu, residual, dst),
                    None => inverse_row(sums, cout, sx, bias, relu, residual, dst),
                }
            }
            g.zero_plane_border(chunk, zp, cout);
        },
    );
}

/// The checks of a fused forward pass: [`check`], then the lengths of `out`, the bias and the
/// residual.
pub(super) fn check_fused(
    p: &Conv3dParams,
    g: &Padded,
    input: &[f32],
    fusion: Fusion<'_>,
    out: &[f32],
) {
    check(p, g, input);
    assert_eq!(
        out.len(),
        g.len(p.out_channels),
        "winograd: padded output length"
    );
    if let Some(b) = fusion.bias {
        assert_eq!(b.len(), p.out_channels, "winograd: bias length");
    }
    if let Some(r) = fusion.residual {
        assert_eq!(r.len(), out.len(), "winograd: residual length");
    }
}

/// Calls `f(idx, prev, zp, chunk, sums)` for every interior plane of `out` (padded, `cout`
/// channels; `idx` its whole-buffer plane index, `prev` the interior plane the same thread
/// computed before it, `zp` its z within its volume) and zero-fills the border planes. Each
/// thread takes a contiguous run of planes and keeps `sums_len` values of its own from plane to
/// plane (`sums` grows to one such buffer per thread).
pub(super) fn for_each_output_plane(
    g: &Padded,
    cout: usize,
    out: &mut [f32],
    sums: &mut Vec<f32>,
    sums_len: usize,
    f: impl Fn(usize, Option<usize>, usize, &mut [f32], &mut [f32]) + Sync + Send,
) {
    let dz = g.dims()[0];
    let plane = g.plane_voxels();
    let planes = g.batch * dz;
    let threads = parallel::current_num_threads().clamp(1, planes);
    let per = planes.div_ceil(threads);
    sums.resize(threads * sums_len, 0.0);
    parallel::for_each_chunk_pair_mut(out, per * plane * cout, sums, sums_len, |th, run, sums| {
        let mut prev = None;
        for (k, chunk) in run.chunks_exact_mut(plane * cout).enumerate() {
            let idx = th * per + k;
            let zp = idx % dz;
            if zp < g.pad || zp >= g.pad + g.size[0] {
                chunk.fill(0.0);
            } else {
                f(idx, prev, zp, chunk, sums);
                prev = Some(idx);
            }
        }
    });
}

/// The input planes to transform before output plane `idx` when a thread keeps the transformed
/// tap planes `idx - 1`, `idx`, `idx + 1` in a ring of three (plane `q` in slot `q % 3`) and the
/// previous plane of its run was `prev`: all three at the start of a run or after a jump, the
/// newest one alone after the plane before.
pub(super) fn ring_planes(idx: usize, prev: Option<usize>) -> core::ops::RangeInclusive<usize> {
    prev.map_or(idx - 1, |p| (p + 2).max(idx - 1))..=idx + 1
}

/// Interior of `out` set to `act(bias)` (the conv of an empty input).
fn fill_interior(g: &Padded, cout: usize, bias: &[f32], relu: bool, out: &mut [f32]) {
    let [_, dy, dx] = g.dims();
    let pad = g.pad;
    for b in 0..g.batch {
        for z in 0..g.size[0] {
            for y in 0..g.size[1] {
                let v0 = g.voxel(b, z + pad, y + pad, pad);
                debug_assert!(v0 < g.voxels() && dy > 0 && dx > 0);
                for v in out[v0 * cout..(v0 + g.size[2]) * cout].chunks_exact_mut(cout) {
                    for (o, b) in v.iter_mut().zip(bias) {
                        *o = if relu { b.max(0.0) } else { *b };
                    }
                }
            }
        }
    }
}

/// Six sums per tile into four outputs of `dst` (`sx` voxels x `cout`), then bias, ReLU and the
/// matching row of the residual, in that order. Each pass runs over whole channel rows of slices
/// of known length, so the compiler vectorises it.
#[inline(always)]
fn inverse_row(
    sums: &[f32],
    cout: usize,
    sx: usize,
    bias: Option<&[f32]>,
    relu: bool,
    residual: Option<&[f32]>,
    dst: &mut [f32],
) {
    let dst = &mut dst[..sx * cout];
    for (t, tile) in sums.chunks_exact(T * cout).enumerate() {
        let m: [&[f32]; T] = core::array::from_fn(|i| &tile[i * cout..(i + 1) * cout]);
        let valid = (sx - M * t).min(M);
        let run = &mut dst[M * t * cout..(M * t + valid) * cout];
        if valid == M {
            let (y0, rest) = run.split_at_mut(cout);
            let (y1, rest) = rest.split_at_mut(cout);
            let (y2, y3) = rest.split_at_mut(cout);
            let [m0, m1, m2, m3, m4, m5] = m;
            for o in 0..cout {
                let y = output_transform([m0[o], m1[o], m2[o], m3[o], m4[o], m5[o]]);
                (y0[o], y1[o], y2[o], y3[o]) = (y[0], y[1], y[2], y[3]);
            }
        } else {
            for o in 0..cout {
                let y = output_transform(core::array::from_fn(|i| m[i][o]));
                for (j, v) in y.into_iter().take(valid).enumerate() {
                    run[j * cout + o] = v;
                }
            }
        }
    }
    if let Some(b) = bias {
        for v in dst.chunks_exact_mut(cout) {
            v.iter_mut().zip(b).for_each(|(v, b)| *v += b);
        }
    }
    if relu {
        dst.iter_mut().for_each(|v| *v = v.max(0.0));
    }
    if let Some(res) = residual {
        dst.iter_mut().zip(res).for_each(|(o, r)| *o += r);
    }
}

compiled_for_kernels!(inverse_row_for(
    sums: &[f32],
    cout: usize,
    sx: usize,
    bias: Option<&[f32]>,
    relu: bool,
    residual: Option<&[f32]>,
    dst: &mut [f32]
) => inverse_row);

/// `sums[t][i][o] = Σ_q Σ_c tin[taps[q] + i*istride + t*cin + c] * tw[((i*9 + q)*cin + c)*cout + o]`.
#[allow(clippy::too_many_arguments)]
fn portable_row(
    tin: &[f32],
    taps: &[usize; 9],
    istride: usize,
    tw: &[f32],
    cin: usize,
    cout: usize,
    nt: usize,
    sums: &mut [f32],
) {
    sums.fill(0.0);
    for t in 0..nt {
        for i in 0..T {
            let acc = &mut sums[(t * T + i) * cout..][..cout];
            for (q, &tap) in taps.iter().enumerate() {
                let v = &tin[tap + i * istride + t * cin..][..cin];
                let w = &tw[(i * 9 + q) * cin * cout..][..cin * cout];
                for (&v, wrow) in v.iter().zip(w.chunks_exact(cout)) {
                    acc.iter_mut().zip(wrow).for_each(|(a, w)| *a += v * w);
                }
            }
        }
    }
}

/// The row geometry of one plane of transformed input: `nt` tiles per row, `istride` values
/// between transformed indices, `sy` interior rows from row `pad`.
#[derive(Clone, Copy)]
struct PlaneRows {
    nt: usize,
    istride: usize,
    pad: usize,
    sy: usize,
}

/// The sums of all `sy` output rows of one plane (`[row][tile][i][out]`) with the SIMD kernels
/// `kernels` (from [`super::simd_kernels`]). For every transformed index `i`, 32-channel block and `tz`, the
/// weights of the three tap rows `ty` (`3 * cin * 32` values, 12 KiB for 32 channels) stay in L1
/// while every row of the plane accumulates through them.
#[allow(clippy::too_many_arguments)]
fn simd_plane(
    kernels: Kernels,
    tin: &[f32],
    tw: &[f32],
    cin: usize,
    cout: usize,
    rows: PlaneRows,
    tap_row: impl Fn(usize, usize, usize) -> usize,
    sums: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        let PlaneRows {
            nt,
            istride,
            pad,
            sy,
        } = rows;
        // From a tap row's offset (index 0), the kernel reads up to index 5's row of nt x cin.
        let span = (T - 1) * istride + nt * cin;
        let plane_sums = nt * T * cout;
        assert_eq!(
            tw.len(),
            T * 9 * cin * cout,
            "winograd: transformed weights"
        );
        assert_eq!(sums.len(), sy * plane_sums, "winograd: plane sums");
        for y in pad..pad + sy {
            for tz in 0..3 {
                for ty in 0..3 {
                    assert!(tap_row(tz, ty, y) + span <= tin.len(), "winograd: tap rows");
                }
            }
        }
        for i in 0..T {
            for ob in (0..cout).step_by(super::avx2::BLOCK) {
                for tz in 0..3 {
                    let w = tw[((i * 9 + tz * 3) * cin) * cout + ob..].as_ptr();
                    for r in 0..sy {
                        let taps: [*const f32; 3] = core::array::from_fn(|ty| {
                            tin[tap_row(tz, ty, pad + r) + i * istride..].as_ptr()
                        });
                        // SAFETY: the instruction set was detected and cout % 32 == 0 (simd_kernels);
                        // the asserts above keep every tap row (the 6 transformed rows of nt x cin
                        // from its offset), the weights (6 x 9 x cin x cout) and the sums inside
                        // their slices; the kernel reads nt x cin values of the tap row at index i,
                        // 3 x cin weight rows of 32 from (i * 9 + tz * 3) * cin * cout + ob, and
                        // writes nt rows of 32 sums at stride 6 * cout from row r, index i, block ob.
                        unsafe {
                            kernels.winograd_rows(
                                &taps,
                                cin,
                                w,
                                cout,
                                sums.as_mut_ptr().add(r * plane_sums + i * cout + ob),
                                T * cout,
                                nt,
                                tz > 0,
                            );
                        }
                    }
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernels, tin, tw, cin, cout, rows, tap_row, sums);
        unreachable!("SIMD Winograd kernel selected without SIMD support");
    }
}

/// The checks of [`check`] and the lengths of a weight gradient's buffers.
///
/// # Panics
/// When one does not match `p` and `g`.
pub(super) fn check_gradients(
    p: &Conv3dParams,
    g: &Padded,
    input: &[f32],
    grad_out: &[f32],
    grad_w: &[f32],
    grad_b: &[f32],
) {
    check(p, g, input);
    let cout = p.out_channels;
    assert_eq!(
        grad_out.len(),
        g.len(cout),
        "winograd: padded output gradient length"
    );
    assert_eq!(
        grad_w.len(),
        p.weights_len(),
        "winograd: weight gradient length"
    );
    assert_eq!(grad_b.len(), cout, "winograd: bias gradient length");
}

/// Weight and bias gradients (overwritten) by Winograd F(4, 3) along x: `∂L/∂g = Gᵀ [(A ∂L/∂y) ⊙
/// (Bᵀ d)]` per tile, the products summed over all tiles, rows and planes in the transformed
/// domain by GEMMs of depth `rows x tiles` (one per transformed index and `(dz, dy)` tap row).
///
/// Buffers as in [`super::fast::backward_weights`]: padded `input` and `grad_out` (zero border).
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
    check_gradients(p, g, input, grad_out, grad_w, grad_b);
    let (cin, cout) = (p.in_channels, p.out_channels);
    grad_w.fill(0.0);
    grad_b.fill(0.0);
    if p.voxels() == 0 || cin == 0 || cout == 0 {
        return;
    }
    let dy = g.dims()[1];
    let nt = tiles(g.size[2]);
    let (pad, sy) = (g.pad, g.size[1]);
    let (rin, rout) = (nt * cin, nt * cout);
    let (iin, iout) = (dy * rin, dy * rout);
    let (lin, lgrad) = (T * iin, T * iout);
    scratch
        .zeros
        .resize(scratch.zeros.len().max(cin.max(cout)), 0.0);
    let wl = T * 9 * cin * cout;
    let plen = wl + cout;
    let zeros = &scratch.zeros;
    // Per thread: the transformed input planes idx - 1, idx, idx + 1 in a ring of three (plane q
    // in slot q % 3) and the transformed gradient of plane idx, made as the thread's run of
    // planes reaches them, so that they are read back from the caches.
    let (partials, ring) = (&mut scratch.partials, &mut scratch.input);
    let parts = super::plane_partials(
        g,
        cout,
        grad_out,
        wl,
        partials,
        ring,
        3 * lin + lgrad,
        |idx, prev, pw, ring| {
            let (tin, tgrad) = ring.split_at_mut(3 * lin);
            for q in ring_planes(idx, prev) {
                transform_input_plane(g, cin, input, q, zeros, &mut tin[(q % 3) * lin..][..lin]);
            }
            transform_plane_rows::<M>(
                g,
                cout,
                grad_out,
                idx,
                pad,
                &grad_transform::<f32>,
                zeros,
                tgrad,
            );
            for i in 0..T {
                let rhs = View {
                    data: &tgrad[i * iout + pad * rout..][..sy * rout],
                    rs: cout,
                    cs: 1,
                };
                for q in 0..9 {
                    let (tz, ty) = (q / 3, q % 3);
                    let at = ((idx + tz - 1) % 3) * lin + i * iin + (pad + ty - 1) * rin;
                    let lhs = View {
                        data: &tin[at..][..sy * rin],
                        rs: 1,
                        cs: cin,
                    };
                    let dst = &mut pw[(i * 9 + q) * cin * cout..][..cin * cout];
                    super::accumulate_products(simd, cin, cout, sy * nt, dst, cout, lhs, rhs);
                }
            }
        },
    );
    for part in parts.chunks_exact(plen) {
        grad_b
            .iter_mut()
            .zip(&part[wl..])
            .for_each(|(g, v)| *g += v);
        for q in 0..9 {
            for co in 0..cin * cout {
                let prod = core::array::from_fn(|i| part[(i * 9 + q) * cin * cout + co]);
                for (j, v) in tap_grads(prod).into_iter().enumerate() {
                    grad_w[(q * 3 + j) * cin * cout + co] += v;
                }
            }
        }
    }
}
