//! The bfloat16 precision of the F(4x4, 3x3) forward convs
//! ([`crate::conv::winograd::ConvAlgorithm::WinogradBf16`]): the transformed inputs and weights
//! are rounded to bfloat16 (8 significant bits, round to nearest even; subnormals to zero, as the
//! AVX512-BF16 conversion does), their products are summed in float32. The transforms, the
//! inverse transform, bias, ReLU and residuals stay float32.
//!
//! With AMX ([`crate::conv::amx`]) the products run as bfloat16 tile products; without it, the
//! same rounded values are multiplied by the float32 product kernels (a product of two bfloat16
//! values is exact in float32), so both compute the same sums up to the order of the float32
//! additions. Only convs with multiples of 32 input and output channels use it ([`applies`]);
//! the others (the first conv of a network, 2 input channels) stay float32.

use super::TT;
use crate::conv::Conv3dParams;
use alloc::vec;
use alloc::vec::Vec;

/// The weights of one conv in the form the bf16 products read, prepared once (for example kept
/// between the forward passes of an inference run, whose weights do not change).
#[derive(Clone, Debug, PartialEq)]
pub enum PreparedWeights {
    /// Transformed, rounded to bfloat16 and packed in pairs ([`pack_weights`]), for AMX.
    Packed(Vec<u32>),
    /// Transformed and rounded to bfloat16 ([`round_all`]), for the emulation.
    Rounded(Vec<f32>),
}

impl PreparedWeights {
    /// The weights `[3, 3, 3, in, out]` of conv `p` prepared for the products that run here: packed
    /// where [`crate::conv::amx::available`], else rounded.
    ///
    /// # Panics
    /// When the length of `weights` does not match `p`, or `p` has an odd number of inputs (the
    /// precision applies to multiples of 32, [`applies`]).
    pub fn new(p: &Conv3dParams, weights: &[f32]) -> Self {
        Self::for_products(p, weights, crate::conv::amx::available())
    }

    /// [`PreparedWeights::new`] for AMX products when `amx`, else for the emulation.
    pub(crate) fn for_products(p: &Conv3dParams, weights: &[f32], amx: bool) -> Self {
        let mut rounded = vec![0.0; super::transformed_weights_len(p)];
        super::transform_weights(p, weights, &mut rounded);
        round_all(&mut rounded);
        if amx {
            let mut packed = vec![0; packed_weights_len(p)];
            pack_weights(p, &rounded, &mut packed);
            Self::Packed(packed)
        } else {
            Self::Rounded(rounded)
        }
    }
}

/// What runs the bf16 products in this process: `"amx"` where [`crate::conv::amx::available`],
/// else `"emulated"` (float32 kernels on the rounded values, slower than float32).
pub fn products_name() -> &'static str {
    if crate::conv::amx::available() {
        "amx"
    } else {
        "emulated"
    }
}

/// Whether conv `p` runs its products in bfloat16 under the bf16 precision: multiples of 32 input
/// and output channels (the AMX tile's 32 bfloat16 values of depth).
pub fn applies(p: &Conv3dParams) -> bool {
    p.in_channels > 0 && p.in_channels.is_multiple_of(32) && p.out_channels.is_multiple_of(32)
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
    TT * 3 * p.in_channels / 2 * p.out_channels
}

/// Transformed weights `[yx index][z tap][in][out]` (of [`super::transform_weights`]) as pairs of
/// bfloat16 values, the AMX tile layout (VNNI): `out[((k * 3 + tz) * in / 2 + c / 2) * out + o]`
/// holds input channel `c` (even) in its low half and `c + 1` in its high half.
///
/// # Panics
/// When `p` has an odd number of input channels or a length does not match.
pub fn pack_weights(p: &Conv3dParams, transformed: &[f32], out: &mut [u32]) {
    let (ci, co) = (p.in_channels, p.out_channels);
    assert!(ci.is_multiple_of(2), "bf16: odd input channels");
    assert_eq!(
        transformed.len(),
        TT * 3 * ci * co,
        "bf16: transformed weights"
    );
    assert_eq!(out.len(), packed_weights_len(p), "bf16: packed weights");
    for (kz, pairs) in out.chunks_exact_mut(ci / 2 * co).enumerate() {
        let w = &transformed[kz * ci * co..][..ci * co];
        for (cp, row) in pairs.chunks_exact_mut(co).enumerate() {
            for (o, v) in row.iter_mut().enumerate() {
                let (lo, hi) = (w[2 * cp * co + o], w[(2 * cp + 1) * co + o]);
                *v = u32::from(to_bits(lo)) | (u32::from(to_bits(hi)) << 16);
            }
        }
    }
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
    fn packed_weights_hold_channel_pairs() {
        let p = Conv3dParams {
            batch: 1,
            size: [1, 1, 1],
            in_channels: 4,
            out_channels: 2,
            kernel: 3,
        };
        let tw: Vec<f32> = (0..TT * 3 * 8).map(|i| i as f32).collect();
        let mut packed = vec![0u32; packed_weights_len(&p)];
        pack_weights(&p, &tw, &mut packed);
        // k = 1, tz = 2, c = 3 (pair 1, high half), o = 1.
        let (k, tz, c, o) = (1, 2, 3, 1);
        let v = packed[((k * 3 + tz) * 2 + c / 2) * 2 + o];
        assert_eq!(
            from_bits((v >> 16) as u16),
            tw[((k * 3 + tz) * 4 + c) * 2 + o]
        );
        assert_eq!(from_bits(v as u16), tw[((k * 3 + tz) * 4 + c - 1) * 2 + o]);
    }
}
