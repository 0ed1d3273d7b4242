//! Model, optimiser and example state across ranks:
//!
//! - [`DataParallel::broadcast_initial`]: rank 0's parameters and optimiser state to every rank before
//!   step 1 (and a check that all ranks start at the same step);
//! - [`DataParallel::gather_trainer_states`]: every rank's example state into rank 0's checkpoint, as
//!   buffers `trainer_state` (rank 0, the single-rank name) and `trainer_state.rankR`, with
//!   `training_config.distributed = {world_size, trainer_state_bytes, examples_started}`;
//! - [`DataParallel::restore_trainer`]: `--resume` on the same number of ranks restores each rank's own
//!   state (exact continuation); on another number it restarts the examples at the step, after the
//!   coordinates all old ranks had reached (parameters and optimiser state are restored either way).

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail, ensure};
use ffn_core::network::ConvStack3d;
use ffn_core::training::trainer::Trainer;
use serde_json::{Value, json};

use super::DataParallel;
use ffn_core::optim::Optimizer;

/// Prefix of the checkpoint buffers that hold ranks 1.. example states.
pub const RANK_STATE_PREFIX: &str = "trainer_state.rank";

/// Whether a checkpoint buffer is another rank's example state (not optimiser state).
pub fn is_rank_state(name: &str) -> bool {
    name.starts_with(RANK_STATE_PREFIX)
}

/// Little-endian bytes as f32 words (zero-padded), the way checkpoints store byte buffers.
pub fn bytes_to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            f32::from_bits(u32::from_le_bytes(w))
        })
        .collect()
}

/// The first `len` bytes of f32 words.
pub fn f32_to_bytes(v: &[f32], len: usize) -> Result<Vec<u8>> {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
    ensure!(
        len <= b.len(),
        "trainer state: {len} bytes announced, {} stored",
        b.len()
    );
    Ok(b[..len].to_vec())
}

/// Named f32 buffers as one byte message: count, then (name length, name, value count, values).
fn encode_buffers(bufs: &[(String, Vec<f32>)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend((bufs.len() as u64).to_le_bytes());
    for (name, v) in bufs {
        out.extend((name.len() as u64).to_le_bytes());
        out.extend(name.as_bytes());
        out.extend((v.len() as u64).to_le_bytes());
        out.extend(v.iter().flat_map(|x| x.to_bits().to_le_bytes()));
    }
    out
}

fn decode_buffers(b: &[u8]) -> Result<Vec<(String, Vec<f32>)>> {
    struct Reader<'a>(&'a [u8], usize);
    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> Result<&'a [u8]> {
            let end = self
                .1
                .checked_add(n)
                .filter(|&e| e <= self.0.len())
                .ok_or_else(|| anyhow!("truncated optimiser state"))?;
            let s = &self.0[self.1..end];
            self.1 = end;
            Ok(s)
        }
        fn len(&mut self) -> Result<usize> {
            Ok(usize::try_from(u64::from_le_bytes(
                self.take(8)?.try_into()?,
            ))?)
        }
    }
    let mut r = Reader(b, 0);
    let n = r.len()?;
    let mut out = Vec::new();
    for _ in 0..n {
        let len = r.len()?;
        let name = String::from_utf8(r.take(len)?.to_vec()).context("optimiser state name")?;
        let count = r.len()?;
        let raw = r.take(
            count
                .checked_mul(4)
                .ok_or_else(|| anyhow!("optimiser state too large"))?,
        )?;
        let v = raw
            .chunks_exact(4)
            .map(|c| f32::from_bits(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect();
        out.push((name, v));
    }
    Ok(out)
}

impl DataParallel {
    /// Copies rank 0's parameters and optimiser state to every rank, after checking that every
    /// rank is at the same `step` (a rank that resumed from another checkpoint is an error).
    pub fn broadcast_initial(
        &self,
        net: &mut ConvStack3d,
        opt: &mut dyn Optimizer,
        step: u64,
    ) -> Result<()> {
        if self.comm().is_none() {
            return Ok(());
        }
        let root_step = self.broadcast(step.to_le_bytes().to_vec(), 0)?;
        let root_step = u64::from_le_bytes(
            root_step
                .try_into()
                .map_err(|_| anyhow!("internal: bad step"))?,
        );
        let late = self.ranks_where(root_step != step)?;
        if !late.is_empty() {
            bail!(
                "rank(s) {late:?} start at another step than rank 0 (step {root_step}; this rank {step}): \
                 every rank must resume from the same checkpoint directory"
            );
        }
        let params: Vec<u8> = net
            .params()
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect();
        let params = self.broadcast(params, 0)?;
        for (p, c) in net.params_mut().iter_mut().zip(params.chunks_exact(4)) {
            *p = f32::from_bits(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        }
        let state = if self.is_root() {
            encode_buffers(&opt.state())
        } else {
            Vec::new()
        };
        let state = self.broadcast_message(state, 0)?;
        if !self.is_root() {
            opt.load_state(&decode_buffers(&state)?)
                .map_err(|e| anyhow!("optimiser state from rank 0: {e}"))?;
        }
        Ok(())
    }

    /// Collects every rank's example state. On rank 0 appends ranks 1.. states to `buffers` (as
    /// `trainer_state.rankR`) and returns the `distributed` entry of the checkpoint's
    /// training_config; `Value::Null` without a communicator and on other ranks. Collective.
    pub fn gather_trainer_states(
        &self,
        trainer: &Trainer,
        buffers: &mut Vec<(String, Vec<f32>)>,
    ) -> Result<Value> {
        if self.comm().is_none() {
            return Ok(Value::Null);
        }
        let mine = trainer.save_state();
        let mut lens = vec![0u64; self.size()];
        let mut started = vec![0u64; self.size()];
        for r in 0..self.size() {
            let mut msg = Vec::new();
            if r == self.rank() {
                msg.extend(trainer.examples_started().to_le_bytes());
                msg.extend(&mine);
            }
            let msg = if r == 0 && self.is_root() {
                msg
            } else if r == 0 {
                Vec::new()
            } else {
                self.broadcast_message(msg, r)?
            };
            if self.is_root() {
                ensure!(msg.len() >= 8, "rank {r}: empty example state");
                started[r] = u64::from_le_bytes(msg[..8].try_into()?);
                lens[r] = (msg.len() - 8) as u64;
                if r > 0 {
                    buffers.push((format!("{RANK_STATE_PREFIX}{r}"), bytes_to_f32(&msg[8..])));
                }
            }
        }
        if !self.is_root() {
            return Ok(Value::Null);
        }
        Ok(
            json!({ "world_size": self.size(), "trainer_state_bytes": lens, "examples_started": started }),
        )
    }

    /// Restores this rank's example state from a checkpoint's `training_config` and buffers.
    ///
    /// Returns `false` when the caller's single-rank code path applies (the checkpoint was written
    /// by as many ranks as now run and this is rank 0: its state is the `trainer_state` buffer), and
    /// `true` when this function restored the trainer.
    pub fn restore_trainer(
        &self,
        trainer: &mut Trainer,
        path: &Path,
        training_config: &Value,
        rank0_state: &[f32],
        rank_states: &[(String, Vec<f32>)],
        step: u64,
    ) -> Result<bool> {
        let dist = training_config.get("distributed").filter(|v| !v.is_null());
        let saved_ranks = match dist {
            Some(d) => d
                .get("world_size")
                .and_then(Value::as_u64)
                .with_context(|| {
                    format!(
                        "{}: training_config.distributed.world_size missing",
                        path.display()
                    )
                })? as usize,
            None => 1,
        };
        let lens = |d: &Value| -> Vec<u64> {
            d.get("trainer_state_bytes")
                .and_then(Value::as_array)
                .map_or_else(Vec::new, |a| a.iter().filter_map(Value::as_u64).collect())
        };
        if saved_ranks == self.size() {
            if self.is_root() {
                return Ok(false);
            }
            let d = dist.with_context(|| format!("{}: no distributed state", path.display()))?;
            let name = format!("{RANK_STATE_PREFIX}{}", self.rank());
            let buf = rank_states
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, b)| b)
                .with_context(|| format!("{}: no {name} buffer", path.display()))?;
            let len = lens(d).get(self.rank()).copied().with_context(|| {
                format!(
                    "{}: training_config.distributed.trainer_state_bytes",
                    path.display()
                )
            })?;
            trainer
                .load_state(&f32_to_bytes(buf, len as usize)?)
                .with_context(|| {
                    format!("{}: example state of rank {}", path.display(), self.rank())
                })?;
            ensure!(
                trainer.steps() == step,
                "{}: step {step} but the state of rank {} is at {}",
                path.display(),
                self.rank(),
                trainer.steps()
            );
            return Ok(true);
        }
        // Another number of ranks: continue after the coordinates every old rank had reached.
        let min_started = match dist {
            Some(d) => d
                .get("examples_started")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().filter_map(Value::as_u64).min())
                .with_context(|| {
                    format!(
                        "{}: training_config.distributed.examples_started",
                        path.display()
                    )
                })?,
            None => {
                let len = training_config
                    .get("trainer_state_bytes")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                trainer
                    .load_state(&f32_to_bytes(rank0_state, len as usize)?)
                    .with_context(|| format!("{}", path.display()))?;
                trainer.examples_started()
            }
        };
        let consumed = min_started.saturating_mul(saved_ranks as u64);
        let cursor = consumed.div_ceil(self.size() as u64);
        trainer.restart_at(step, cursor);
        if self.is_root() {
            eprintln!(
                "resuming a {saved_ranks}-rank checkpoint on {} ranks: parameters and optimiser state restored; \
                 examples restart after coordinate {consumed} (per-rank example states apply only to {saved_ranks} ranks)",
                self.size()
            );
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_round_trip_and_truncation_is_an_error() {
        let bufs = vec![
            ("m".to_string(), vec![1.0, -2.5, f32::MIN_POSITIVE]),
            ("t".to_string(), vec![]),
        ];
        let enc = encode_buffers(&bufs);
        assert_eq!(decode_buffers(&enc).unwrap(), bufs);
        assert!(decode_buffers(&enc[..enc.len() - 1]).is_err());
        assert!(decode_buffers(&[]).is_err());
        assert_eq!(f32_to_bytes(&bytes_to_f32(b"abcde"), 5).unwrap(), b"abcde");
        assert!(f32_to_bytes(&[0.0], 5).is_err());
        assert!(is_rank_state("trainer_state.rank3") && !is_rank_state("trainer_state"));
    }
}
