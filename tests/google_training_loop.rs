//! The training data path checked against an external reference: Google's FIB-25 model, run through
//! ffn-rs's own training example loop (`Trainer` and `train_step`: patches, soft labels, seed canvas,
//! the fixed FOV policy, write-back of the predictions) on FIB-25 `training_sample2` with the learning
//! rate at 0, must score the F1 and loss of a well-trained model; a freshly initialised network gives
//! the floor. A bug anywhere in that path (axes, normalisation, label centring, canvas updates, move
//! validity) drops Google's model towards the floor.

use std::path::PathBuf;

use ffn_core::loss::sigmoid_ce_mean;
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::ConvStack3d;
use ffn_core::rng::Rng;
use ffn_core::training::coordinates::{CoordinateConfig, build_coordinates};
use ffn_core::training::examples::ExampleConfig;
use ffn_core::training::partitions::{PartitionConfig, compute_partitions};
use ffn_core::training::schedule::LrSchedule;
use ffn_core::training::step::{NoReduce, StepBuffers, StepOptions, train_step};
use ffn_core::training::tracker::Metrics;
use ffn_core::training::trainer::{Trainer, TrainerConfig, TrainingVolume};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// FIB-25 `training_sample2` as one training volume, normalised with google/ffn's 128 / 33.
fn fib25() -> TrainingVolume {
    let sample = ffn_io::flyem_sample::FlyEmSample::read(&data().join("fib25")).expect("FIB-25");
    TrainingVolume {
        name: "fib25".into(),
        image: sample.image.mapv(|v| (v as f32 - 128.0) / 33.0),
        labels: sample.labels,
    }
}

/// Runs `steps` steps of batch 4 through the training loop: the first `full_steps` through
/// `train_step` at learning rate 0 (forward, loss, backward, clipping, update), the rest through
/// the same `Trainer` with the forward pass alone (what a step at learning rate 0 computes of the
/// logits, a third of the time). Returns the metrics of the finished examples and the mean loss,
/// and checks that the weights did not move.
fn score(
    net: &mut ConvStack3d,
    volume: TrainingVolume,
    full_steps: usize,
    steps: usize,
) -> (Metrics, f64) {
    let model = *net.config();
    let example = ExampleConfig::new(model.fov, model.deltas);
    let radius = [0, 1, 2].map(|d| model.fov[d] / 2 + model.deltas[d]);
    let parts = compute_partitions(
        volume.labels.view(),
        &PartitionConfig {
            lom_radius: radius,
            ..PartitionConfig::default()
        },
    )
    .expect("partitions");
    let coords = build_coordinates(
        &[parts.view()],
        &CoordinateConfig {
            margin: radius,
            max_per_class: Some(5000),
        },
        &mut Rng::new(7),
    )
    .expect("coordinates");
    let mut trainer =
        Trainer::new(TrainerConfig::new(example, 4, 7), vec![volume], coords).expect("trainer");
    let mut bufs = StepBuffers::new(net, &trainer);
    let opts = StepOptions {
        schedule: LrSchedule::constant(0.0),
        clip: Some(0.7),
    };
    let before = net.params().to_vec();
    let mut loss = 0.0;
    for _ in 0..full_steps {
        let report = train_step(
            &mut trainer,
            net,
            &mut bufs,
            &opts,
            &mut NoReduce,
            |p, g, lr| p.iter_mut().zip(g).for_each(|(p, g)| *p -= lr * g),
        )
        .expect("step");
        assert_eq!(report.lr, 0.0);
        loss += f64::from(report.loss);
    }
    let mut logits = vec![0f32; bufs.logits.len()];
    for _ in full_steps..steps {
        loss += f64::from(
            trainer
                .step_with(&mut logits, |image, seed, labels, batch, out| {
                    net.forward(image, seed, batch, out);
                    sigmoid_ce_mean(out, labels)
                })
                .expect("forward step"),
        );
    }
    assert!(
        net.params() == before.as_slice(),
        "learning rate 0 moved the weights"
    );
    (trainer.metrics(), loss / steps as f64)
}

#[test]
fn googles_model_scores_as_trained_in_our_training_loop_and_a_fresh_network_does_not() {
    let volume = fib25();
    let (model, params) =
        ffn_io::tf_bundle::load_tf_model(&data().join("google-fib25/model.ckpt-27465036"))
            .expect("Google's model");
    assert_eq!(
        model,
        ModelConfig {
            depth: 12,
            features: 32,
            fov: [33; 3],
            deltas: [8; 3]
        }
    );
    let mut google = ConvStack3d::from_params(model, params).expect("network");
    let (g, g_loss) = score(&mut google, volume.clone(), 6, 40);
    let mut fresh = ConvStack3d::new(model, 0.01, &mut Rng::new(1));
    let (f, f_loss) = score(&mut fresh, volume, 2, 10);
    println!(
        "Google's model: F1 {:.3} precision {:.3} recall {:.3} accuracy {:.3} loss {:.3} ({} examples); \
         fresh network: F1 {:.3} accuracy {:.3} loss {:.3} ({} examples)",
        g.f1,
        g.precision,
        g.recall,
        g.accuracy,
        g_loss,
        g.examples,
        f.f1,
        f.accuracy,
        f_loss,
        f.examples
    );
    // A trained model: most of the centre object found, little else (measured: see the README).
    assert!(g.examples >= 4, "too few finished examples: {}", g.examples);
    assert!(g.f1 > 0.7, "Google's model F1 {:.3} (expected > 0.7)", g.f1);
    assert!(
        g.accuracy > 0.85,
        "Google's model accuracy {:.3}",
        g.accuracy
    );
    assert!(
        g_loss < 0.6,
        "Google's model loss {g_loss:.3} (expected < 0.6)"
    );
    // The floor: a fresh network predicts nothing above logit(0.9) and scores the prior's loss.
    assert!(f.f1 < 0.1, "fresh network F1 {:.3}", f.f1);
    assert!(
        f_loss > 1.0,
        "fresh network loss {f_loss:.3} (expected > 1)"
    );
}
