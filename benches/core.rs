//! Criterion benches of ffn-core. Kernel benches are added with the engine.

use criterion::{Criterion, criterion_group, criterion_main};
use ffn_core::model_spec::ModelConfig;
use std::hint::black_box;

fn param_specs(c: &mut Criterion) {
    let cfg = ModelConfig { depth: 12, ..ModelConfig::default() };
    c.bench_function("param_specs_depth12", |b| b.iter(|| black_box(&cfg).param_specs()));
}

criterion_group!(benches, param_specs);
criterion_main!(benches);
