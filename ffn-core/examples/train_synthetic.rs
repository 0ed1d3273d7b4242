//! Training from Rust without files: a synthetic labelled volume, google/ffn's partitions and
//! class-balanced coordinates, a `Trainer` of training examples, and `train_step` with Adam on one
//! machine (`NoReduce`). Prints the loss of every step and exits non-zero unless the loss is finite
//! and the last steps' mean loss is below the first steps'.
//!
//! Run: `cargo run -p ffn-core --example train_synthetic`
use ffn_core::optim::{Adam, Optimizer};
use ffn_core::synth::{SynthConfig, generate};
use ffn_core::training::coordinates::{CoordinateConfig, build_coordinates};
use ffn_core::training::partitions::{PartitionConfig, compute_partitions};
use ffn_core::training::{examples::ExampleConfig, schedule::LrSchedule, step::*, trainer::*};
use ffn_core::{model_spec::ModelConfig, network::ConvStack3d, rng::Rng};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (steps, fov, deltas) = (40, [9; 3], [2; 3]);
    let synth = generate(&SynthConfig::new([32; 3], 8))?;
    let volume = TrainingVolume::from_u8("synth", &synth.image, synth.labels, 128.0, 33.0);
    let radius = [0, 1, 2].map(|a| fov[a] / 2 + deltas[a]);
    let (mut parts_cfg, margin) = (PartitionConfig::default(), radius);
    (parts_cfg.lom_radius, parts_cfg.min_size) = (radius, 100);
    let parts = compute_partitions(volume.labels.view(), &parts_cfg)?;
    let max_per_class = Some(2000);
    let coord_cfg = CoordinateConfig {
        margin,
        max_per_class,
    };
    let coords = build_coordinates(&[parts.view()], &coord_cfg, &mut Rng::new(1))?;

    let model = ModelConfig::new(2, 8, fov, deltas);
    let mut net = ConvStack3d::new(model, 0.01, &mut Rng::new(2));
    let config = TrainerConfig::new(ExampleConfig::new(fov, deltas), 4, 3);
    let mut trainer = Trainer::new(config, vec![volume], coords)?;
    let mut bufs = StepBuffers::new(&net, &trainer);
    let (schedule, clip) = (LrSchedule::constant(0.001), None);
    let opts = StepOptions { schedule, clip };
    let mut adam = Adam::default();
    let mut losses = Vec::new();
    for step in 0..steps {
        let apply = |p: &mut [f32], g: &[f32], lr| adam.step(p, g, lr);
        let (t, n, b) = (&mut trainer, &mut net, &mut bufs);
        let report = train_step(t, n, b, &opts, &mut NoReduce, apply)?;
        println!("step {step:>2}: loss {:.4} (lr {})", report.loss, report.lr);
        losses.push(report.loss);
    }
    let mean = |l: &[f32]| l.iter().sum::<f32>() / l.len() as f32;
    let (first, last) = (mean(&losses[..10]), mean(&losses[steps - 10..]));
    println!("mean loss: first 10 steps {first:.4}, last 10 steps {last:.4}");
    if !losses.iter().all(|l| l.is_finite()) || last >= first {
        return Err(format!("training did not lower the loss: {first} -> {last}").into());
    }
    Ok(())
}
