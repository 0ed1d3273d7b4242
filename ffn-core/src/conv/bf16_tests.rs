//! The bfloat16 precision of the 3x3x3 forward convs: its emulation against the f64 reference
//! (within bfloat16 rounding, and visibly not float32), and the AMX tile products against the
//! emulation (the same rounded values: only the order of the float32 additions differs) where
//! this CPU has AMX.

use super::tests::{conv_params, levels_run_here, note, on_threads, padded_copy};
use super::{Conv3dParams, amx, bf16, reference, winograd, winograd2d};
use crate::rng::Rng;
use crate::tensor::Padded;
use crate::testutil::{seed, uniform};
use alloc::vec;
use alloc::vec::Vec;

/// Shapes with multiples of 32 input channels, where bf16 applies: planes of 1 to 33 voxels a
/// side, so that AMX blocks of 16 voxels come in pairs, alone, and past the plane's end; 32 and
/// 64 inputs and outputs; batches of 1 and 2.
fn cases() -> Vec<Conv3dParams> {
    [
        (2, [3, 4, 5], 32, 32),
        (1, [3, 33, 33], 32, 32),
        (1, [2, 16, 30], 32, 32),
        (1, [1, 1, 1], 32, 32),
        (1, [1, 2, 14], 32, 32),
        (1, [2, 9, 17], 64, 32),
        (1, [2, 13, 6], 32, 64),
    ]
    .into_iter()
    .map(conv_params)
    .collect()
}

/// One fused forward conv (input ReLU, bias, ReLU, residual) of case `p` by the bf16 precision
/// (AMX products when `use_amx`) or by float32 (`None`), unpadded.
struct Case {
    p: Conv3dParams,
    g: Padded,
    input: Vec<f32>,
    w: Vec<f32>,
    b: Vec<f32>,
    residual: Vec<f32>,
}

impl Case {
    fn new(rng: &mut Rng, p: Conv3dParams) -> Self {
        let g = Padded::new(p.batch, p.size, 1);
        let input = padded_copy(&g, &uniform(rng, p.input_len()), p.in_channels);
        let residual = padded_copy(&g, &uniform(rng, p.output_len()), p.out_channels);
        let (w, b) = (uniform(rng, p.weights_len()), uniform(rng, p.out_channels));
        Self {
            p,
            g,
            input,
            w,
            b,
            residual,
        }
    }

    fn fusion(&self) -> winograd::Fusion<'_> {
        winograd::Fusion {
            relu_input: true,
            bias: Some(&self.b),
            relu: true,
            residual: Some(&self.residual),
        }
    }

    /// The output by the bf16 precision (`Some(use_amx)`) or float32 Winograd (`None`), unpadded.
    fn run(&self, simd: super::Simd, bf16_amx: Option<bool>) -> Vec<f32> {
        let (p, g, cout) = (&self.p, &self.g, self.p.out_channels);
        let mut out = vec![f32::NAN; g.len(cout)];
        let mut scratch = winograd::WinogradScratch::new();
        let (inp, w, f) = (&self.input, &self.w, self.fusion());
        match bf16_amx {
            Some(amx) => {
                // The prepared weights choose the products.
                let prepared = bf16::PreparedWeights::for_products(p, w, amx);
                let prepared = Some(&prepared);
                bf16::forward_fused(simd, p, g, inp, w, prepared, f, &mut out, &mut scratch)
            }
            None => winograd2d::forward_fused(simd, p, g, inp, w, f, &mut out, &mut scratch),
        }
        let mut bordered = out.clone();
        g.zero_border(&mut bordered, cout);
        assert_eq!(bordered, out, "{p:?}: border not zero");
        let mut got = vec![0.0; p.output_len()];
        g.unpad_into(&out, cout, &mut got);
        got
    }

    /// The f64 reference and the sum of the absolute terms of every output.
    fn reference(&self) -> (Vec<f32>, Vec<f32>) {
        let (p, g) = (&self.p, &self.g);
        let mut x = vec![0.0; p.input_len()];
        g.unpad_into(&self.input, p.in_channels, &mut x);
        x.iter_mut().for_each(|v| *v = v.max(0.0));
        let mut r = vec![0.0; p.output_len()];
        g.unpad_into(&self.residual, p.out_channels, &mut r);
        let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
        let (mut want, mut mag) = (vec![0.0; p.output_len()], vec![0.0; p.output_len()]);
        reference::forward(p, &x, &self.w, &self.b, &mut want);
        reference::forward(p, &x, &abs(&self.w), &abs(&self.b), &mut mag);
        for ((v, m), r) in want.iter_mut().zip(&mut mag).zip(&r) {
            *v = v.max(0.0) + r;
            *m += r.abs();
        }
        (want, mag)
    }
}

/// The largest `|a - b|` over the magnitude.
fn worst_error(a: &[f32], b: &[f32], mag: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .zip(mag)
        .map(|((x, y), m)| (x - y).abs() as f64 / (*m as f64 + 1e-6))
        .fold(0.0, f64::max)
}

/// The emulated bf16 precision against the f64 reference on every SIMD level this CPU has: within
/// `2^-8` of the sum of the absolute terms for every output (each product of two values rounded
/// to bfloat16 is within `2^-8` of the exact one, the float32 sums add little; the worst error is
/// printed), and further from the reference than float32 is (the rounding happened).
#[test]
fn bf16_emulation_matches_reference_within_bfloat16_rounding() {
    let mut rng = Rng::new(seed(41));
    let levels = levels_run_here("bf16_emulation_matches_reference_within_bfloat16_rounding");
    let (mut worst, mut worst_f32) = (0.0f64, 0.0f64);
    for p in cases() {
        assert!(bf16::applies(&p));
        let case = Case::new(&mut rng, p);
        let (want, mag) = case.reference();
        for &simd in levels.iter().filter(|s| winograd2d::preferred(&p, **s)) {
            let (emulated, f32_out) = (case.run(simd, Some(false)), case.run(simd, None));
            let (e, e32) = (
                worst_error(&emulated, &want, &mag),
                worst_error(&f32_out, &want, &mag),
            );
            assert!(
                e <= 1.0 / 256.0,
                "bf16 {p:?} {simd}: error {e:.2e} of the magnitude"
            );
            assert!(
                e > 10.0 * e32,
                "bf16 {p:?} {simd}: {e:.2e} against float32's {e32:.2e}"
            );
            worst = worst.max(e);
            worst_f32 = worst_f32.max(e32);
        }
    }
    note(&alloc::format!(
        "bf16 emulation: worst error {worst:.2e} of the magnitude (float32 Winograd: {worst_f32:.2e})"
    ));
}

/// The AMX tile products against the emulation on 1 to 3 threads: the same rounded values, so
/// within `1e-5` of the magnitude (the order of the float32 additions). Runs where this CPU has
/// AMX and says so; elsewhere it says that only the emulation ran.
#[test]
fn amx_products_match_the_emulation() {
    if !amx::available() {
        note("amx_products_match_the_emulation: no AMX on this CPU (or not permitted): not run");
        return;
    }
    let mut rng = Rng::new(seed(42));
    let simd = super::Simd::Avx512;
    let mut worst = 0.0f64;
    for p in cases() {
        let case = Case::new(&mut rng, p);
        let (_, mag) = case.reference();
        let emulated = case.run(simd, Some(false));
        for threads in 1..=3 {
            let mut amx_out = Vec::new();
            on_threads(threads, || amx_out = case.run(simd, Some(true)));
            let e = worst_error(&amx_out, &emulated, &mag);
            assert!(
                e <= 1e-5,
                "AMX {p:?} on {threads} threads: {e:.2e} from the emulation"
            );
            worst = worst.max(e);
        }
    }
    note(&alloc::format!(
        "amx_products_match_the_emulation: AMX ran; worst difference {worst:.2e} of the magnitude"
    ));
}

/// The AVX512-BF16 conversion (with and without a ReLU) gives the bits of [`bf16::to_bits`] for
/// every value (ties, subnormals, infinities, large and small magnitudes) and writes nothing
/// beyond the plane.
#[test]
fn amx_plane_conversion_rounds_as_the_emulation() {
    if !amx::available() {
        note("amx_plane_conversion_rounds_as_the_emulation: no AMX on this CPU: not run");
        return;
    }
    let n = 5 * 64;
    let mut rng = Rng::new(seed(43));
    let mut src: Vec<f32> = uniform(&mut rng, n)
        .into_iter()
        .enumerate()
        .map(|(i, v)| v * 10f32.powi((i % 13) as i32 - 6))
        .collect();
    let specials = [
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        -(1.0 + 1.0 / 256.0),
        f32::from_bits(1),
        -f32::from_bits(7),
        f32::INFINITY,
        f32::MAX,
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
    ];
    src[..specials.len()].copy_from_slice(&specials);
    let mut dst = vec![0xabcdu16; n + 32];
    for relu in [false, true] {
        // SAFETY: AMX (with AVX512-BF16) is available; n is a multiple of 32; dst holds n values.
        unsafe { amx::convert(&src, relu, dst.as_mut_ptr()) };
        for (i, (&got, &x)) in dst.iter().zip(&src).enumerate() {
            let x = if relu { x.max(0.0) } else { x };
            assert_eq!(
                got,
                bf16::to_bits(x),
                "value {x:e} (index {i}, relu {relu})"
            );
        }
        assert!(
            dst[n..].iter().all(|&v| v == 0xabcd),
            "written beyond the plane"
        );
    }
}
