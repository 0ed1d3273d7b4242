//! The bfloat16 precision of the 3x3x3 inference convs
//! ([`super::winograd::ConvAlgorithm::Bf16`]): every product of an input and a weight rounded to
//! bfloat16 (8 significant bits, round to nearest even; subnormals to zero, as the AVX512-BF16
//! conversion does), the sums in float32, computed directly (no Winograd transform). Bias, ReLU
//! and residual stay float32.
//!
//! With AMX ([`super::amx`]) the products are bfloat16 tile products; without it, the same
//! rounded values are multiplied by the float32 direct kernels ([`super::fast`]; a product of two
//! bfloat16 values is exact in float32), so both compute the same sums up to the order of the
//! float32 additions. Each product is within `2^-8` of its exact value, so an output is within
//! about `2^-8` of the sum of its absolute terms. Only 3x3x3 convs with multiples of 32 input and
//! output channels use it ([`applies`]); the others (a network's first conv, 2 input channels,
//! and its last, 1 output) stay float32.

use super::winograd::{self, Fusion, WinogradScratch};
use super::{Conv3dParams, Simd, amx, fast};
use crate::tensor::Padded;
use alloc::vec;
use alloc::vec::Vec;

/// Whether conv `p` runs in bfloat16 under the bf16 precision: a 3x3x3 kernel and multiples of
/// 32 input and output channels (the AMX tile's 32 bfloat16 values of depth, 32 outputs per
/// block).
pub fn applies(p: &Conv3dParams) -> bool {
    p.kernel == 3
        && p.in_channels > 0
        && p.in_channels.is_multiple_of(32)
        && p.out_channels > 0
        && p.out_channels.is_multiple_of(32)
}

/// What runs the bf16 products in this process: `"amx"` where [`amx::available`], else
/// `"emulated"` (the float32 direct kernels on the rounded values, slower than float32's
/// Winograd).
pub fn products_name() -> &'static str {
    if amx::available() { "amx" } else { "emulated" }
}

/// The bfloat16 bits of `x`: the high 16 bits of its float32 value rounded to nearest even;
/// subnormals become zero of the same sign, NaN stays NaN.
pub fn to_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16; // quiet
    }
    if x.is_subnormal() {
        return ((b >> 16) & 0x8000) as u16;
    }
    let rounding = 0x7fff + ((b >> 16) & 1);
    (b.wrapping_add(rounding) >> 16) as u16
}

/// The float32 value of bfloat16 bits.
pub fn from_bits(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// `x` rounded to bfloat16 (see [`to_bits`]), as float32.
pub fn round(x: f32) -> f32 {
    from_bits(to_bits(x))
}

/// Every value of `v` rounded to bfloat16 in place.
pub fn round_all(v: &mut [f32]) {
    v.iter_mut().for_each(|x| *x = round(*x));
}

/// Values of [`pack_weights`]'s output for conv `p`.
pub fn packed_weights_len(p: &Conv3dParams) -> usize {
    27 * p.in_channels / 2 * p.out_channels
}

/// Weights `[3, 3, 3, in, out]` rounded to bfloat16 and packed in pairs, the AMX tile layout
/// (VNNI): `out[(tap * in / 2 + c / 2) * out + o]` holds input channel `c` (even) in its low half
/// and `c + 1` in its high half, for tap `(kz * 3 + ky) * 3 + kx`.
///
/// # Panics
/// When `p` has an odd number of input channels or a length does not match.
pub fn pack_weights(p: &Conv3dParams, weights: &[f32], out: &mut [u32]) {
    let (ci, co) = (p.in_channels, p.out_channels);
    assert!(ci.is_multiple_of(2), "bf16: odd input channels");
    assert_eq!(weights.len(), 27 * ci * co, "bf16: weights");
    assert_eq!(out.len(), packed_weights_len(p), "bf16: packed weights");
    for (tap, pairs) in out.chunks_exact_mut(ci / 2 * co).enumerate() {
        let w = &weights[tap * ci * co..][..ci * co];
        for (cp, row) in pairs.chunks_exact_mut(co).enumerate() {
            for (o, v) in row.iter_mut().enumerate() {
                let (lo, hi) = (w[2 * cp * co + o], w[(2 * cp + 1) * co + o]);
                *v = u32::from(to_bits(lo)) | (u32::from(to_bits(hi)) << 16);
            }
        }
    }
}

/// The weights of one conv in the form the bf16 products read, prepared once (for example kept
/// between the forward passes of an inference run, whose weights do not change).
#[derive(Clone, Debug, PartialEq)]
pub enum PreparedWeights {
    /// Rounded and packed in pairs ([`pack_weights`]), for AMX.
    Packed(Vec<u32>),
    /// Rounded ([`round_all`]), `[3, 3, 3, in, out]`, for the emulation.
    Rounded(Vec<f32>),
}

impl PreparedWeights {
    /// The weights `[3, 3, 3, in, out]` of conv `p` prepared for the products that run here:
    /// packed where [`amx::available`], else rounded.
    ///
    /// # Panics
    /// When the length of `weights` does not match `p`, or `p` has an odd number of inputs (the
    /// precision applies to multiples of 32, [`applies`]).
    pub fn new(p: &Conv3dParams, weights: &[f32]) -> Self {
        Self::for_products(p, weights, amx::available())
    }

    /// [`PreparedWeights::new`] for AMX products when `amx`, else for the emulation.
    pub(crate) fn for_products(p: &Conv3dParams, weights: &[f32], amx: bool) -> Self {
        if amx {
            let mut packed = vec![0; packed_weights_len(p)];
            pack_weights(p, weights, &mut packed);
            Self::Packed(packed)
        } else {
            let mut rounded = weights.to_vec();
            round_all(&mut rounded);
            Self::Rounded(rounded)
        }
    }
}

/// `out = residual + act(conv(relu?(input), weights) + bias)` of [`Fusion`] in the bfloat16
/// precision: AMX tile products where `prepared` is [`PreparedWeights::Packed`] (or, without
/// `prepared`, where [`amx::available`]), else the emulation with the SIMD kernels of `simd`.
/// Buffers as [`winograd::forward_fused`]: padded `input` and `out` (zero border written),
/// weights `[3, 3, 3, in, out]`.
///
/// # Panics
/// When `p` is not a conv the precision [`applies`] to, a length or the geometry does not match,
/// or `prepared` is packed and AMX is not available.
#[allow(clippy::too_many_arguments)]
pub fn forward_fused(
    simd: Simd,
    p: &Conv3dParams,
    g: &Padded,
    input: &[f32],
    weights: &[f32],
    prepared: Option<&PreparedWeights>,
    fusion: Fusion<'_>,
    out: &mut [f32],
    scratch: &mut WinogradScratch,
) {
    assert!(
        applies(p),
        "bf16: conv {p:?} is not 3x3x3 with 32k channels"
    );
    winograd::check_fused(p, g, input, fusion, out);
    let made;
    let prepared = match prepared {
        Some(w) => w,
        None => {
            made = PreparedWeights::new(p, weights);
            &made
        }
    };
    let (rounded_input, per_thread) = scratch.bf16_buffers();
    match prepared {
        PreparedWeights::Packed(packed) => {
            assert!(amx::available(), "bf16: packed weights without AMX");
            assert_eq!(packed.len(), packed_weights_len(p), "bf16: packed weights");
            forward_amx(p, g, input, packed, fusion, out, per_thread);
        }
        PreparedWeights::Rounded(rounded) => {
            assert_eq!(rounded.len(), weights.len(), "bf16: rounded weights");
            rounded_input.clear();
            rounded_input.extend(input.iter().map(|&x| {
                let x = if fusion.relu_input { x.max(0.0) } else { x };
                round(x)
            }));
            let zeros;
            let bias = match fusion.bias {
                Some(bias) => bias,
                None => {
                    zeros = vec![0.0; p.out_channels];
                    &zeros
                }
            };
            fast::forward(simd, p, g, rounded_input, rounded, bias, fusion.relu, out);
            if let Some(r) = fusion.residual {
                out.iter_mut().zip(r).for_each(|(o, r)| *o += r);
            }
        }
    }
}

/// [`forward_fused`] by AMX: each thread converts the input planes its run of output planes
/// needs into a ring of three bfloat16 planes, then the tile products of every plane
/// ([`amx::conv_plane`]), the bias, ReLU and residual, and the border.
fn forward_amx(
    p: &Conv3dParams,
    g: &Padded,
    input: &[f32],
    packed: &[u32],
    fusion: Fusion<'_>,
    out: &mut [f32],
    per_thread: &mut Vec<f32>,
) {
    let (cin, cout) = (p.in_channels, p.out_channels);
    let [_, dy, dx] = g.dims();
    let plane = g.plane_voxels();
    // A ring slot: one bfloat16 plane and the voxels the last block reads beyond it (two
    // bfloat16 values per float32 word of the scratch).
    let slot_words = (plane + amx::SLACK_VOXELS) * cin / 2;
    // Output voxels from the first interior voxel of the first interior row to the last of the
    // last, the border columns between them included (computed, then zeroed).
    let (pad, [_, sy, sx]) = (g.pad, g.size);
    let first = pad * dx + pad;
    let count = (pad + sy - 1) * dx + pad + sx - first;
    debug_assert!(first > dx && (pad + sy) * dx + pad + sx <= dy * dx);
    winograd::for_each_output_plane(
        g,
        cout,
        out,
        per_thread,
        3 * slot_words,
        |idx, prev, zp, chunk, ring| {
            for q in winograd::ring_planes(idx, prev) {
                let slot = &mut ring[(q % 3) * slot_words..][..slot_words];
                let src = &input[q * plane * cin..][..plane * cin];
                // SAFETY: packed weights are used only where amx::available() (asserted by the
                // caller), which includes AVX512-BF16; plane * cin is a multiple of 32 (cin is);
                // the slot has room for (plane + SLACK_VOXELS) * cin bfloat16 values (any bits are
                // valid for both types).
                unsafe { amx::convert(src, fusion.relu_input, slot.as_mut_ptr().cast()) };
            }
            let planes: [*const u16; 3] = core::array::from_fn(|tz| {
                let q = idx + tz - 1;
                ring[(q % 3) * slot_words..].as_ptr().cast()
            });
            let operands = amx::PlaneOperands {
                planes,
                packed: packed.as_ptr(),
                cin,
                cout,
                dx,
                plane_voxels: plane,
                first,
                count,
                out: chunk.as_mut_ptr(),
            };
            // SAFETY: AMX is available and cin, cout are multiples of 32 (applies, asserted); each
            // ring slot holds (plane + SLACK_VOXELS) * cin values (the slack's bits are whatever was
            // there: the sums they reach lie outside the plane's interior and are zeroed below);
            // `packed` has 27 * cin / 2 * cout pairs (asserted); `chunk` is the padded output plane
            // (plane * cout values) and first >= dx + 1 (pad >= 1).
            unsafe { amx::conv_plane(&operands) };
            let residual = fusion
                .residual
                .map(|r| &r[idx * plane * cout..][..plane * cout]);
            super::winograd2d::finish_plane(g, cout, fusion, residual, chunk);
            g.zero_plane_border(chunk, zp, cout);
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_to_nearest_even_with_subnormals_flushed() {
        assert_eq!(round(1.0), 1.0);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1).
        assert_eq!(round(1.0 + 1.0 / 256.0), 1.0);
        // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to even (1 + 2^-6).
        assert_eq!(round(1.0 + 3.0 / 256.0), 1.0 + 1.0 / 64.0);
        assert_eq!(round(1.0 + 1.0 / 256.0 + 1e-6), 1.0 + 1.0 / 128.0);
        assert_eq!(round(-3.0), -3.0);
        assert_eq!(to_bits(f32::from_bits(1)), 0);
        assert_eq!(to_bits(-f32::from_bits(1)), 0x8000);
        assert!(round(f32::NAN).is_nan());
        assert_eq!(round(f32::INFINITY), f32::INFINITY);
        // The largest finite values round up to infinity, as float32 rounding does.
        assert_eq!(round(f32::MAX), f32::INFINITY);
        for x in [0.1f32, -7.3, 1e-30, 12345.678] {
            assert!((round(x) - x).abs() <= x.abs() / 256.0, "{x}");
        }
    }

    #[test]
    fn packed_weights_hold_rounded_channel_pairs() {
        let p = Conv3dParams {
            batch: 1,
            size: [1, 1, 1],
            in_channels: 4,
            out_channels: 2,
            kernel: 3,
        };
        let w: Vec<f32> = (0..27 * 8).map(|i| 1.0 + i as f32 / 1000.0).collect();
        let mut packed = vec![0u32; packed_weights_len(&p)];
        pack_weights(&p, &w, &mut packed);
        // tap 13, c = 3 (pair 1, high half), o = 1.
        let (tap, c, o) = (13, 3, 1);
        let v = packed[(tap * 2 + c / 2) * 2 + o];
        assert_eq!(from_bits((v >> 16) as u16), round(w[(tap * 4 + c) * 2 + o]));
        assert_eq!(from_bits(v as u16), round(w[(tap * 4 + c - 1) * 2 + o]));
        assert_ne!(round(w[(tap * 4 + c) * 2 + o]), w[(tap * 4 + c) * 2 + o]);
    }
}
