use ffn_core::conv::{Conv3dParams, fast};
use ffn_core::tensor::Padded;
use std::time::Instant;
fn cpu() -> f64 { std::fs::read_to_string("/proc/thread-self/schedstat").unwrap().split_whitespace().next().unwrap().parse::<f64>().unwrap() * 1e-9 }
fn t<F: FnMut()>(name: &str, flops: f64, mut f: F) {
    f();
    let mut best = f64::INFINITY;
    let mut bestc = f64::INFINITY;
    for _ in 0..5 { let c = cpu(); let s = Instant::now(); f(); best = best.min(s.elapsed().as_secs_f64()); bestc = bestc.min(cpu() - c); }
    println!("{name}: {:.1} ms wall {:.1} GFLOP/s; cpu {:.1} ms {:.1} GFLOP/cpu-s", best * 1e3, flops / best / 1e9, bestc * 1e3, flops / bestc / 1e9);
}
fn main() {
    let threads: usize = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(1);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| {
        let p = Conv3dParams { batch: 1, size: [33; 3], kernel: 3, in_channels: 32, out_channels: 32 };
        let g = Padded::new(1, p.size, 1);
        let mut input = vec![0.0f32; g.len(32)];
        let plain: Vec<f32> = (0..p.input_len()).map(|i| ((i * 7919) % 1000) as f32 * 1e-3).collect();
        g.pad_from(&plain, 32, &mut input);
        let w: Vec<f32> = (0..p.weights_len()).map(|i| ((i * 31) % 100) as f32 * 1e-3).collect();
        let b = vec![0.1f32; 32];
        let mut out = vec![0.0f32; g.len(32)];
        let fl = p.forward_flops() as f64;
        t("forward", fl, || fast::forward(&p, &g, &input, &w, &b, false, &mut out));
        let mut gi = vec![0.0f32; g.len(32)];
        t("backward_input", fl, || fast::backward_input(&p, &g, &input, &w, &mut gi));
        let (mut gw, mut gb, mut s) = (vec![0.0f32; w.len()], vec![0.0f32; 32], Vec::new());
        t("backward_weights", fl, || fast::backward_weights(&p, &g, &input, &input, &mut gw, &mut gb, &mut s));
        let (m, k, n) = (35937usize, 864usize, 32usize);
        let a = vec![0.5f32; m * k];
        let bm = vec![0.5f32; k * n];
        let mut c = vec![0.0f32; m * n];
        t("raw gemm 35937x864x32", 2.0 * (m * k * n) as f64, || unsafe {
            gemm::gemm(m, n, k, c.as_mut_ptr(), 1, n as isize, false, a.as_ptr(), 1, k as isize, bm.as_ptr(), 1, n as isize, 1.0, 1.0, false, false, false, gemm::Parallelism::None);
        });
    });
}
