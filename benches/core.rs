//! Criterion benches of ffn-core: conv kernels on the FFN's main shape (33^3 voxels, 32 -> 32
//! channels, 3x3x3) and the whole network's forward pass and training step.
//!
//! The conv group also times the Winograd kernels (`winograd_*`) on the same shape.
//! Throughput is reported in "elements" that are FLOPs (2 per multiply-add, the analytic count of
//! the PyTorch peer), so criterion's `Gelem/s` reads as GFLOP/s. Threads: rayon's global pool
//! (`RAYON_NUM_THREADS=2 cargo bench --bench core` for the two-thread figure).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ffn_core::conv::winograd::{self, WinogradScratch};
use ffn_core::conv::{Conv3dParams, Simd, fast};
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::{ConvStack3d, analytic_flops};
use ffn_core::rng::Rng;
use ffn_core::tensor::Padded;
use std::hint::black_box;

fn param_specs(c: &mut Criterion) {
    let cfg = ModelConfig {
        depth: 12,
        ..ModelConfig::default()
    };
    c.bench_function("param_specs_depth12", |b| {
        b.iter(|| black_box(&cfg).param_specs())
    });
}

fn uniform(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.next_f32() - 0.5).collect()
}

fn conv_kernels(c: &mut Criterion) {
    let p = Conv3dParams {
        batch: 1,
        size: [33; 3],
        kernel: 3,
        in_channels: 32,
        out_channels: 32,
    };
    let g = Padded::new(1, p.size, 1);
    let mut rng = Rng::new(0);
    let mut input = vec![0.0; g.len(32)];
    g.pad_from(&uniform(&mut rng, p.input_len()), 32, &mut input);
    let mut gout = vec![0.0; g.len(32)];
    g.pad_from(&uniform(&mut rng, p.output_len()), 32, &mut gout);
    let w = uniform(&mut rng, p.weights_len());
    let bias = uniform(&mut rng, 32);
    let mut out = vec![0.0; g.len(32)];
    let mut flipped = vec![0.0; w.len()];
    fast::flip_weights(&p, &w, &mut flipped);
    let (mut gw, mut gb, mut scratch) = (vec![0.0; w.len()], vec![0.0; 32], Vec::new());

    let simd = Simd::active();
    let mut group = c.benchmark_group("conv3d_33cube_32to32");
    group.sample_size(10);
    group.throughput(Throughput::Elements(p.forward_flops()));
    group.bench_function("forward", |b| {
        b.iter(|| fast::forward(simd, &p, &g, black_box(&input), &w, &bias, true, &mut out))
    });
    group.bench_function("input_grad", |b| {
        b.iter(|| fast::backward_input(simd, &p, &g, black_box(&gout), &flipped, &mut out))
    });
    group.bench_function("weight_grad", |b| {
        b.iter(|| {
            fast::backward_weights(
                simd,
                &p,
                &g,
                black_box(&input),
                &gout,
                &mut gw,
                &mut gb,
                &mut scratch,
            )
        })
    });
    // The Winograd path on the same shape; throughput still counts the direct FLOPs.
    let mut ws = WinogradScratch::new();
    group.bench_function("winograd_forward", |b| {
        b.iter(|| {
            winograd::forward(
                simd,
                &p,
                &g,
                black_box(&input),
                &w,
                Some(&bias),
                true,
                &mut out,
                &mut ws,
            )
        })
    });
    group.bench_function("winograd_input_grad", |b| {
        b.iter(|| {
            winograd::forward(
                simd,
                &p,
                &g,
                black_box(&gout),
                &flipped,
                None,
                false,
                &mut out,
                &mut ws,
            )
        })
    });
    group.bench_function("winograd_weight_grad", |b| {
        b.iter(|| {
            winograd::backward_weights(
                simd,
                &p,
                &g,
                black_box(&input),
                &gout,
                &mut gw,
                &mut gb,
                &mut ws,
            )
        })
    });
    group.finish();
}

fn network(c: &mut Criterion) {
    let cfg = ModelConfig::default(); // depth 9, FOV 33^3, 32 features
    let flops = analytic_flops(&cfg);
    let mut rng = Rng::new(1);
    let mut net = ConvStack3d::new(cfg, 0.01, &mut rng);
    let batch = 1;
    let n = batch * net.fov_voxels();
    let image = uniform(&mut rng, n);
    let seed = vec![-2.944_439; n];
    let labels: Vec<f32> = (0..n)
        .map(|i| if i % 2 == 0 { 0.95 } else { 0.05 })
        .collect();
    let mut logits = vec![0.0; n];
    let mut grads = vec![0.0; net.params().len()];

    let mut group = c.benchmark_group("convstack3d_depth9_fov33_batch1");
    group.sample_size(10);
    group.throughput(Throughput::Elements(flops.forward * batch as u64));
    group.bench_function("forward", |b| {
        b.iter(|| net.forward(black_box(&image), &seed, batch, &mut logits))
    });
    group.throughput(Throughput::Elements(flops.train * batch as u64));
    group.bench_function("train_step", |b| {
        b.iter(|| {
            net.forward_backward(
                black_box(&image),
                &seed,
                &labels,
                batch,
                &mut logits,
                &mut grads,
            )
        })
    });
    group.finish();
}

criterion_group!(benches, param_specs, conv_kernels, network);
criterion_main!(benches);
