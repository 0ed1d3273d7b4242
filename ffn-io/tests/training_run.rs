//! The training run from Rust, without the CLI: train, resume, and the same weights as an
//! uninterrupted run; one machine and two local ranks through the same call.

use ffn_comm::Backend;
use ffn_comm::data_parallel::DataParallelOptions;
use ffn_core::model_spec::ModelConfig;
use ffn_core::synth::{SynthConfig, generate};
use ffn_core::training::coordinates::Coordinate;
use ffn_io::coords::{CoordinateFile, write_coords};
use ffn_io::training::{OptimizerKind, TrainOptions, train};
use ffn_io::{VolumeSpec, load_checkpoint, write_image_u8, write_labels};

/// A synthetic volume and 64 coordinates in `dir`; options for a tiny network.
fn options(dir: &std::path::Path, out: &str) -> TrainOptions {
    let file = dir.join("synth.h5");
    let spec = |ds: &str| VolumeSpec::new(file.clone(), ds);
    if !file.exists() {
        let v = generate(&SynthConfig {
            shape: [24, 24, 24],
            neurites: 5,
            ..SynthConfig::default()
        })
        .unwrap();
        write_image_u8(&spec("image"), &v.image).unwrap();
        write_labels(&spec("labels"), &v.labels).unwrap();
        let coords = (0..64)
            .map(|i| Coordinate {
                volume: 0,
                zyx: [8 + i % 8, 8 + (i / 8) % 8, 12],
            })
            .collect();
        let file = CoordinateFile {
            volumes: vec!["synth".into()],
            coords,
        };
        write_coords(&dir.join("synth.coords"), &file).unwrap();
    }
    let model = ModelConfig {
        depth: 2,
        features: 4,
        fov: [5, 5, 5],
        deltas: [2, 2, 2],
    };
    TrainOptions {
        batch_size: 2,
        optimizer: OptimizerKind::Adam,
        report_every: 2,
        seed: 3,
        ..TrainOptions::new(
            vec![("synth".into(), spec("image"))],
            vec![("synth".into(), spec("labels"))],
            dir.join("synth.coords"),
            dir.join(out),
            model,
        )
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let one = DataParallelOptions::default();
    let whole = TrainOptions {
        max_steps: 8,
        ..options(dir.path(), "whole")
    };
    let observed = std::sync::atomic::AtomicUsize::new(0);
    let a = train(&whole, &one, |_, step| {
        if step.row.is_some() {
            observed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(a.steps, 8);
    assert_eq!(a.rows.len(), 4);
    assert_eq!(
        observed.into_inner(),
        4,
        "the callback sees every metrics row"
    );
    assert!(a.rows.iter().all(|r| r.loss.is_finite() && r.loss > 0.0));
    let first = TrainOptions {
        max_steps: 5,
        ..options(dir.path(), "split")
    };
    train(&first, &one, |_, _| {}).unwrap();
    let rest = TrainOptions {
        max_steps: 8,
        resume: true,
        ..options(dir.path(), "split")
    };
    let b = train(&rest, &one, |_, _| {}).unwrap();
    assert_eq!(b.steps, 8);
    let (ca, cb) = (
        load_checkpoint(&a.checkpoint).unwrap(),
        load_checkpoint(&b.checkpoint).unwrap(),
    );
    assert_eq!(bits(&ca.params), bits(&cb.params), "weights after resume");
    assert_eq!(a.rows.last().map(|r| r.loss), b.rows.last().map(|r| r.loss));
    // A changed setting is refused, naming the field.
    let changed = TrainOptions {
        learning_rate: 0.01,
        max_steps: 9,
        ..rest
    };
    let e = format!("{:#}", train(&changed, &one, |_, _| {}).unwrap_err());
    assert!(
        e.contains("cannot resume") && e.contains("learning_rate"),
        "{e}"
    );
}

#[test]
fn two_local_ranks_train_through_the_same_call() {
    let dir = tempfile::tempdir().unwrap();
    let opts = TrainOptions {
        max_steps: 4,
        ..options(dir.path(), "two")
    };
    let rows = std::sync::Mutex::new(Vec::new());
    let s = train(
        &opts,
        &DataParallelOptions::over(Backend::Local, 2),
        |_, outcome| {
            if let Some(row) = &outcome.row {
                rows.lock().unwrap().push(row.clone());
            }
        },
    )
    .unwrap();
    let ck = load_checkpoint(&s.checkpoint).unwrap();
    assert_eq!(ck.step, 4);
    assert_eq!(ck.training_config["distributed"]["world_size"], 2);
    // The metrics are those of both ranks' examples: both ranks report the same rows.
    let rows = rows.into_inner().unwrap();
    assert_eq!(rows.len(), 4, "two reports on each of two ranks");
    let metrics = |step| {
        rows.iter()
            .filter(|r| r.step == step)
            .map(|r| (r.loss, r.precision, r.recall, r.f1, r.accuracy, r.examples))
            .collect::<Vec<_>>()
    };
    for step in [2, 4] {
        let at = metrics(step);
        assert_eq!(at.len(), 2, "step {step}");
        assert_eq!(at[0], at[1], "step {step}");
    }
    assert!(rows.iter().all(|r| r.examples > 0), "{rows:?}");
}

#[test]
fn training_refuses_bf16_and_takes_winograd3d() {
    use ffn_core::conv::winograd::ConvAlgorithm;
    let dir = tempfile::tempdir().unwrap();
    let opts = TrainOptions {
        max_steps: 1,
        conv: ConvAlgorithm::Bf16,
        ..options(dir.path(), "bf16")
    };
    let err = train(&opts, &DataParallelOptions::default(), |_, _| {}).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("conv (--conv): bf16 is an algorithm of inference only"),
        "{msg}"
    );
    assert!(!dir.path().join("bf16").join("checkpoints").exists());
    let opts = TrainOptions {
        max_steps: 2,
        conv: ConvAlgorithm::Winograd3d,
        ..options(dir.path(), "three")
    };
    let s = train(&opts, &DataParallelOptions::default(), |_, _| {}).unwrap();
    assert_eq!(s.steps, 2);
    assert!(s.rows.iter().all(|r| r.loss.is_finite()));
}
