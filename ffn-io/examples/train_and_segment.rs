//! `ffn synth`, `ffn train`, `ffn infer` and `ffn eval` from Rust on files: a synthetic volume in
//! HDF5, a short training run with checkpoints (`ffn_io::training`), inference settings recorded
//! with its newest checkpoint (`ffn set-inference`), that model segmenting the volume
//! (`ffn_io::infer_volume`), and its scores against the ground truth.
//!
//! `cargo run -p ffn-io --example train_and_segment`. Fails unless the loss fell and the
//! segmentation has segments.
use anyhow::{Result, ensure};
use ffn_comm::data_parallel::DataParallelOptions;
use ffn_core::{inference::SeedPolicy, metrics::MetricOptions, model_spec::ModelConfig};
use ffn_core::{network::ConvStack3d, synth::SynthConfig, training::coordinates::Coordinate};
use ffn_io::coords::{CoordinateFile, write_coords};
use ffn_io::inference_defaults::{InferenceDefaults, RecordOptions, write_with_defaults};
use ffn_io::training::{OptimizerKind, TrainOptions, train};
use ffn_io::{InferOptions, VolumeSpec, evaluation::evaluate_volumes, infer_volume, load_model};

fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (file, coords) = (dir.path().join("synth.h5"), dir.path().join("synth.coords"));
    let synth = SynthConfig::new([32; 3], 6);
    let (image, labels) = ffn_io::synth::write_synthetic(&file, "image", "labels", &synth)?;
    let zyx = |i: u32| [8 + i % 16, 8 + (i / 16) % 16, 16];
    let points = (0..400).map(|i| Coordinate::new(0, zyx(i))).collect();
    let volumes = vec!["synth".into()];
    write_coords(
        &coords,
        &CoordinateFile {
            volumes,
            coords: points,
        },
    )?;

    let model = ModelConfig::new(3, 8, [9; 3], [3; 3]);
    let named = |spec: &VolumeSpec| vec![("synth".to_string(), spec.clone())];
    let mut opts = TrainOptions::new(named(&image), named(&labels), coords, dir.path(), model);
    (opts.optimizer, opts.learning_rate) = (OptimizerKind::Adam, 1e-3);
    (opts.max_steps, opts.report_every) = (400, 50);
    let summary = train(&opts, &DataParallelOptions::default(), |_, step| {
        if let Some(row) = &step.row {
            println!("step {}: loss {:.4}, F1 {:.3}", row.step, row.loss, row.f1);
        }
    })?;
    let (first, last) = (&summary.rows[0], &summary.rows[summary.rows.len() - 1]);
    ensure!(
        last.loss < first.loss,
        "loss {} -> {}",
        first.loss,
        last.loss
    );

    // The inference settings chosen for the model travel with it (`ffn set-inference`).
    let tuned = dir.path().join("tuned.safetensors");
    let defaults = InferenceDefaults {
        min_segment_size: Some(100),
        chosen_on: Some("this example".into()),
        ..Default::default()
    };
    let record = RecordOptions {
        model: summary.checkpoint.clone(),
        defaults,
    };
    write_with_defaults(&record, &tuned)?;

    let trained = load_model(&tuned)?;
    let settings = trained.inference_defaults.unwrap_or_default();
    let mut net = ConvStack3d::from_params(trained.config, trained.params)?;
    let segmentation = VolumeSpec::new(&file, "segmentation");
    let mut infer = InferOptions::new(image, segmentation.clone());
    infer.normalisation.trained = trained.normalisation;
    infer.segment.deltas = model.deltas;
    infer.segment.seeds = SeedPolicy::Grid { step: 4 };
    settings.apply(&mut infer.segment.inference);
    ensure!(
        infer.segment.inference.min_segment_size == 100,
        "{settings}"
    );
    let done = infer_volume(&infer, &mut net, &mut |_| {})?;
    let segments = done.segmentation.map_or(0, |s| s.origins.len());
    let e = evaluate_volumes(&labels, &segmentation, None, &MetricOptions::default(), 0)?;
    let s = e.scores;
    println!(
        "{segments} segments; VI split {:.3} merge {:.3}; adapted Rand error {:.3}",
        s.voi_split, s.voi_merge, s.adapted_rand_error
    );
    ensure!(segments > 0, "the trained model made no segment");
    Ok(())
}
