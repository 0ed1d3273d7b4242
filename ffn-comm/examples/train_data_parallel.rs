//! Data-parallel FFN training with the communicator chosen at run time, on a synthetic volume:
//!
//! `cargo run -p ffn-comm --example train_data_parallel -- local 2` (threads of one process),
//! `... -- shm 2` or `... -- zmq 2` (the example starts its own ranks with `ffn_comm::launch`),
//! `mpirun -n 2 .../examples/train_data_parallel mpi` (built with `--features mpi`).
//!
//! Every rank trains on its share of the examples; the gradients are averaged every step. The
//! run fails unless all ranks end with bitwise identical weights and the loss fell.
use anyhow::{Result, ensure};
use ffn_comm::data_parallel::{self, DataParallel, DataParallelOptions};
use ffn_comm::{Backend, launch};
use ffn_core::optim::{Adam, Optimizer};
use ffn_core::training::{coordinates::Coordinate, examples::ExampleConfig, schedule::LrSchedule};
use ffn_core::training::{step::*, trainer::*};
use ffn_core::{model_spec::ModelConfig, network::ConvStack3d, rng::Rng, synth};

fn train(group: &DataParallel) -> Result<(f32, f32)> {
    let model = ModelConfig::new(2, 8, [9; 3], [3; 3]);
    let v = synth::generate(&synth::SynthConfig::new([40; 3], 6))?;
    let volume = TrainingVolume::from_u8("synth", &v.image, v.labels, 128.0, 33.0);
    let zyx = |i: u32| [8 + i % 24, 8 + (i / 24) % 24, 20];
    let coords = (0..512).map(|i| Coordinate::new(0, zyx(i))).collect();
    let config = TrainerConfig::new(ExampleConfig::new(model.fov, model.deltas), 4, 1);
    let mut trainer = Trainer::new(group.trainer_config(config), vec![volume], coords)?;
    let mut net = ConvStack3d::new(model, 0.05, &mut Rng::new(1));
    let mut adam = Adam::new(0.9, 0.999, 1e-8);
    group.broadcast_initial(&mut net, &mut adam, 0)?;
    let opts = StepOptions {
        schedule: LrSchedule::constant(3e-3),
        clip: None,
    };
    let mut bufs = StepBuffers::new(&net, &trainer);
    let mut losses = Vec::new();
    for _ in 0..60 {
        let r = group.step(&mut trainer, &mut net, &mut bufs, &opts, |p, g, lr| {
            adam.step(p, g, lr)
        })?;
        losses.push(r.loss);
    }
    group.check_weights(trainer.steps(), net.params(), true)?;
    let mean = |l: &[f32]| l.iter().sum::<f32>() / l.len() as f32;
    Ok((mean(&losses[..10]), mean(&losses[50..])))
}

fn main() -> Result<()> {
    let mut argv = std::env::args().skip(1);
    let backend: Backend = argv.next().unwrap_or_else(|| "local".into()).parse()?;
    let ranks: usize = argv.next().map_or(Ok(2), |s| s.parse())?;
    if matches!(backend, Backend::Shm | Backend::Zmq) && std::env::var_os("RANK").is_none() {
        let args = vec![backend.to_string(), ranks.to_string()];
        std::process::exit(launch::launch(&launch::LaunchOptions::new(
            std::env::current_exe()?,
            args,
            ranks,
        ))?);
    }
    let opts = DataParallelOptions::over(backend, ranks);
    let (first, last) = data_parallel::run(&opts, train)?;
    if data_parallel::is_root_process(&opts) {
        println!("{backend}: mean loss of the first 10 steps {first:.4}, of the last 10 {last:.4}");
        ensure!(last < first, "the loss did not fall");
    }
    Ok(())
}
