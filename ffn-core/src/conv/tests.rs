//! Reference-vs-fast tests on awkward shapes, and finite-difference checks of the reference.
#![allow(clippy::needless_range_loop)]

use super::{Conv3dParams, Simd, fast, reference, winograd, winograd2d, winograd3d};
use crate::rng::Rng;
use crate::tensor::Padded;
use crate::testutil::{assert_close, finite_diff, seed, uniform};
use alloc::vec;
use alloc::vec::Vec;

/// Awkward shapes: sizes 1 and odd, channels 1 and 2, batch 1 and 3, kernels 1, 3 and 5.
fn shapes() -> Vec<Conv3dParams> {
    let mut v = Vec::new();
    let sizes = [[1, 1, 1], [3, 2, 5], [1, 4, 1], [5, 3, 3], [2, 1, 6]];
    for (i, size) in sizes.into_iter().enumerate() {
        for (batch, cin, cout) in [(1, 1, 1), (3, 2, 1), (1, 2, 3), (3, 1, 2), (1, 5, 4)] {
            for kernel in [1, 3] {
                v.push(Conv3dParams {
                    batch,
                    size,
                    kernel,
                    in_channels: cin,
                    out_channels: cout,
                });
            }
            if i == 3 {
                v.push(Conv3dParams {
                    batch,
                    size,
                    kernel: 5,
                    in_channels: cin,
                    out_channels: cout,
                });
            }
        }
    }
    v
}

#[test]
fn fast_matches_reference_on_awkward_shapes() {
    let mut rng = Rng::new(seed(11));
    let mut scratch = Vec::new();
    for p in shapes() {
        for extra in [0, 1] {
            check_against_reference(Simd::active(), &p, p.half() + extra, &mut rng, &mut scratch);
        }
    }
}

/// The SIMD levels this CPU runs, each named on stderr: the paths a test went through.
pub(super) fn levels_run_here(test: &str) -> Vec<Simd> {
    let levels: Vec<Simd> = Simd::ALL.into_iter().filter(|s| s.supported()).collect();
    note(&alloc::format!("{test}: SIMD paths run: {levels:?}"));
    levels
}

/// A line on stderr (with `std`), for what a test ran.
pub(super) fn note(line: &str) {
    #[cfg(feature = "std")]
    std::eprintln!("{line}");
    #[cfg(not(feature = "std"))]
    let _ = line;
}

/// Shapes with 32 or 64 output channels, through every SIMD level this CPU has: on x86-64 the AVX2
/// and AVX-512 direct kernels (forward and input gradient) and products (weight gradient), and
/// the GEMM path of the portable level.
#[test]
fn wide_outputs_match_reference() {
    let mut rng = Rng::new(seed(12));
    let mut scratch = Vec::new();
    for simd in levels_run_here("wide_outputs_match_reference") {
        for p in wide_shapes() {
            check_against_reference(simd, &p, p.half(), &mut rng, &mut scratch);
            check_against_reference(simd, &p, p.half() + 1, &mut rng, &mut scratch);
        }
    }
}

/// Convs whose output width (32, 64) the SIMD kernels take, with rows of 1 to 33 voxels (full
/// and partial AVX-512 tiles of 12).
fn wide_shapes() -> Vec<Conv3dParams> {
    let mut v = Vec::new();
    for (batch, size, kernel, cin, cout) in [
        (2, [3, 4, 5], 3, 32, 32),
        (1, [2, 1, 7], 3, 2, 32),
        (1, [3, 3, 4], 1, 1, 32),
        (3, [1, 2, 2], 3, 32, 64),
        (1, [2, 3, 8], 3, 3, 32),
        (1, [1, 2, 25], 3, 32, 32),
        (1, [2, 1, 33], 1, 32, 32),
    ] {
        v.push(Conv3dParams {
            batch,
            size,
            kernel,
            in_channels: cin,
            out_channels: cout,
        });
    }
    v
}

/// Forward (with and without ReLU), input and weight gradients of the fast path against the
/// reference, with border `pad`.
fn check_against_reference(
    simd: Simd,
    p: &Conv3dParams,
    pad: usize,
    rng: &mut Rng,
    scratch: &mut Vec<f32>,
) {
    let p = *p;
    {
        {
            let g = Padded::new(p.batch, p.size, pad);
            let input = uniform(rng, p.input_len());
            let w = uniform(rng, p.weights_len());
            let b = uniform(rng, p.out_channels);
            let gout = uniform(rng, p.output_len());
            let what = alloc::format!("{p:?} pad {} {simd}", g.pad);

            // Forward, with and without ReLU.
            let mut want = vec![0.0; p.output_len()];
            reference::forward(&p, &input, &w, &b, &mut want);
            let mut inp = vec![0.0; g.len(p.in_channels)];
            g.pad_from(&input, p.in_channels, &mut inp);
            for relu in [false, true] {
                let mut out = vec![f32::NAN; g.len(p.out_channels)];
                fast::forward(simd, &p, &g, &inp, &w, &b, relu, &mut out);
                let mut check = out.clone();
                g.zero_border(&mut check, p.out_channels);
                assert_eq!(check, out, "{what}: border not zero");
                let mut got = vec![0.0; p.output_len()];
                g.unpad_into(&out, p.out_channels, &mut got);
                let w2: Vec<f32> = if relu {
                    want.iter().map(|v| v.max(0.0)).collect()
                } else {
                    want.clone()
                };
                assert_close(
                    &alloc::format!("forward {what} relu {relu}"),
                    &got,
                    &w2,
                    1e-5,
                    1e-5,
                );
            }

            // Input gradient.
            let mut want_gi = vec![0.0; p.input_len()];
            reference::backward_input(&p, &gout, &w, &mut want_gi);
            let mut gop = vec![0.0; g.len(p.out_channels)];
            g.pad_from(&gout, p.out_channels, &mut gop);
            let mut flipped = vec![0.0; p.weights_len()];
            fast::flip_weights(&p, &w, &mut flipped);
            let mut gi = vec![f32::NAN; g.len(p.in_channels)];
            fast::backward_input(simd, &p, &g, &gop, &flipped, &mut gi);
            let mut got_gi = vec![0.0; p.input_len()];
            g.unpad_into(&gi, p.in_channels, &mut got_gi);
            assert_close(
                &alloc::format!("input grad {what}"),
                &got_gi,
                &want_gi,
                1e-5,
                1e-5,
            );

            // Weight and bias gradients.
            let mut want_gw = vec![0.0; p.weights_len()];
            let mut want_gb = vec![0.0; p.out_channels];
            reference::backward_weights(&p, &input, &gout, &mut want_gw, &mut want_gb);
            let mut gw = vec![f32::NAN; p.weights_len()];
            let mut gb = vec![f32::NAN; p.out_channels];
            fast::backward_weights(simd, &p, &g, &inp, &gop, &mut gw, &mut gb, scratch);
            assert_close(
                &alloc::format!("weight grad {what}"),
                &gw,
                &want_gw,
                1e-4,
                1e-5,
            );
            assert_close(
                &alloc::format!("bias grad {what}"),
                &gb,
                &want_gb,
                1e-4,
                1e-5,
            );
        }
    }
}

#[test]
fn flip_weights_reverses_taps_and_swaps_channels() {
    let p = Conv3dParams {
        batch: 1,
        size: [1, 1, 1],
        kernel: 3,
        in_channels: 2,
        out_channels: 3,
    };
    let w: Vec<f32> = (0..p.weights_len()).map(|i| i as f32).collect();
    let mut f = vec![0.0; w.len()];
    fast::flip_weights(&p, &w, &mut f);
    // Tap (0,0,1), in 1, out 2 -> tap (2,2,1), [out 2][in 1].
    let src = (2 + 1) * 3 + 2;
    let dst = ((2 * 9 + 2 * 3 + 1) * 3 + 2) * 2 + 1;
    assert_eq!(f[dst], w[src]);
}

#[test]
fn zero_sizes_give_empty_results() {
    let p = Conv3dParams {
        batch: 2,
        size: [0, 3, 3],
        kernel: 3,
        in_channels: 2,
        out_channels: 2,
    };
    let g = Padded::new(2, p.size, 1);
    let inp = vec![1.0; g.len(2)];
    let mut out = vec![5.0; g.len(2)];
    fast::forward(
        Simd::active(),
        &p,
        &g,
        &inp,
        &vec![1.0; p.weights_len()],
        &[1.0, 1.0],
        false,
        &mut out,
    );
    assert!(out.iter().all(|v| *v == 0.0));
    let (mut gw, mut gb, mut s) = (vec![3.0; p.weights_len()], vec![3.0; 2], Vec::new());
    fast::backward_weights(Simd::active(), &p, &g, &inp, &out, &mut gw, &mut gb, &mut s);
    assert!(gw.iter().chain(&gb).all(|v| *v == 0.0));
}

/// `L = sum(out * r)` for the reference conv, as f64.
fn weighted_sum(p: &Conv3dParams, input: &[f32], w: &[f32], b: &[f32], r: &[f32]) -> f64 {
    let mut out = vec![0.0; p.output_len()];
    reference::forward(p, input, w, b, &mut out);
    out.iter().zip(r).map(|(o, r)| *o as f64 * *r as f64).sum()
}

#[test]
fn reference_gradients_match_finite_differences() {
    let mut rng = Rng::new(seed(5));
    for p in [
        Conv3dParams {
            batch: 2,
            size: [3, 2, 4],
            kernel: 3,
            in_channels: 2,
            out_channels: 3,
        },
        Conv3dParams {
            batch: 1,
            size: [2, 3, 1],
            kernel: 1,
            in_channels: 3,
            out_channels: 2,
        },
    ] {
        let mut input = uniform(&mut rng, p.input_len());
        let mut w = uniform(&mut rng, p.weights_len());
        let mut b = uniform(&mut rng, p.out_channels);
        let r = uniform(&mut rng, p.output_len());
        let mut gi = vec![0.0; p.input_len()];
        reference::backward_input(&p, &r, &w, &mut gi);
        let mut gw = vec![0.0; p.weights_len()];
        let mut gb = vec![0.0; p.out_channels];
        reference::backward_weights(&p, &input, &r, &mut gw, &mut gb);
        let eps = 1e-2;
        for i in 0..input.len() {
            let (wc, bc) = (w.clone(), b.clone());
            let fd = finite_diff(&mut input, i, eps, |x| weighted_sum(&p, x, &wc, &bc, &r));
            assert!(
                (fd - gi[i] as f64).abs() < 1e-3,
                "input {i}: fd {fd} vs {}",
                gi[i]
            );
        }
        for i in 0..w.len() {
            let (ic, bc) = (input.clone(), b.clone());
            let fd = finite_diff(&mut w, i, eps, |x| weighted_sum(&p, &ic, x, &bc, &r));
            assert!(
                (fd - gw[i] as f64).abs() < 1e-3,
                "weight {i}: fd {fd} vs {}",
                gw[i]
            );
        }
        for i in 0..b.len() {
            let (ic, wc) = (input.clone(), w.clone());
            let fd = finite_diff(&mut b, i, eps, |x| weighted_sum(&p, &ic, &wc, x, &r));
            assert!(
                (fd - gb[i] as f64).abs() < 1e-3,
                "bias {i}: fd {fd} vs {}",
                gb[i]
            );
        }
    }
}

/// Winograd forward (bias, with and without ReLU), the input gradient through Winograd with
/// flipped weights, and the Winograd weight and bias gradients, against the f64 reference. The tolerance scales with the sum of the absolute
/// terms of each output (the reference run on absolute values): `2e-5` of it.
fn check_winograd(
    simd: Simd,
    p: &Conv3dParams,
    pad: usize,
    rng: &mut Rng,
    scratch: &mut winograd::WinogradScratch,
) {
    let g = Padded::new(p.batch, p.size, pad);
    let what = alloc::format!("{p:?} pad {pad} {simd}");
    let input = uniform(rng, p.input_len());
    let w = uniform(rng, p.weights_len());
    let b = uniform(rng, p.out_channels);
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
    let check = |name: &str, got: &[f32], want: &[f32], mag: &[f32]| {
        for (i, ((x, y), m)) in got.iter().zip(want).zip(mag).enumerate() {
            let tol = 2e-5 * m + 1e-6;
            assert!(
                (x - y).abs() <= tol,
                "{name} {what}[{i}]: {x} vs {y} (tolerance {tol})"
            );
        }
    };

    let mut want = vec![0.0; p.output_len()];
    reference::forward(p, &input, &w, &b, &mut want);
    let mut mag = vec![0.0; p.output_len()];
    reference::forward(p, &abs(&input), &abs(&w), &abs(&b), &mut mag);
    let mut inp = vec![0.0; g.len(p.in_channels)];
    g.pad_from(&input, p.in_channels, &mut inp);
    for relu in [false, true] {
        let mut out = vec![f32::NAN; g.len(p.out_channels)];
        winograd::forward(simd, p, &g, &inp, &w, Some(&b), relu, &mut out, scratch);
        let mut bordered = out.clone();
        g.zero_border(&mut bordered, p.out_channels);
        assert_eq!(bordered, out, "winograd {what}: border not zero");
        let mut got = vec![0.0; p.output_len()];
        g.unpad_into(&out, p.out_channels, &mut got);
        let want: Vec<f32> = want
            .iter()
            .map(|v| if relu { v.max(0.0) } else { *v })
            .collect();
        check("winograd forward", &got, &want, &mag);
    }

    // Fused: residual + relu(conv(relu(input)) + bias).
    let relu_in: Vec<f32> = input.iter().map(|v| v.max(0.0)).collect();
    let mut want_fused = vec![0.0; p.output_len()];
    reference::forward(p, &relu_in, &w, &b, &mut want_fused);
    let residual = uniform(rng, p.output_len());
    for (v, r) in want_fused.iter_mut().zip(&residual) {
        *v = v.max(0.0) + r;
    }
    let mag_fused: Vec<f32> = mag
        .iter()
        .zip(&residual)
        .map(|(m, r)| m + r.abs())
        .collect();
    let mut res = vec![0.0; g.len(p.out_channels)];
    g.pad_from(&residual, p.out_channels, &mut res);
    let fusion = winograd::Fusion {
        relu_input: true,
        bias: Some(&b),
        relu: true,
        residual: Some(&res),
    };
    let mut out = vec![f32::NAN; g.len(p.out_channels)];
    winograd::forward_fused(simd, p, &g, &inp, &w, fusion, &mut out, scratch);
    let mut got = vec![0.0; p.output_len()];
    g.unpad_into(&out, p.out_channels, &mut got);
    check("winograd fused forward", &got, &want_fused, &mag_fused);

    // Input gradient = Winograd forward of the output gradient with flipped weights, no bias.
    let gout = uniform(rng, p.output_len());
    let mut want_gi = vec![0.0; p.input_len()];
    reference::backward_input(p, &gout, &w, &mut want_gi);
    let mut mag_gi = vec![0.0; p.input_len()];
    reference::backward_input(p, &abs(&gout), &abs(&w), &mut mag_gi);
    let mut gop = vec![0.0; g.len(p.out_channels)];
    g.pad_from(&gout, p.out_channels, &mut gop);
    let mut flipped = vec![0.0; p.weights_len()];
    fast::flip_weights(p, &w, &mut flipped);
    let back = Conv3dParams {
        in_channels: p.out_channels,
        out_channels: p.in_channels,
        ..*p
    };
    let mut gi = vec![f32::NAN; g.len(p.in_channels)];
    winograd::forward(
        simd, &back, &g, &gop, &flipped, None, false, &mut gi, scratch,
    );
    let mut got_gi = vec![0.0; p.input_len()];
    g.unpad_into(&gi, p.in_channels, &mut got_gi);
    check("winograd input grad", &got_gi, &want_gi, &mag_gi);

    // Weight and bias gradients.
    let mut want_gw = vec![0.0; p.weights_len()];
    let mut want_gb = vec![0.0; p.out_channels];
    reference::backward_weights(p, &input, &gout, &mut want_gw, &mut want_gb);
    let mut mag_gw = vec![0.0; p.weights_len()];
    let mut mag_gb = vec![0.0; p.out_channels];
    reference::backward_weights(p, &abs(&input), &abs(&gout), &mut mag_gw, &mut mag_gb);
    let mut gw = vec![f32::NAN; p.weights_len()];
    let mut gb = vec![f32::NAN; p.out_channels];
    winograd::backward_weights(simd, p, &g, &inp, &gop, &mut gw, &mut gb, scratch);
    check("winograd weight grad", &gw, &want_gw, &mag_gw);
    check("winograd bias grad", &gb, &want_gb, &mag_gb);
}

/// Awkward 3x3x3 shapes (rows of 1 to 9 voxels: partial last tiles; 1 to 5 channels; batches) run
/// the portable loops; 32 and 64 output channels run the SIMD kernels of every level this CPU
/// has (AVX2, AVX-512).
#[test]
fn winograd_matches_reference() {
    let levels = levels_run_here("winograd_matches_reference");
    let mut rng = Rng::new(seed(13));
    let mut scratch = winograd::WinogradScratch::new();
    let mut cases = Vec::new();
    for size in [
        [1, 1, 1],
        [3, 2, 5],
        [1, 4, 1],
        [2, 3, 8],
        [2, 1, 9],
        [1, 2, 7],
    ] {
        for (batch, cin, cout) in [(1, 1, 1), (3, 2, 1), (1, 2, 3), (1, 5, 4)] {
            cases.push((batch, size, cin, cout));
        }
    }
    cases.extend([
        (2, [3, 4, 5], 32, 32),
        (1, [2, 1, 7], 2, 32),
        (3, [1, 2, 2], 32, 64),
        (1, [3, 3, 13], 32, 32),
        (1, [2, 2, 33], 32, 32),
    ]);
    for (batch, size, cin, cout) in cases {
        let p = Conv3dParams {
            batch,
            size,
            kernel: 3,
            in_channels: cin,
            out_channels: cout,
        };
        let wide = cout % 32 == 0;
        for &simd in levels.iter().filter(|s| wide || **s == Simd::active()) {
            check_winograd(simd, &p, 1, &mut rng, &mut scratch);
            check_winograd(simd, &p, 2, &mut rng, &mut scratch);
        }
    }
}

#[test]
fn winograd_handles_empty_volumes_and_names_its_algorithms() {
    let mut scratch = winograd::WinogradScratch::new();
    let p = Conv3dParams {
        batch: 1,
        size: [2, 0, 3],
        kernel: 3,
        in_channels: 2,
        out_channels: 2,
    };
    let g = Padded::new(1, p.size, 1);
    let mut out = vec![f32::NAN; g.len(2)];
    winograd::forward(
        Simd::active(),
        &p,
        &g,
        &vec![0.0; g.len(2)],
        &vec![0.0; p.weights_len()],
        None,
        false,
        &mut out,
        &mut scratch,
    );
    assert!(out.iter().all(|v| *v == 0.0));
    for a in [
        winograd::ConvAlgorithm::Winograd,
        winograd::ConvAlgorithm::Direct,
        winograd::ConvAlgorithm::Winograd1d,
        winograd::ConvAlgorithm::Bf16,
        winograd::ConvAlgorithm::Winograd3d,
    ] {
        assert_eq!(winograd::ConvAlgorithm::from_name(a.name()), Some(a));
    }
    assert_eq!(winograd::ConvAlgorithm::from_name("fft"), None);
    assert!(!winograd::supports(&Conv3dParams { kernel: 5, ..p }));
}

/// Every SIMD result of one level on the wide shapes and one deeper, concatenated: the direct
/// forward, input and weight gradients, the fused Winograd forward (F(4, 3), F(4x4, 3x3) and
/// three-axis) and the Winograd weight gradients.
fn simd_results(simd: Simd) -> Vec<f32> {
    let mut rng = Rng::new(seed(14));
    let (mut scratch, mut wino) = (Vec::new(), winograd::WinogradScratch::new());
    let mut all = Vec::new();
    // One shape deep enough for z tiles of the three-axis forward.
    let deep = conv_params((1, [6, 3, 6], 32, 32));
    for p in wide_shapes().into_iter().chain([deep]) {
        let g = Padded::new(p.batch, p.size, p.half().max(1));
        let mut pad = |c: usize, len: usize| {
            let mut v = vec![0.0; g.len(c)];
            g.pad_from(&uniform(&mut rng, len), c, &mut v);
            v
        };
        let (inp, gop) = (
            pad(p.in_channels, p.input_len()),
            pad(p.out_channels, p.output_len()),
        );
        let res = pad(p.out_channels, p.output_len());
        let w = uniform(&mut rng, p.weights_len());
        let b = uniform(&mut rng, p.out_channels);
        let mut out = vec![0.0; g.len(p.out_channels)];
        fast::forward(simd, &p, &g, &inp, &w, &b, true, &mut out);
        all.extend_from_slice(&out);
        let mut gi = vec![0.0; g.len(p.in_channels)];
        let mut flipped = vec![0.0; p.weights_len()];
        fast::flip_weights(&p, &w, &mut flipped);
        fast::backward_input(simd, &p, &g, &gop, &flipped, &mut gi);
        all.extend_from_slice(&gi);
        let (mut gw, mut gb) = (vec![0.0; p.weights_len()], vec![0.0; p.out_channels]);
        fast::backward_weights(simd, &p, &g, &inp, &gop, &mut gw, &mut gb, &mut scratch);
        all.extend(gw.iter().chain(&gb));
        if winograd::supports(&p) {
            let fusion = winograd::Fusion {
                relu_input: true,
                bias: Some(&b),
                relu: true,
                residual: Some(&res),
            };
            winograd::forward_fused(simd, &p, &g, &inp, &w, fusion, &mut out, &mut wino);
            all.extend_from_slice(&out);
            winograd2d::forward_fused(simd, &p, &g, &inp, &w, fusion, &mut out, &mut wino);
            all.extend_from_slice(&out);
            winograd3d::forward_fused(simd, &p, &g, &inp, &w, fusion, &mut out, &mut wino);
            all.extend_from_slice(&out);
            winograd::backward_weights(simd, &p, &g, &inp, &gop, &mut gw, &mut gb, &mut wino);
            all.extend(gw.iter().chain(&gb));
            winograd2d::backward_weights(simd, &p, &g, &inp, &gop, &mut gw, &mut gb, &mut wino);
            all.extend(gw.iter().chain(&gb));
        }
    }
    all
}

/// AVX2 and AVX-512 make the same FMAs in the same order for every output: their results are
/// bitwise identical (so a segmentation does not depend on the machine's vector width).
#[test]
fn avx2_and_avx512_give_identical_bits() {
    let levels = levels_run_here("avx2_and_avx512_give_identical_bits");
    if !levels.contains(&Simd::Avx512) {
        note("avx2_and_avx512_give_identical_bits: this CPU lacks AVX-512, not compared");
        return;
    }
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<u32>>();
    let (narrow, wide) = (
        bits(simd_results(Simd::Avx2)),
        bits(simd_results(Simd::Avx512)),
    );
    assert_eq!(narrow.len(), wide.len());
    let differ = narrow.iter().zip(&wide).filter(|(a, b)| a != b).count();
    assert_eq!(differ, 0, "{differ} of {} values differ", wide.len());
    // And the portable path really is another computation (the comparison can fail).
    assert_ne!(bits(simd_results(Simd::Portable)), wide);
}

/// The shapes of the F(4x4, 3x3) tests: planes of 1 to 33 voxels (partial tiles at both ends),
/// 2 to 32 input channels, 32 and 64 outputs, batches of 1 to 3.
fn winograd2d_cases() -> Vec<Conv3dParams> {
    [
        (2, [3, 4, 5], 32, 32),
        (1, [2, 5, 7], 2, 32),
        (1, [1, 1, 1], 3, 32),
        (1, [2, 9, 6], 32, 64),
        (1, [3, 33, 33], 32, 32),
        (3, [1, 8, 13], 17, 32),
    ]
    .into_iter()
    .map(conv_params)
    .collect()
}

/// A 3x3x3 conv of `(batch, size, in, out)`.
pub(super) fn conv_params(
    (batch, size, cin, cout): (usize, [usize; 3], usize, usize),
) -> Conv3dParams {
    Conv3dParams {
        batch,
        size,
        kernel: 3,
        in_channels: cin,
        out_channels: cout,
    }
}

/// `v` (`c` channels) in a zero-bordered buffer of `g`.
pub(super) fn padded_copy(g: &Padded, v: &[f32], c: usize) -> Vec<f32> {
    let mut out = vec![0.0; g.len(c)];
    g.pad_from(v, c, &mut out);
    out
}

/// Runs `f` on a pool of `threads` threads (with `rayon`; without it, on this thread).
pub(super) fn on_threads(threads: usize, f: impl FnOnce() + Send) {
    #[cfg(all(feature = "std", feature = "rayon"))]
    crate::parallel::with_threads(threads, f).expect("thread pool");
    #[cfg(not(all(feature = "std", feature = "rayon")))]
    {
        let _ = threads;
        f();
    }
}

/// A fused forward conv: [`winograd2d::forward_fused`] or [`winograd3d::forward_fused`].
type FusedForward = fn(
    Simd,
    &Conv3dParams,
    &Padded,
    &[f32],
    &[f32],
    winograd::Fusion<'_>,
    &mut [f32],
    &mut winograd::WinogradScratch,
);

/// `forward`, plain and fused (input ReLU, bias, ReLU, residual), against the f64 reference,
/// through every SIMD level this CPU has, on `cases` with borders 1 and 2: every output within
/// `tolerance` of the sum of the absolute terms of that output, the borders zero. Returns the
/// worst error seen.
fn check_fused_forward(
    name: &str,
    forward: FusedForward,
    cases: Vec<Conv3dParams>,
    tolerance: f64,
    rng: &mut Rng,
) -> f64 {
    let mut scratch = winograd::WinogradScratch::new();
    let levels = levels_run_here(name);
    let mut worst = 0.0f64;
    for p in cases {
        let (batch, size, cin, cout) = (p.batch, p.size, p.in_channels, p.out_channels);
        let input = uniform(rng, p.input_len());
        let w = uniform(rng, p.weights_len());
        let b = uniform(rng, cout);
        let residual = uniform(rng, p.output_len());
        let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
        let relu_in: Vec<f32> = input.iter().map(|v| v.max(0.0)).collect();
        for pad in [1, 2] {
            let g = Padded::new(batch, size, pad);
            let padded = |v: &[f32], c: usize| padded_copy(&g, v, c);
            let (inp, res) = (padded(&input, cin), padded(&residual, cout));
            for fused in [false, true] {
                let x = if fused { &relu_in } else { &input };
                let (mut want, mut mag) = (vec![0.0; p.output_len()], vec![0.0; p.output_len()]);
                reference::forward(&p, x, &w, &b, &mut want);
                reference::forward(&p, &abs(x), &abs(&w), &abs(&b), &mut mag);
                if fused {
                    for ((v, m), r) in want.iter_mut().zip(&mut mag).zip(&residual) {
                        *v = v.max(0.0) + r;
                        *m += r.abs();
                    }
                }
                let fusion = winograd::Fusion {
                    relu_input: fused,
                    bias: Some(&b),
                    relu: fused,
                    residual: fused.then_some(&res[..]),
                };
                for &simd in &levels {
                    let mut out = vec![f32::NAN; g.len(cout)];
                    forward(simd, &p, &g, &inp, &w, fusion, &mut out, &mut scratch);
                    let mut bordered = out.clone();
                    g.zero_border(&mut bordered, cout);
                    assert_eq!(bordered, out, "{name} {p:?} pad {pad}: border not zero");
                    let mut got = vec![0.0; p.output_len()];
                    g.unpad_into(&out, cout, &mut got);
                    for (i, ((x, y), m)) in got.iter().zip(&want).zip(&mag).enumerate() {
                        let err = (x - y).abs() as f64 / (*m as f64 + 1e-6);
                        worst = worst.max(err);
                        assert!(
                            err <= tolerance,
                            "{name} {p:?} pad {pad} fused {fused} {simd}[{i}]: {x} vs {y} \
                             (magnitude {m})"
                        );
                    }
                }
            }
        }
    }
    note(&alloc::format!(
        "{name}: worst error {worst:.2e} of the magnitude"
    ));
    worst
}

/// F(4x4, 3x3) forward against the f64 reference ([`check_fused_forward`]) on tiles cut at every
/// edge: rows and columns of 1 to 33 voxels, 2 to 32 input channels, 32 and 64 outputs. The
/// tolerance is `2e-5` of the sum of the absolute terms of each output. The portable level
/// computes these by F(4, 3) (no 2D kernel without SIMD) and is held to the same bound.
#[test]
fn winograd2d_matches_reference() {
    let mut rng = Rng::new(seed(15));
    let name = "winograd2d_matches_reference";
    check_fused_forward(
        name,
        winograd2d::forward_fused,
        winograd2d_cases(),
        2e-5,
        &mut rng,
    );
}

/// Three-axis Winograd forward against the f64 reference ([`check_fused_forward`]): volumes of 1
/// to 13 planes (z tiles of four and the planes left over, in batches), rows and columns cut at
/// every edge, 2 to 32 input channels, 32 and 64 outputs. The tolerance is `1e-4` of the sum of
/// the absolute terms of each output; the worst error is printed. The portable level computes
/// these by F(4, 3) and is held to the same bound.
#[test]
fn winograd3d_matches_reference() {
    let mut rng = Rng::new(seed(19));
    let cases = [
        (2, [9, 5, 7], 32, 32),
        (1, [4, 9, 6], 2, 64),
        (1, [1, 1, 1], 3, 32),
        (3, [3, 8, 13], 17, 32),
        (1, [13, 17, 17], 32, 32),
        (2, [5, 4, 4], 32, 32),
    ]
    .into_iter()
    .map(conv_params)
    .collect();
    let name = "winograd3d_matches_reference";
    check_fused_forward(name, winograd3d::forward_fused, cases, 1e-4, &mut rng);
}

/// F(4x4, 3x3) weight and bias gradients against the f64-accumulated reference for every SIMD
/// level this CPU has: planes of 1 to 33 voxels (partial tiles at both ends), 2 to 32 input
/// channels, 32 and 64 outputs, borders 1 and 2, batches, 1 to 3 threads. The tolerance is `2e-5`
/// of the sum of the absolute terms of each gradient, the bound of the forward transforms (the
/// worst seen on AVX-512: `2.3e-6`); the worst error is printed. The portable level computes these by
/// F(4, 3) and is held to the same bound.
#[test]
fn winograd2d_weight_gradient_matches_reference() {
    let mut rng = Rng::new(seed(18));
    let mut scratch = winograd::WinogradScratch::new();
    let levels = levels_run_here("winograd2d_weight_gradient_matches_reference");
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
    let mut worst = 0.0f64;
    for (case, p) in winograd2d_cases().into_iter().enumerate() {
        let (batch, size, cin, cout) = (p.batch, p.size, p.in_channels, p.out_channels);
        let threads = 1 + case % 3;
        let input = uniform(&mut rng, p.input_len());
        let gout = uniform(&mut rng, p.output_len());
        let (mut want_w, mut want_b) = (vec![0.0; p.weights_len()], vec![0.0; cout]);
        reference::backward_weights(&p, &input, &gout, &mut want_w, &mut want_b);
        let (mut mag_w, mut mag_b) = (vec![0.0; p.weights_len()], vec![0.0; cout]);
        reference::backward_weights(&p, &abs(&input), &abs(&gout), &mut mag_w, &mut mag_b);
        for pad in [1, 2] {
            let g = Padded::new(batch, size, pad);
            let padded = |v: &[f32], c: usize| padded_copy(&g, v, c);
            let (inp, gop) = (padded(&input, cin), padded(&gout, cout));
            for &simd in &levels {
                let (mut gw, mut gb) = (vec![f32::NAN; p.weights_len()], vec![f32::NAN; cout]);
                on_threads(threads, || {
                    winograd2d::backward_weights(
                        simd,
                        &p,
                        &g,
                        &inp,
                        &gop,
                        &mut gw,
                        &mut gb,
                        &mut scratch,
                    )
                });
                let got = gw.iter().chain(&gb);
                let want = want_w.iter().chain(&want_b);
                let mag = mag_w.iter().chain(&mag_b);
                for (i, ((x, y), m)) in got.zip(want).zip(mag).enumerate() {
                    let err = (x - y).abs() as f64 / (*m as f64 + 1e-6);
                    worst = worst.max(err);
                    assert!(
                        err <= 2e-5,
                        "winograd2d weight grad {p:?} pad {pad} {simd}[{i}]: {x} vs {y} \
                         (magnitude {m})"
                    );
                }
            }
        }
    }
    note(&alloc::format!(
        "winograd2d_weight_gradient_matches_reference: worst error {worst:.2e} of the magnitude"
    ));
}

/// `forward` gives the same bits on 1 to 5 threads on a batch of 3 volumes of `size`.
#[cfg(all(feature = "std", feature = "rayon"))]
fn check_same_on_any_thread_count(name: &str, forward: FusedForward, size: [usize; 3]) {
    let mut rng = Rng::new(seed(16));
    let p = Conv3dParams {
        batch: 3,
        size,
        kernel: 3,
        in_channels: 32,
        out_channels: 32,
    };
    let g = Padded::new(p.batch, p.size, 1);
    let mut inp = vec![0.0; g.len(p.in_channels)];
    g.pad_from(&uniform(&mut rng, p.input_len()), p.in_channels, &mut inp);
    let (w, b) = (uniform(&mut rng, p.weights_len()), uniform(&mut rng, 32));
    let fusion = winograd::Fusion {
        relu_input: true,
        bias: Some(&b),
        relu: true,
        residual: None,
    };
    for simd in levels_run_here(name) {
        let run = |threads: usize| {
            crate::parallel::with_threads(threads, || {
                let mut out = vec![f32::NAN; g.len(32)];
                let mut scratch = winograd::WinogradScratch::new();
                forward(simd, &p, &g, &inp, &w, fusion, &mut out, &mut scratch);
                out.into_iter().map(f32::to_bits).collect::<Vec<u32>>()
            })
            .expect("thread pool")
        };
        let one = run(1);
        for threads in 2..=5 {
            assert_eq!(
                run(threads),
                one,
                "{name} {simd}: {threads} threads differ from one"
            );
        }
    }
}

/// F(4x4, 3x3) forward gives the same bits on 1 to 5 threads: each thread transforms the input
/// planes of its own run of output planes (a ring of three), so runs that start anywhere (inside
/// a batch item, at its border planes, across two items) must see the same tap planes.
#[cfg(all(feature = "std", feature = "rayon"))]
#[test]
fn winograd2d_is_the_same_on_any_thread_count() {
    let name = "winograd2d_is_the_same_on_any_thread_count";
    check_same_on_any_thread_count(name, winograd2d::forward_fused, [5, 9, 7]);
}

/// Three-axis Winograd forward gives the same bits on 1 to 5 threads: the z tiles are aligned
/// to each volume, not to the threads' runs, and each thread's ring of six planes starts empty.
#[cfg(all(feature = "std", feature = "rayon"))]
#[test]
fn winograd3d_is_the_same_on_any_thread_count() {
    let name = "winograd3d_is_the_same_on_any_thread_count";
    check_same_on_any_thread_count(name, winograd3d::forward_fused, [9, 9, 7]);
}

/// F(4, 3) forward and gradients against the reference on 1 to 5 threads: the weight gradient
/// transforms each thread's input and gradient planes as its run of planes reaches them (a ring
/// of three input planes), so runs that start inside a batch item or span two must still see
/// the right planes.
#[cfg(all(feature = "std", feature = "rayon"))]
#[test]
fn winograd_matches_reference_on_any_thread_count() {
    let mut rng = Rng::new(seed(17));
    let p = Conv3dParams {
        batch: 3,
        size: [5, 4, 7],
        kernel: 3,
        in_channels: 32,
        out_channels: 32,
    };
    for simd in levels_run_here("winograd_matches_reference_on_any_thread_count") {
        for threads in 1..=5 {
            crate::parallel::with_threads(threads, || {
                let mut scratch = winograd::WinogradScratch::new();
                check_winograd(simd, &p, 1, &mut rng, &mut scratch);
            })
            .expect("thread pool");
        }
    }
}
