//! One optimisation step of FFN training:
//!
//! 1. the [`Trainer`] prepares a batch (each generator's next FOV);
//! 2. the network computes logits, the mean loss and the flat gradient;
//! 3. the [`GradientReducer`] combines gradient and loss across replicas (identity on one machine;
//!    an allreduce-mean over a communicator in data-parallel training);
//! 4. the gradient is clipped by value and the optimiser updates the parameters with the learning
//!    rate of the schedule;
//! 5. the logits (of the parameters before the update, as in google/ffn) are written back into the
//!    examples' canvases.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

use super::TrainingError;
use super::schedule::LrSchedule;
use super::trainer::Trainer;
use crate::network::ConvStack3d;
use crate::network::grad_hooks::GradHook;

/// Combines the flat gradient (and the step's mean loss) across replicas before the optimiser
/// step. Every replica must end with the same values, e.g. the mean over replicas.
///
/// [`train_step`] calls, in order: [`learning_rate`](Self::learning_rate), then
/// [`batch_prepared`](Self::batch_prepared), [`forward_done`](Self::forward_done),
/// [`gradient_ready`](Self::gradient_ready) for each layer as the backward pass finishes it (last
/// layer first: a data-parallel reducer starts reducing it while backward goes on),
/// [`reduce`](Self::reduce) after backward, and [`step_done`](Self::step_done) after the
/// optimiser. Only `reduce` must be implemented.
pub trait GradientReducer {
    /// The error of the transport.
    type Error;

    /// The learning rate of `step` given the schedule's `base` rate (data-parallel training
    /// scales it with the number of replicas). Default: `base`.
    fn learning_rate(&self, base: f32, step: u64) -> f32 {
        let _ = step;
        base
    }

    /// The batch's examples are cut; forward starts.
    fn batch_prepared(&mut self) {}

    /// Forward is done with this replica's mean loss `loss`; backward starts.
    fn forward_done(&mut self, loss: f32) {
        let _ = loss;
    }

    /// `grads[range]` (passed as `values`) is final.
    fn gradient_ready(&mut self, range: Range<usize>, values: &[f32]) {
        let _ = (range, values);
    }

    /// After backward: makes `grads` and `loss` the same on every replica (e.g. their means).
    fn reduce(&mut self, grads: &mut [f32], loss: &mut f32) -> Result<(), Self::Error>;

    /// The optimiser step and the write-back of step `step` are done.
    fn step_done(&mut self, step: u64) -> Result<(), Self::Error> {
        let _ = step;
        Ok(())
    }
}

/// Passes the backward pass's notifications on to a reducer.
struct ReducerHook<'a, R>(&'a mut R);

impl<R: GradientReducer> GradHook for ReducerHook<'_, R> {
    fn forward_done(&mut self, loss: f32) {
        self.0.forward_done(loss);
    }

    fn ready(&mut self, range: Range<usize>, values: &[f32]) {
        self.0.gradient_ready(range, values);
    }
}

/// The reducer of single-replica training: leaves everything as it is.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoReduce;

impl GradientReducer for NoReduce {
    type Error = core::convert::Infallible;
    fn reduce(&mut self, _grads: &mut [f32], _loss: &mut f32) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// Learning rate and clipping of the step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepOptions {
    /// Learning rate as a function of the step.
    pub schedule: LrSchedule,
    /// Clip every gradient value to `[-c, c]` (google/ffn: 0.7 for SGD, `None` disables).
    pub clip: Option<f32>,
}

/// Buffers reused between steps.
#[derive(Clone, Debug)]
pub struct StepBuffers {
    /// The flat gradient (model_spec order).
    pub grads: Vec<f32>,
    /// The batch's logits.
    pub logits: Vec<f32>,
}

impl StepBuffers {
    /// Buffers for a network and a trainer.
    pub fn new(net: &ConvStack3d, trainer: &Trainer) -> Self {
        let n = trainer.config().batch_size * trainer.config().example.fov_len();
        Self {
            grads: vec![0.0; net.params().len()],
            logits: vec![0.0; n],
        }
    }
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepReport {
    /// Mean loss of the batch (after the reduction: over all replicas).
    pub loss: f32,
    /// Learning rate used.
    pub lr: f32,
}

/// Error of a step: the trainer's, or the reducer's.
#[derive(Debug)]
pub enum StepError<E> {
    /// Inconsistent trainer buffers or network sizes.
    Training(TrainingError),
    /// The gradient reduction failed (e.g. a replica died).
    Reduce(E),
}

impl<E: fmt::Display> fmt::Display for StepError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Training(e) => write!(f, "{e}"),
            Self::Reduce(e) => write!(f, "gradient reduction: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> core::error::Error for StepError<E> {}

/// Runs one step. `apply(params, grads, lr)` is the optimiser update.
pub fn train_step<R: GradientReducer>(
    trainer: &mut Trainer,
    net: &mut ConvStack3d,
    bufs: &mut StepBuffers,
    opts: &StepOptions,
    reducer: &mut R,
    apply: impl FnOnce(&mut [f32], &[f32], f32),
) -> Result<StepReport, StepError<R::Error>> {
    let fov = trainer.config().example.fov_len();
    let batch = trainer.config().batch_size;
    if net.fov_voxels() != fov
        || bufs.logits.len() != batch * fov
        || bufs.grads.len() != net.params().len()
    {
        return Err(StepError::Training(super::invalid(
            "network",
            alloc::format!("FOV of {fov} voxels and buffers for batch {batch}"),
            net.config().fov,
        )));
    }
    let step = trainer.steps();
    let lr = reducer.learning_rate(opts.schedule.at(step), step);
    trainer.prepare_batch().map_err(StepError::Training)?;
    reducer.batch_prepared();
    let inp = trainer.inputs();
    let mut loss = net.forward_backward_with_hook(
        inp.image,
        inp.seed,
        inp.labels,
        inp.batch,
        &mut bufs.logits,
        &mut bufs.grads,
        &mut ReducerHook(reducer),
    );
    reducer
        .reduce(&mut bufs.grads, &mut loss)
        .map_err(StepError::Reduce)?;
    if let Some(c) = opts.clip {
        crate::optim::clip_by_value(&mut bufs.grads, c);
    }
    apply(net.params_mut(), &bufs.grads, lr);
    trainer
        .complete_batch(&bufs.logits, loss)
        .map_err(StepError::Training)?;
    reducer.step_done(step).map_err(StepError::Reduce)?;
    Ok(StepReport { loss, lr })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_spec::ModelConfig;
    use crate::optim::{Momentum, Optimizer};
    use crate::rng::Rng;
    use crate::synth::{SynthConfig, generate};
    use crate::training::augmentation::AugmentConfig;
    use crate::training::coordinates::Coordinate;
    use crate::training::examples::ExampleConfig;
    use crate::training::trainer::{TrainerConfig, TrainingVolume};

    fn setup() -> (Trainer, ConvStack3d) {
        let v = generate(&SynthConfig {
            shape: [20, 20, 20],
            neurites: 5,
            ..SynthConfig::default()
        })
        .unwrap();
        let image = v.image.mapv(|g| (g as f32 - 128.0) / 33.0);
        let vols = vec![TrainingVolume {
            name: "s".into(),
            image,
            labels: v.labels,
        }];
        let coords: Vec<Coordinate> = (5..15)
            .flat_map(|z| {
                (5..15).map(move |x| Coordinate {
                    volume: 0,
                    zyx: [z, 10, x],
                })
            })
            .collect();
        let mut coords = coords;
        Rng::new(4).shuffle(&mut coords);
        let model = ModelConfig {
            depth: 2,
            features: 4,
            fov: [5, 5, 5],
            deltas: [2, 2, 2],
        };
        let ex = ExampleConfig {
            augment: AugmentConfig::default(),
            ..ExampleConfig::new(model.fov, model.deltas)
        };
        let trainer = Trainer::new(TrainerConfig::new(ex, 2, 11), vols, coords).unwrap();
        let net = ConvStack3d::new(model, 0.05, &mut Rng::new(1));
        (trainer, net)
    }

    /// Momentum SGD, whose velocity is the optimiser state.
    fn momentum(opt: &mut Momentum) -> impl FnOnce(&mut [f32], &[f32], f32) + '_ {
        move |p, g, lr| opt.step(p, g, lr)
    }

    #[test]
    fn resumed_run_matches_uninterrupted_run_bitwise() {
        let opts = StepOptions {
            schedule: LrSchedule::constant(0.01),
            clip: Some(0.7),
        };
        let (mut t, mut net) = setup();
        let mut bufs = StepBuffers::new(&net, &t);
        let mut vel = Momentum::new(0.9);
        for _ in 0..12 {
            train_step(
                &mut t,
                &mut net,
                &mut bufs,
                &opts,
                &mut NoReduce,
                momentum(&mut vel),
            )
            .unwrap();
        }
        let (mut a, mut net_a) = setup();
        let mut vel_a = Momentum::new(0.9);
        for _ in 0..6 {
            train_step(
                &mut a,
                &mut net_a,
                &mut bufs,
                &opts,
                &mut NoReduce,
                momentum(&mut vel_a),
            )
            .unwrap();
        }
        // "Checkpoint": parameters, optimiser state, trainer state; restore into fresh objects.
        let (params, state) = (net_a.params().to_vec(), a.save_state());
        let (mut b, _) = setup();
        b.load_state(&state).unwrap();
        let mut net_b = ConvStack3d::from_params(*net_a.config(), params).unwrap();
        let mut vel_b = Momentum::new(0.9);
        vel_b.load_state(&vel_a.state()).unwrap();
        for _ in 0..6 {
            train_step(
                &mut b,
                &mut net_b,
                &mut bufs,
                &opts,
                &mut NoReduce,
                momentum(&mut vel_b),
            )
            .unwrap();
        }
        assert_eq!(b.steps(), 12);
        let bits = |p: &[f32]| p.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(net.params()), bits(net_b.params()));
        assert_eq!(bits(&vel.state()[0].1), bits(&vel_b.state()[0].1));
        assert_eq!(t.save_state(), b.save_state());
        // And the weights did move.
        assert_ne!(bits(net.params()), bits(setup().1.params()));
    }

    #[test]
    fn reducer_sees_the_gradient_and_its_error_is_returned() {
        struct Halve(usize);
        impl GradientReducer for Halve {
            type Error = &'static str;
            fn reduce(&mut self, g: &mut [f32], loss: &mut f32) -> Result<(), &'static str> {
                self.0 += 1;
                if self.0 > 1 {
                    return Err("peer gone");
                }
                g.iter_mut().for_each(|v| *v *= 0.5);
                *loss *= 0.5;
                Ok(())
            }
        }
        let (mut t, mut net) = setup();
        let mut bufs = StepBuffers::new(&net, &t);
        let opts = StepOptions {
            schedule: LrSchedule::constant(0.01),
            clip: None,
        };
        let mut h = Halve(0);
        let r = train_step(&mut t, &mut net, &mut bufs, &opts, &mut h, |_, _, _| {}).unwrap();
        assert!(r.loss > 0.0 && r.lr == 0.01);
        let e = train_step(&mut t, &mut net, &mut bufs, &opts, &mut h, |_, _, _| {}).unwrap_err();
        assert!(alloc::format!("{e}").contains("peer gone"));
    }
}
