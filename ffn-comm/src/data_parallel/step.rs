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
use ffn_core::training::distributed::BucketPlan;
use ffn_core::training::step::{
    GradientReducer, NoReduce, StepBuffers, StepError, StepOptions, StepReport, train_step,
};
use ffn_core::training::trainer::Trainer;
use serde_json::json;

use super::DataParallel;
use super::comm_thread::Payload;
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

/// The [`GradientReducer`] of a data-parallel group for one step: fills the buckets of the
/// group's [`BucketPlan`] as the backward pass finishes layers and submits each complete bucket's
/// allreduce to the communication thread (with overlap), then waits for them and divides by the
/// number of ranks; scales the learning rate with the number of ranks; times the phases of the
/// step (and records them in the timeline). Made by [`DataParallel::reducer`], used by
/// [`train_step`] for one step.
pub struct BucketReducer<'a> {
    group: &'a DataParallel,
    plan: BucketPlan,
    remaining: Vec<usize>,
    pool: Vec<Vec<f32>>,
    next: usize,
    loss: f32,
    error: Option<anyhow::Error>,
    /// Start, batch prepared, forward done, backward done, reduction done.
    times: [Option<Instant>; 5],
    spans: Vec<(usize, Instant, Instant, usize)>,
}

impl BucketReducer<'_> {
    fn submit_ready(&mut self) {
        while self.next < self.remaining.len() && self.remaining[self.next] == 0 {
            let b = self.next;
            self.next += 1;
            let Some(comm) = self.group.comm() else {
                continue;
            };
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

    /// Waits for every bucket's allreduce and writes the means into `grads` and `loss`.
    fn collect(&mut self, grads: &mut [f32], loss: &mut f32) -> Result<()> {
        let Some(comm) = self.group.comm() else {
            return Ok(());
        };
        let ranks = self.group.size() as f32;
        let n = self.plan.buckets().len();
        for (b, bucket) in self.plan.buckets().iter().enumerate() {
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
                Err(e) => bail!("gradient allreduce (bucket {b} of {n}): {e}"),
            };
            let shift = usize::from(b == 0);
            if b == 0 {
                *loss = buf[0] / ranks;
            }
            for (g, x) in grads[bucket.clone()].iter_mut().zip(&buf[shift..]) {
                *g = x / ranks;
            }
            self.spans
                .push((b, done.started, done.finished, buf.len() * 4));
            self.pool[b] = buf;
        }
        Ok(())
    }
}

impl GradientReducer for BucketReducer<'_> {
    type Error = anyhow::Error;

    fn learning_rate(&self, base: f32, step: u64) -> f32 {
        self.group.scaling().scale(base, step)
    }

    fn batch_prepared(&mut self) {
        self.times[1] = Some(Instant::now());
    }

    fn forward_done(&mut self, loss: f32) {
        self.loss = loss;
        self.times[2] = Some(Instant::now());
    }

    fn gradient_ready(&mut self, range: Range<usize>, values: &[f32]) {
        let with_comm = self.group.comm().is_some();
        for (b, bucket) in self.plan.buckets().iter().enumerate() {
            let (lo, hi) = (range.start.max(bucket.start), range.end.min(bucket.end));
            if lo >= hi {
                continue;
            }
            if with_comm {
                let at = lo - bucket.start + usize::from(b == 0);
                let dst = &mut self.pool[b];
                if dst.len() == bucket.len() + usize::from(b == 0) {
                    dst[at..at + (hi - lo)]
                        .copy_from_slice(&values[lo - range.start..hi - range.start]);
                }
            }
            self.remaining[b] = self.remaining[b].saturating_sub(hi - lo);
        }
        if self.group.args().overlap {
            self.submit_ready();
        }
    }

    fn reduce(&mut self, grads: &mut [f32], loss: &mut f32) -> Result<()> {
        if self.remaining.iter().any(|&r| r != 0) {
            bail!("internal: the backward pass did not report every gradient range");
        }
        self.submit_ready();
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.times[3] = Some(Instant::now());
        let collected = self.collect(grads, loss);
        self.times[4] = Some(Instant::now());
        collected
    }

    fn step_done(&mut self, step: u64) -> Result<()> {
        let end = Instant::now();
        let at = |i: usize| self.times[i].unwrap_or(end);
        let t = [at(0), at(1), at(2), at(3), at(4), end];
        let busy: f64 = self.spans.iter().map(|(_, a, b, _)| secs(*a, *b)).sum();
        self.group.last_phases.set(Phases {
            prepare: secs(t[0], t[1]),
            forward: secs(t[1], t[2]),
            backward: secs(t[2], t[3]),
            wait: secs(t[3], t[4]),
            optimizer: secs(t[4], t[5]),
            comm_busy: busy,
            total: secs(t[0], t[5]),
        });
        self.group.record_step(step, t, &self.spans)
    }
}

impl Drop for BucketReducer<'_> {
    /// Gives the bucket buffers back to the group for the next step.
    fn drop(&mut self) {
        *self.group.pool.borrow_mut() = std::mem::take(&mut self.pool);
    }
}

fn secs(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64()
}

impl DataParallel {
    /// The reducer for one step of `net` (see [`BucketReducer`]): pass it to [`train_step`].
    pub fn reducer(&self, net: &ConvStack3d) -> Result<BucketReducer<'_>> {
        let plan = self.plan_for(net)?.clone();
        let pool = std::mem::take(&mut *self.pool.borrow_mut());
        Ok(BucketReducer {
            group: self,
            remaining: plan.buckets().iter().map(|b| b.len()).collect(),
            plan,
            pool,
            next: 0,
            loss: 0.0,
            error: None,
            times: [Some(Instant::now()), None, None, None, None],
            spans: Vec::new(),
        })
    }

    /// One training step: [`train_step`] with this group's [`BucketReducer`] (batch, forward,
    /// backward with bucketed gradient averaging, clipping, optimiser update
    /// `apply(params, grads, lr)` with the rank-scaled learning rate, write-back). Without a
    /// communicator, a timeline or phase measurement, the reducer is [`NoReduce`]: exactly the
    /// single-machine step.
    pub fn step(
        &self,
        trainer: &mut Trainer,
        net: &mut ConvStack3d,
        bufs: &mut StepBuffers,
        opts: &StepOptions,
        apply: impl FnOnce(&mut [f32], &[f32], f32),
    ) -> Result<StepReport> {
        let step = trainer.steps();
        if self.comm().is_none() && self.timeline.borrow().is_none() && !self.instrument {
            train_step(trainer, net, bufs, opts, &mut NoReduce, apply).map_err(|e| anyhow!("{e}"))
        } else {
            let mut reducer = self.reducer(net)?;
            train_step(trainer, net, bufs, opts, &mut reducer, apply).map_err(|e| match e {
                StepError::Reduce(e) => e.context(format!("step {step}")),
                StepError::Training(e) => anyhow!("{e}"),
            })
        }
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
