//! One synchronous data-parallel step with gradient averaging overlapped with the backward pass.
//!
//! The gradient is cut into the fixed buckets of a [`BucketPlan`] (whole layers, last layer first,
//! at least `--bucket-kib` each). As the backward pass reports a layer final
//! ([`GradHook::ready`]), its values are copied into the bucket's buffer; once a bucket is complete
//! (and all earlier ones were submitted) the communication thread starts its allreduce while the
//! backward pass goes on. The first bucket also carries the batch's mean loss. After backward the
//! step waits for the outstanding buckets ("exposed" communication), divides by the number of ranks
//! (as `allreduce_mean` does), clips, and applies the optimiser.
//!
//! Every rank submits the same buckets in the same order and every backend sums each element in
//! rank order, so the result is bitwise the same on all ranks, run after run, whatever the bucket
//! size, the overlap or the backend.

use std::cell::Cell;
use std::ops::Range;
use std::time::Instant;

use anyhow::{Result, anyhow, bail};
use ffn_core::network::ConvStack3d;
use ffn_core::network::grad_hooks::GradHook;
use ffn_core::optim::clip_by_value;
use ffn_core::training::distributed::BucketPlan;
use ffn_core::training::step::{NoReduce, StepBuffers, StepOptions, StepReport, train_step};
use ffn_core::training::trainer::Trainer;
use serde_json::json;

use super::DataParallel;
use super::comm_thread::{CommThread, Payload};
use super::timeline::{COMM, COMPUTE};

/// Where the time of the last step went (seconds).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Phases {
    /// Example preparation (cutting FOVs).
    pub prepare: f64,
    /// Forward pass and loss.
    pub forward: f64,
    /// Backward pass (including copies into the buckets).
    pub backward: f64,
    /// Waiting for communication after backward (exposed communication).
    pub wait: f64,
    /// Clipping, optimiser, write-back of the predictions.
    pub optimizer: f64,
    /// Sum of the bucket allreduce durations on the communication thread.
    pub comm_busy: f64,
    /// The whole step.
    pub total: f64,
}

/// The backward hook that fills and submits buckets.
struct Overlap<'a> {
    comm: Option<&'a CommThread>,
    plan: &'a BucketPlan,
    remaining: Vec<usize>,
    pool: &'a mut [Vec<f32>],
    overlap: bool,
    next: usize,
    loss: f32,
    forward_end: Option<Instant>,
    error: Option<anyhow::Error>,
}

impl Overlap<'_> {
    fn submit_ready(&mut self) {
        while self.next < self.remaining.len() && self.remaining[self.next] == 0 {
            let b = self.next;
            self.next += 1;
            let Some(comm) = self.comm else { continue };
            if b == 0 {
                self.pool[0][0] = self.loss;
            }
            let buf = std::mem::take(&mut self.pool[b]);
            if let Err(e) = comm.submit_sum(b, buf)
                && self.error.is_none()
            {
                self.error = Some(e);
            }
        }
    }
}

impl GradHook for Overlap<'_> {
    fn forward_done(&mut self, loss: f32) {
        self.loss = loss;
        self.forward_end = Some(Instant::now());
    }

    fn ready(&mut self, range: Range<usize>, values: &[f32]) {
        for (b, bucket) in self.plan.buckets().iter().enumerate() {
            let (lo, hi) = (range.start.max(bucket.start), range.end.min(bucket.end));
            if lo >= hi {
                continue;
            }
            if self.comm.is_some() {
                let at = lo - bucket.start + usize::from(b == 0);
                let dst = &mut self.pool[b];
                if dst.len() == bucket.len() + usize::from(b == 0) {
                    dst[at..at + (hi - lo)]
                        .copy_from_slice(&values[lo - range.start..hi - range.start]);
                }
            }
            self.remaining[b] = self.remaining[b].saturating_sub(hi - lo);
        }
        if self.overlap {
            self.submit_ready();
        }
    }
}

fn secs(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64()
}

impl DataParallel {
    /// One training step: batch, forward, backward with bucketed gradient averaging, clipping,
    /// optimiser update `apply(params, grads, lr)` with the rank-scaled learning rate, write-back.
    /// Without a communicator (and without a timeline) this is exactly the single-machine
    /// `train_step`.
    pub fn step(
        &self,
        trainer: &mut Trainer,
        net: &mut ConvStack3d,
        bufs: &mut StepBuffers,
        opts: &StepOptions,
        apply: impl FnOnce(&mut [f32], &[f32], f32),
    ) -> Result<StepReport> {
        if self.comm().is_none() && self.timeline.borrow().is_none() && !self.instrument {
            return train_step(trainer, net, bufs, opts, &mut NoReduce, apply)
                .map_err(|e| anyhow!("{e}"));
        }
        let fov = trainer.config().example.fov_len();
        let batch = trainer.config().batch_size;
        if net.fov_voxels() != fov
            || bufs.logits.len() != batch * fov
            || bufs.grads.len() != net.params().len()
        {
            bail!(
                "network FOV ({} voxels) or buffers do not match the trainer (FOV {fov} voxels, batch {batch})",
                net.fov_voxels()
            );
        }
        let step = trainer.steps();
        let lr = self.scaling().scale(opts.schedule.at(step), step);
        let t0 = Instant::now();
        trainer.prepare_batch();
        let t1 = Instant::now();
        let plan = self.plan_for(net)?;
        let mut pool = std::mem::take(&mut *self.pool.borrow_mut());
        let n = plan.buckets().len();
        let mut hook = Overlap {
            comm: self.comm(),
            plan: &plan,
            remaining: plan.buckets().iter().map(|b| b.len()).collect(),
            pool: &mut pool,
            overlap: self.args().overlap,
            next: 0,
            loss: 0.0,
            forward_end: None,
            error: None,
        };
        let inp = trainer.inputs();
        let local_loss = net.forward_backward_with_hook(
            inp.image,
            inp.seed,
            inp.labels,
            inp.batch,
            &mut bufs.logits,
            &mut bufs.grads,
            &mut hook,
        );
        let t2 = hook.forward_end.unwrap_or(t1);
        if hook.remaining.iter().any(|&r| r != 0) {
            bail!("internal: the backward pass did not report every gradient range");
        }
        hook.submit_ready();
        if let Some(e) = hook.error.take() {
            return Err(e);
        }
        let t3 = Instant::now();
        let mut loss = local_loss;
        let mut comm_spans = Vec::with_capacity(n);
        if let Some(comm) = self.comm() {
            let ranks = self.size() as f32;
            for (b, bucket) in plan.buckets().iter().enumerate() {
                let done = comm.next()?;
                if done.tag != b {
                    bail!(
                        "internal: bucket {} came back when {b} was expected",
                        done.tag
                    );
                }
                let buf = match done.result {
                    Ok(Payload::Floats(v)) => v,
                    Ok(Payload::Bytes(_)) => bail!("internal: bytes came back for a bucket"),
                    Err(e) => bail!("gradient allreduce (bucket {b} of {n}, step {step}): {e}"),
                };
                let shift = usize::from(b == 0);
                if b == 0 {
                    loss = buf[0] / ranks;
                }
                for (g, x) in bufs.grads[bucket.clone()].iter_mut().zip(&buf[shift..]) {
                    *g = x / ranks;
                }
                comm_spans.push((b, done.started, done.finished, buf.len() * 4));
                pool[b] = buf;
            }
        }
        *self.pool.borrow_mut() = pool;
        drop(plan);
        let t4 = Instant::now();
        if let Some(c) = opts.clip {
            clip_by_value(&mut bufs.grads, c);
        }
        apply(net.params_mut(), &bufs.grads, lr);
        trainer
            .complete_batch(&bufs.logits, loss)
            .map_err(|e| anyhow!("{e}"))?;
        let t5 = Instant::now();
        let busy: f64 = comm_spans.iter().map(|(_, a, b, _)| secs(*a, *b)).sum();
        self.last_phases.set(Phases {
            prepare: secs(t0, t1),
            forward: secs(t1, t2),
            backward: secs(t2, t3),
            wait: secs(t3, t4),
            optimizer: secs(t4, t5),
            comm_busy: busy,
            total: secs(t0, t5),
        });
        self.record_step(step, [t0, t1, t2, t3, t4, t5], &comm_spans)?;
        Ok(StepReport { loss, lr })
    }

    /// The phases of the last [`DataParallel::step`] (zeros for the plain single-machine step).
    pub fn last_phases(&self) -> Phases {
        self.last_phases.get()
    }

    fn record_step(
        &self,
        step: u64,
        t: [Instant; 6],
        spans: &[(usize, Instant, Instant, usize)],
    ) -> Result<()> {
        let window_done = {
            let mut tl = self.timeline.borrow_mut();
            let Some(state) = tl.as_mut() else {
                return Ok(());
            };
            if state.written {
                return Ok(());
            }
            let first = *state.first_step.get_or_insert(step);
            if step >= first + self.args().timeline_steps {
                true
            } else {
                let line = &mut state.line;
                for (name, a, b) in [
                    ("prepare", t[0], t[1]),
                    ("forward", t[1], t[2]),
                    ("backward", t[2], t[3]),
                    ("wait", t[3], t[4]),
                    ("optimizer", t[4], t[5]),
                ] {
                    line.record(name, COMPUTE, step, a, b, serde_json::Value::Null);
                }
                for &(b, s, e, bytes) in spans {
                    line.record(
                        "allreduce",
                        COMM,
                        step,
                        s,
                        e,
                        json!({"bucket": b, "bytes": bytes}),
                    );
                }
                step + 1 >= first + self.args().timeline_steps
            }
        };
        if window_done {
            self.flush_timeline()?;
        }
        Ok(())
    }
}

/// Keeps the phases of the last step.
pub(crate) type PhaseCell = Cell<Phases>;
