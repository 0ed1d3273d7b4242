//! `ffn train`, `ffn infer` and `ffn eval` from Rust on files: a synthetic volume in HDF5, a
//! short training run with checkpoints (`ffn_io::training`), the newest checkpoint segmenting the
//! volume (`ffn_io::infer_volume`), and its scores against the ground truth.
//!
//! `cargo run -p ffn-io --example train_and_segment`. Fails unless the loss fell and the
//! segmentation has segments.
use anyhow::{Result, ensure};
use ffn_comm::data_parallel::DataParallelOptions;
use ffn_core::inference::SeedPolicy;
use ffn_core::metrics::{MetricOptions, evaluate};
use ffn_core::{
    model_spec::ModelConfig, network::ConvStack3d, synth, training::coordinates::Coordinate,
};
use ffn_io::coords::{CoordinateFile, write_coords};
use ffn_io::training::{OptimizerKind, TrainOptions, train};
use ffn_io::{InferOptions, VolumeSpec, infer_volume, load_model, read_labels};

fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let spec = |ds: &str| VolumeSpec {
        path: dir.path().join("synth.h5"),
        dataset: ds.into(),
    };
    let v = synth::generate(&synth::SynthConfig {
        shape: [32; 3],
        neurites: 6,
        ..Default::default()
    })?;
    ffn_io::write_image_u8(&spec("image"), &v.image)?;
    ffn_io::write_labels(&spec("labels"), &v.labels)?;
    let coords = (0..400)
        .map(|i| Coordinate {
            volume: 0,
            zyx: [8 + i % 16, 8 + (i / 16) % 16, 16],
        })
        .collect();
    let file = CoordinateFile {
        volumes: vec!["synth".into()],
        coords,
    };
    write_coords(&dir.path().join("synth.coords"), &file)?;

    let model = ModelConfig {
        depth: 3,
        features: 8,
        fov: [9; 3],
        deltas: [3; 3],
    };
    let named = |ds: &str| vec![("synth".to_string(), spec(ds))];
    let coords_path = dir.path().join("synth.coords");
    let mut opts = TrainOptions::new(
        named("image"),
        named("labels"),
        coords_path,
        dir.path().join("run"),
        model,
    );
    (
        opts.optimizer,
        opts.learning_rate,
        opts.max_steps,
        opts.report_every,
    ) = (OptimizerKind::Adam, 1e-3, 400, 50);
    let summary = train(&opts, &DataParallelOptions::default(), |_, step| {
        if let Some(row) = &step.row {
            println!("step {}: loss {:.4}, F1 {:.3}", row.step, row.loss, row.f1);
        }
    })?;
    let (first, last) = (&summary.rows[0], &summary.rows[summary.rows.len() - 1]);
    ensure!(
        last.loss < first.loss,
        "the loss did not fall: {} -> {}",
        first.loss,
        last.loss
    );

    let trained = load_model(&summary.checkpoint)?;
    let mut net = ConvStack3d::from_params(trained.config, trained.params)?;
    let mut infer = InferOptions::new(spec("image"), spec("segmentation"));
    infer.normalisation.trained = trained.normalisation;
    infer.segment.deltas = model.deltas;
    infer.segment.seeds = SeedPolicy::Grid { step: 4 };
    infer.segment.inference.min_segment_size = 100;
    let done = infer_volume(&infer, &mut net, &mut |_| {})?;
    let segments = done.segmentation.map_or(0, |s| s.origins.len());
    let (truth, test) = (
        read_labels(&spec("labels"))?,
        read_labels(&spec("segmentation"))?,
    );
    let s = evaluate(
        truth.as_slice().unwrap_or(&[]),
        test.as_slice().unwrap_or(&[]),
        &MetricOptions::default(),
    )?;
    println!(
        "{segments} segments; VI split {:.3} merge {:.3}; adapted Rand error {:.3}",
        s.voi_split, s.voi_merge, s.adapted_rand_error
    );
    ensure!(segments > 0, "the trained model made no segment");
    Ok(())
}
