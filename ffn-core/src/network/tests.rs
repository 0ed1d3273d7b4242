//! Network tests: init, parameter checks, a plain-layout reference composition, buffer reuse and a
//! finite-difference check of the whole network.
#![allow(clippy::needless_range_loop)]

use super::*;
use crate::conv::reference;
use crate::loss;
use crate::testutil::{assert_close, seed, uniform};

fn tiny() -> ModelConfig {
    ModelConfig {
        depth: 3,
        features: 3,
        fov: [3, 5, 3],
        deltas: [1, 1, 1],
    }
}

fn inputs(rng: &mut Rng, n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let image = uniform(rng, n);
    let seed: Vec<f32> = uniform(rng, n).iter().map(|v| v * 3.0).collect();
    let labels: Vec<f32> = (0..n)
        .map(|_| if rng.next_f32() > 0.5 { 0.95 } else { 0.05 })
        .collect();
    (image, seed, labels)
}

/// The network composed from the reference conv on the plain layout.
fn reference_forward(net: &ConvStack3d, image: &[f32], seed: &[f32], batch: usize) -> Vec<f32> {
    let cfg = *net.config();
    let p = net.params();
    let conv = |li: usize, x: &[f32]| {
        let l = net.layers[li];
        let c = l.conv(batch, cfg.fov);
        let mut out = vec![0.0; c.output_len()];
        reference::forward(
            &c,
            x,
            &p[l.offset..][..l.wlen()],
            &p[l.offset + l.wlen()..][..l.cout],
            &mut out,
        );
        out
    };
    let relu = |x: &[f32]| x.iter().map(|v| v.max(0.0)).collect::<Vec<f32>>();
    let mut input = vec![0.0; 2 * image.len()];
    layers::concat2(image, seed, &mut input);
    let mut x = conv(1, &relu(&conv(0, &input)));
    for m in 1..cfg.depth {
        let y = conv(2 * m + 1, &relu(&conv(2 * m, &relu(&x))));
        x.iter_mut().zip(&y).for_each(|(x, y)| *x += y);
    }
    let mut out = conv(2 * cfg.depth, &relu(&x));
    out.iter_mut().zip(seed).for_each(|(o, s)| *o += s);
    out
}

#[test]
fn init_is_seeded_truncated_normal_with_zero_biases() {
    let cfg = tiny();
    let a = ConvStack3d::new(cfg, 0.01, &mut Rng::new(1));
    let b = ConvStack3d::new(cfg, 0.01, &mut Rng::new(1));
    let c = ConvStack3d::new(cfg, 0.01, &mut Rng::new(2));
    assert_eq!(a.params(), b.params());
    assert_ne!(a.params(), c.params());
    assert_eq!(a.params().len(), cfg.num_params());
    for spec in cfg.param_specs() {
        let v = &a.params()[spec.offset..spec.offset + spec.len()];
        if spec.name.ends_with("biases") {
            assert!(v.iter().all(|x| *x == 0.0), "{}", spec.name);
        } else {
            assert!(
                v.iter().all(|x| x.abs() <= 0.02 && *x != 0.0),
                "{}",
                spec.name
            );
        }
    }
}

#[test]
fn from_params_checks_length_and_config() {
    let cfg = tiny();
    let err = ConvStack3d::from_params(cfg, vec![0.0; 5]).unwrap_err();
    assert!(
        matches!(err, CoreError::LengthMismatch { expected, actual: 5, .. } if expected == cfg.num_params())
    );
    let bad = ModelConfig {
        fov: [4, 5, 3],
        ..cfg
    };
    let err = ConvStack3d::from_params(bad, vec![0.0; cfg.num_params()]).unwrap_err();
    assert!(alloc::format!("{err}").contains("model.fov"));
    assert!(ConvStack3d::from_params(cfg, vec![0.0; cfg.num_params()]).is_ok());
}

#[test]
fn forward_matches_reference_composition_and_buffers_are_reused_safely() {
    let cfg = tiny();
    let mut rng = Rng::new(seed(21));
    let mut net = ConvStack3d::new(cfg, 0.3, &mut rng);
    let n = net.fov_voxels();
    for batch in [2, 1, 2] {
        let (image, seedv, labels) = inputs(&mut rng, batch * n);
        let want = reference_forward(&net, &image, &seedv, batch);
        let mut out = vec![0.0; batch * n];
        net.forward(&image, &seedv, batch, &mut out);
        assert_close("forward", &out, &want, 1e-5, 1e-5);
        let mut logits = vec![0.0; batch * n];
        let mut grads = vec![0.0; net.params().len()];
        let l = net.forward_backward(&image, &seedv, &labels, batch, &mut logits, &mut grads);
        assert_close("forward_backward logits", &logits, &want, 1e-5, 1e-5);
        assert!((l - loss::sigmoid_ce_mean(&want, &labels)).abs() < 1e-6);
        // Inference after training reuses the training buffers and still agrees.
        net.forward(&image, &seedv, batch, &mut out);
        assert_close("forward after training", &out, &want, 1e-5, 1e-5);
    }
}

/// At 32 features the SIMD kernels run (where AVX2 is present): every algorithm, inference (fused
/// ReLU and residual) and training forward, against the reference composition; the gradients of
/// Winograd (F(4x4, 3x3)), Winograd1d (F(4, 3)) and Winograd3d (forward and input gradients
/// over three axes: 5 planes per volume make a z tile and a plane left over) agree with
/// direct's.
#[test]
fn both_conv_algorithms_match_the_reference_at_32_features() {
    let cfg = ModelConfig {
        depth: 2,
        features: 32,
        fov: [5, 3, 9],
        deltas: [1, 1, 1],
    };
    let mut rng = Rng::new(seed(23));
    let mut net = ConvStack3d::new(cfg, 0.1, &mut rng);
    let batch = 2;
    let n = batch * net.fov_voxels();
    let (image, seedv, labels) = inputs(&mut rng, n);
    let want = reference_forward(&net, &image, &seedv, batch);
    let mut grads = Vec::new();
    for algorithm in [
        ConvAlgorithm::Winograd,
        ConvAlgorithm::Direct,
        ConvAlgorithm::Winograd1d,
        ConvAlgorithm::Winograd3d,
    ] {
        net.set_conv_algorithm(algorithm);
        net.release_buffers();
        let what = alloc::format!("{algorithm:?}");
        let mut out = vec![0.0; n];
        net.forward(&image, &seedv, batch, &mut out);
        assert_close(&alloc::format!("{what} forward"), &out, &want, 1e-4, 1e-4);
        let mut g = vec![0.0; net.params().len()];
        net.forward_backward(&image, &seedv, &labels, batch, &mut out, &mut g);
        assert_close(
            &alloc::format!("{what} training logits"),
            &out,
            &want,
            1e-4,
            1e-4,
        );
        grads.push(g);
    }
    let scale = grads[1].iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0);
    assert_ne!(
        grads[3], grads[0],
        "Winograd3d's own passes ran in training"
    );
    let others = [
        ("Winograd", &grads[0]),
        ("Winograd1d", &grads[2]),
        ("Winograd3d", &grads[3]),
    ];
    for (name, g) in others {
        assert_close(
            &alloc::format!("{name} vs direct gradients"),
            g,
            &grads[1],
            1e-3,
            1e-5 * scale,
        );
    }
}

/// The bf16 precision: inference close to float32's (relative L2 under 0.1; 5e-2 here, where the
/// random weights make each output a small sum of larger terms) but not equal (the rounding
/// happened),
/// new weights used after `params_mut` (the kept bf16 weights are dropped), and training (logits
/// and gradients) bit for bit as `Winograd`'s.
#[test]
fn bf16_precision_rounds_inference_only() {
    let cfg = ModelConfig {
        depth: 3,
        features: 32,
        fov: [5, 9, 9],
        deltas: [1, 1, 1],
    };
    let mut rng = Rng::new(seed(29));
    let mut net = ConvStack3d::new(cfg, 0.1, &mut rng);
    let n = net.fov_voxels();
    let (image, seedv, labels) = inputs(&mut rng, n);
    let run = |net: &mut ConvStack3d, algorithm| {
        net.set_conv_algorithm(algorithm);
        let mut out = vec![0.0; n];
        net.forward(&image, &seedv, 1, &mut out);
        let (mut logits, mut g) = (vec![0.0; n], vec![0.0; net.params().len()]);
        net.forward_backward(&image, &seedv, &labels, 1, &mut logits, &mut g);
        (out, logits, g)
    };
    let relative_l2 = |a: &[f32], b: &[f32]| {
        let d: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
        let m: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
        (d / m).sqrt()
    };
    let (f32_out, f32_logits, f32_grads) = run(&mut net, ConvAlgorithm::Winograd);
    let (bf16_out, bf16_logits, bf16_grads) = run(&mut net, ConvAlgorithm::Bf16);
    if crate::conv::Simd::best() >= crate::conv::Simd::Avx2 {
        let e = relative_l2(&bf16_out, &f32_out);
        assert!(
            e > 1e-4 && e < 0.1,
            "bf16 inference vs float32: relative L2 {e:.2e}"
        );
    } else {
        assert_eq!(
            bf16_out, f32_out,
            "no SIMD kernels: bf16 computes in float32"
        );
    }
    assert_eq!(bf16_logits, f32_logits, "training logits under bf16");
    assert_eq!(bf16_grads, f32_grads, "training gradients under bf16");
    // New weights reach the bf16 forward pass.
    let scale = 1.5;
    net.params_mut().iter_mut().for_each(|v| *v *= scale);
    let mut scaled = vec![0.0; n];
    net.forward(&image, &seedv, 1, &mut scaled);
    assert!(
        relative_l2(&scaled, &bf16_out) > 0.3,
        "kept bf16 weights not dropped"
    );
    net.set_conv_algorithm(ConvAlgorithm::Winograd);
    let mut want = vec![0.0; n];
    net.forward(&image, &seedv, 1, &mut want);
    assert!(
        relative_l2(&scaled, &want) < 0.1,
        "bf16 after params_mut vs float32"
    );
}

#[test]
fn whole_network_gradient_matches_finite_differences() {
    let cfg = ModelConfig {
        depth: 2,
        features: 3,
        fov: [3, 3, 5],
        deltas: [1, 1, 1],
    };
    let mut rng = Rng::new(seed(8));
    let mut net = ConvStack3d::new(cfg, 0.15, &mut rng);
    // Non-zero biases so that their gradients are exercised at a generic point.
    let specs = cfg.param_specs();
    for s in specs.iter().filter(|s| s.name.ends_with("biases")) {
        for v in &mut net.params_mut()[s.offset..s.offset + s.len()] {
            *v = rng.next_f32() * 0.2 - 0.1;
        }
    }
    let batch = 2;
    let n = batch * net.fov_voxels();
    let (image, seedv, labels) = inputs(&mut rng, n);
    let mut logits = vec![0.0; n];
    let mut grads = vec![0.0; net.params().len()];
    net.forward_backward(&image, &seedv, &labels, batch, &mut logits, &mut grads);
    let scale = grads.iter().fold(0f32, |m, g| m.max(g.abs()));
    assert!(scale > 1e-3, "gradients too small to test: {scale}");
    // Small steps: larger ones cross many ReLU kinks and measure curvature, not the gradient.
    let eps = 1e-3f32;
    let mut bad = Vec::new();
    for i in 0..grads.len() {
        let loss_at = |net: &mut ConvStack3d, v: f32| {
            net.params_mut()[i] = v;
            let mut out = vec![0.0; n];
            net.forward(&image, &seedv, batch, &mut out);
            out.iter()
                .zip(&labels)
                .map(|(x, z)| loss::sigmoid_ce(*x, *z))
                .sum::<f64>()
                / n as f64
        };
        let orig = net.params()[i];
        let fd =
            (loss_at(&mut net, orig + eps) - loss_at(&mut net, orig - eps)) / (2.0 * eps as f64);
        net.params_mut()[i] = orig;
        let err = (fd - grads[i] as f64).abs();
        if err > 1e-3 * scale as f64 + 2e-2 * (grads[i] as f64).abs() {
            bad.push((i, fd, grads[i]));
        }
    }
    // A finite difference can straddle a ReLU kink; allow a handful of such parameters, no more.
    assert!(
        bad.len() * 100 <= grads.len(),
        "{} of {} gradients off: {:?}",
        bad.len(),
        grads.len(),
        &bad[..bad.len().min(10)]
    );
}

#[test]
fn analytic_flops_match_published_figures() {
    // perf-targets.md: depth 9 forward 33.9 GFLOP, training 101.6; depth 12: 45.8 and 137.4.
    let f9 = analytic_flops(&ModelConfig::default());
    let r = |x: u64| (x + 50_000_000) / 100_000_000;
    assert_eq!((r(f9.forward), r(f9.train)), (339, 1016));
    let f12 = analytic_flops(&ModelConfig {
        depth: 12,
        ..ModelConfig::default()
    });
    assert_eq!((r(f12.forward), r(f12.train)), (458, 1374));
}

/// Gradients of the network composed from the reference conv kernels (plain layout).
fn reference_grads(
    net: &ConvStack3d,
    image: &[f32],
    seed: &[f32],
    labels: &[f32],
    batch: usize,
) -> Vec<f32> {
    let cfg = *net.config();
    let p = net.params();
    let d = cfg.depth;
    let conv = |li: usize, x: &[f32]| {
        let l = net.layers[li];
        let c = l.conv(batch, cfg.fov);
        let mut out = vec![0.0; c.output_len()];
        reference::forward(
            &c,
            x,
            &p[l.offset..][..l.wlen()],
            &p[l.offset + l.wlen()..][..l.cout],
            &mut out,
        );
        out
    };
    let mut grads = vec![0.0; p.len()];
    // Backward of layer li: fills its gradients, returns the input gradient.
    let mut back = |li: usize, x: &[f32], gout: &[f32]| {
        let l = net.layers[li];
        let c = l.conv(batch, cfg.fov);
        let (gw, rest) = grads[l.offset..].split_at_mut(l.wlen());
        reference::backward_weights(&c, x, gout, gw, &mut rest[..l.cout]);
        let mut gin = vec![0.0; c.input_len()];
        reference::backward_input(&c, gout, &p[l.offset..][..l.wlen()], &mut gin);
        gin
    };
    let relu = |x: &[f32]| x.iter().map(|v| v.max(0.0)).collect::<Vec<f32>>();
    let mask = |g: &mut [f32], y: &[f32]| {
        g.iter_mut().zip(y).for_each(|(g, y)| {
            if *y <= 0.0 {
                *g = 0.0
            }
        })
    };
    let mut input = vec![0.0; 2 * image.len()];
    layers::concat2(image, seed, &mut input);
    let h = relu(&conv(0, &input));
    let mut xs = vec![conv(1, &h)];
    let mut rs = Vec::new();
    let mut us = Vec::new();
    for m in 1..d {
        rs.push(relu(&xs[m - 1]));
        us.push(relu(&conv(2 * m, &rs[m - 1])));
        let mut x = conv(2 * m + 1, &us[m - 1]);
        x.iter_mut().zip(&xs[m - 1]).for_each(|(x, y)| *x += y);
        xs.push(x);
    }
    let rl = relu(&xs[d - 1]);
    let mut logits = conv(2 * d, &rl);
    logits.iter_mut().zip(seed).for_each(|(o, s)| *o += s);
    let mut gl = vec![0.0; logits.len()];
    loss::sigmoid_ce_mean_grad(&logits, labels, &mut gl);
    let mut gx = back(2 * d, &rl, &gl);
    mask(&mut gx, &xs[d - 1]);
    for m in (1..d).rev() {
        let mut gu = back(2 * m + 1, &us[m - 1], &gx);
        mask(&mut gu, &us[m - 1]);
        let gr = back(2 * m, &rs[m - 1], &gu);
        for ((g, r), x) in gx.iter_mut().zip(&gr).zip(&xs[m - 1]) {
            if *x > 0.0 {
                *g += r;
            }
        }
    }
    let mut gh = back(1, &h, &gx);
    mask(&mut gh, &h);
    back(0, &input, &gh);
    grads
}

#[test]
fn backward_matches_reference_composition() {
    let cfg = ModelConfig {
        depth: 3,
        features: 4,
        fov: [5, 3, 3],
        deltas: [1, 1, 1],
    };
    let mut rng = Rng::new(seed(31));
    let mut net = ConvStack3d::new(cfg, 0.3, &mut rng);
    for batch in [1, 3] {
        let n = batch * net.fov_voxels();
        let (image, seedv, labels) = inputs(&mut rng, n);
        let want = reference_grads(&net, &image, &seedv, &labels, batch);
        let mut logits = vec![0.0; n];
        let mut grads = vec![f32::NAN; net.params().len()];
        net.forward_backward(&image, &seedv, &labels, batch, &mut logits, &mut grads);
        let scale = want.iter().fold(0f32, |m, g| m.max(g.abs()));
        for s in cfg.param_specs() {
            let r = s.offset..s.offset + s.len();
            assert_close(&s.name, &grads[r.clone()], &want[r], 1e-3, 1e-5 * scale);
        }
    }
}

/// The F(4x4, 3x3) weights kept between forward passes follow the parameters: after
/// `params_mut` changes them, a forward pass gives the bits of a network built with the new
/// parameters (and differs from the pass before, so the check can fail).
#[test]
fn kept_transformed_weights_follow_parameter_changes() {
    let cfg = ModelConfig {
        depth: 2,
        features: 32,
        fov: [5, 7, 9],
        deltas: [1, 1, 1],
    };
    let mut rng = Rng::new(seed(31));
    let mut net = ConvStack3d::new(cfg, 0.1, &mut rng);
    let n = net.fov_voxels();
    let (image, seedv, _) = inputs(&mut rng, n);
    let forward = |net: &mut ConvStack3d| {
        let mut out = vec![0.0; n];
        net.forward(&image, &seedv, 1, &mut out);
        out.into_iter().map(f32::to_bits).collect::<Vec<u32>>()
    };
    let before = forward(&mut net);
    assert_eq!(forward(&mut net), before, "a second pass with kept weights");
    net.params_mut().iter_mut().for_each(|w| *w *= 1.5);
    let after = forward(&mut net);
    assert_ne!(after, before, "the parameters changed");
    let mut fresh = ConvStack3d::from_params(cfg, net.params().to_vec()).expect("same config");
    fresh.set_simd(net.simd());
    assert_eq!(after, forward(&mut fresh), "kept weights went stale");
}

#[test]
fn glorot_init_is_seeded_uniform_within_each_layers_bound() {
    let cfg = tiny();
    let a = ConvStack3d::with_init(cfg, WeightInit::GlorotUniform, &mut Rng::new(1));
    let b = ConvStack3d::with_init(cfg, WeightInit::GlorotUniform, &mut Rng::new(1));
    assert_eq!(a.params(), b.params());
    for spec in cfg.param_specs() {
        let v = &a.params()[spec.offset..spec.offset + spec.len()];
        if spec.name.ends_with("biases") {
            assert!(v.iter().all(|x| *x == 0.0), "{}", spec.name);
            continue;
        }
        let k = spec.shape[0] * spec.shape[1] * spec.shape[2];
        let limit = (6.0 / (k * (spec.shape[3] + spec.shape[4])) as f64).sqrt() as f32;
        assert!(v.iter().all(|x| x.abs() <= limit), "{}", spec.name);
        // A uniform draw over (-a, a) has mean 0 and variance a^2 / 3: both within 4 standard
        // errors for the layer's sample size, and the draws use most of the range.
        let n = v.len() as f64;
        let mean = v.iter().map(|x| *x as f64).sum::<f64>() / n;
        let var = v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>() / n;
        let a2 = (limit as f64).powi(2);
        assert!(
            mean.abs() < 4.0 * (a2 / 3.0 / n).sqrt(),
            "{}: mean {mean}",
            spec.name
        );
        let var_se = (a2 * a2 * (1.0 / 5.0 - 1.0 / 9.0) / n).sqrt();
        assert!(
            (var - a2 / 3.0).abs() < 4.0 * var_se,
            "{}: var {var}",
            spec.name
        );
        let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(n < 8.0 || max > 0.5 * limit, "{}: max {max}", spec.name);
    }
}
