//! Checks that keep ranks from silently diverging or hanging:
//!
//! - [`DataParallel::check_config`]: before anything else, every rank compares a fingerprint of its whole
//!   configuration with rank 0's; on a mismatch rank 0's and the first differing rank's
//!   configurations are exchanged and every rank fails with the same error naming the fields;
//! - [`DataParallel::check_weights`]: parameter checksums compared every `--checksum-every` steps and at
//!   the end; a mismatch stops training on every rank, naming the ranks.

use anyhow::{Result, anyhow, bail};
use ffn_core::training::distributed::{fingerprint, param_checksum};
use serde_json::{Value, json};

use super::DataParallel;

/// Paths (`a.b[2]`) where `a` and `b` differ, with both values.
pub fn diff_json(a: &Value, b: &Value, path: &str, out: &mut Vec<(String, String, String)>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                diff_json(va, y.get(k).unwrap_or(&Value::Null), &join(k), out);
            }
            for (k, vb) in y.iter().filter(|(k, _)| !x.contains_key(*k)) {
                diff_json(&Value::Null, vb, &join(k), out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                diff_json(va, vb, &format!("{path}[{i}]"), out);
            }
        }
        _ if a != b => out.push((path.to_string(), a.to_string(), b.to_string())),
        _ => {}
    }
}

impl DataParallel {
    /// Checks that every rank runs the same configuration: `config` (the checkpointed training
    /// configuration), `run` (the settings outside it that must also agree, such as the step limit
    /// or the checkpoint cadence: a difference would make the ranks call different collectives),
    /// this group's [`DataParallelOptions::settings`](super::DataParallelOptions::settings) and
    /// the number of ranks. Collective; an error on every rank when any rank differs, naming the
    /// fields.
    pub fn check_config(&self, run: &Value, config: &Value) -> Result<()> {
        if self.comm().is_none() {
            return Ok(());
        }
        let mut run = run.clone();
        if let (Some(r), Value::Object(d)) = (run.as_object_mut(), self.args().settings()) {
            r.extend(d);
        }
        let full = json!({ "config": config, "run": run, "ranks": self.size() });
        let text = serde_json::to_vec(&full)?;
        let mine = fingerprint(&text);
        let root = self.broadcast(mine.to_le_bytes().to_vec(), 0)?;
        let root = u64::from_le_bytes(
            root.try_into()
                .map_err(|_| anyhow!("internal: bad fingerprint"))?,
        );
        let differ = self.ranks_where(mine != root)?;
        let Some(&m) = differ.first() else {
            return Ok(());
        };
        let root_text = self.broadcast_message(
            if self.is_root() {
                text.clone()
            } else {
                Vec::new()
            },
            0,
        )?;
        let m_text = self.broadcast_message(if self.rank() == m { text } else { Vec::new() }, m)?;
        let parse = |t: &[u8]| serde_json::from_slice::<Value>(t).unwrap_or(Value::Null);
        let mut diffs = Vec::new();
        diff_json(&parse(&root_text), &parse(&m_text), "", &mut diffs);
        let fields: Vec<String> = diffs
            .iter()
            .map(|(p, a, b)| format!("{p}: rank 0 has {a}, rank {m} has {b}"))
            .collect();
        bail!(
            "the ranks do not run the same configuration (rank(s) {differ:?} differ from rank 0); \
             every rank must get the same arguments and data: {}",
            if fields.is_empty() {
                "(no field-level difference found)".to_string()
            } else {
                fields.join("; ")
            }
        )
    }

    /// The ranks for which `flag` is true (collective: one allreduce of `size` values).
    pub(crate) fn ranks_where(&self, flag: bool) -> Result<Vec<usize>> {
        let mut v = vec![0.0f32; self.size()];
        v[self.rank()] = f32::from(u8::from(flag));
        let v = self.sum(v)?;
        Ok(v.iter()
            .enumerate()
            .filter(|(_, x)| **x != 0.0)
            .map(|(r, _)| r)
            .collect())
    }

    /// Every `--checksum-every` steps (and always with `force`), compares a checksum of `params`
    /// with rank 0's. Collective when it runs; an error on every rank on a mismatch.
    pub fn check_weights(&self, step: u64, params: &[f32], force: bool) -> Result<()> {
        let every = self.args().checksum_every;
        if self.comm().is_none() || !(force || (every > 0 && step.is_multiple_of(every))) {
            return Ok(());
        }
        let mine = param_checksum(params);
        let root = self.broadcast(mine.to_le_bytes().to_vec(), 0)?;
        let root = u64::from_le_bytes(
            root.try_into()
                .map_err(|_| anyhow!("internal: bad checksum"))?,
        );
        let differ = self.ranks_where(mine != root)?;
        if !differ.is_empty() {
            bail!(
                "step {step}: the parameters of rank(s) {differ:?} differ from rank 0's (checksum {root:016x}; \
                 this rank {mine:016x}): the replicas diverged, training stopped"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::DataParallelOptions;
    use super::*;
    use crate::Communicator;
    use crate::local::LocalComm;

    /// Runs `f(rank, dist)` on `n` local ranks and returns each rank's result as text.
    fn on_ranks(
        n: usize,
        f: impl Fn(usize, &DataParallel) -> Result<()> + Sync,
    ) -> Vec<std::result::Result<(), String>> {
        let group = LocalComm::group(n).unwrap();
        let f = &f;
        std::thread::scope(|s| {
            let hs: Vec<_> = group
                .into_iter()
                .enumerate()
                .map(|(r, c)| {
                    s.spawn(move || {
                        let d = DataParallel::connect(
                            &DataParallelOptions::default(),
                            Box::new(move || Ok(Box::new(c) as Box<dyn Communicator>)),
                        )
                        .map_err(|e| e.to_string())?;
                        f(r, &d).map_err(|e| e.to_string())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    fn run_settings(max_steps: u64) -> Value {
        json!({ "max_steps": max_steps, "checkpoint_every": 1000 })
    }

    #[test]
    fn a_different_configuration_is_an_error_on_every_rank_naming_the_field() {
        let cfg = json!({"model": {"depth": 9}, "learning_rate": "0.001"});
        let res = on_ranks(3, |r, d| {
            let mut c = cfg.clone();
            if r == 2 {
                c["learning_rate"] = json!("0.002");
            }
            let steps = if r == 1 { 10 } else { 20 };
            d.check_config(&run_settings(steps), &c)
        });
        for (r, e) in res.iter().enumerate() {
            let e = e.as_ref().expect_err("every rank fails");
            assert!(
                e.contains("rank(s) [1, 2]")
                    && e.contains("run.max_steps: rank 0 has 20, rank 1 has 10"),
                "rank {r}: {e}"
            );
        }
        // The same configuration passes, with checks of the weights.
        let ok = on_ranks(2, |_, d| {
            d.check_config(&run_settings(20), &cfg)?;
            d.check_weights(100, &[1.0, 2.0], false)?;
            d.check_weights(7, &[1.0, 2.0], true)
        });
        assert!(ok.iter().all(|r| r.is_ok()), "{ok:?}");
    }

    #[test]
    fn diverged_weights_stop_every_rank() {
        let res = on_ranks(3, |r, d| {
            let p = if r == 1 { [1.0, 2.5] } else { [1.0, 2.0] };
            d.check_weights(3, &p, false)?; // not a checksum step: nothing compared
            d.check_weights(200, &p, false)
        });
        for e in &res {
            let e = e.as_ref().expect_err("every rank fails");
            assert!(
                e.contains("step 200") && e.contains("rank(s) [1]") && e.contains("diverged"),
                "{e}"
            );
        }
    }

    #[test]
    fn differences_name_nested_fields_both_ways() {
        let a = json!({"model": {"depth": 2, "fov": [7, 7, 7]}, "lr": "0.01", "only_a": 1});
        let b = json!({"model": {"depth": 3, "fov": [7, 9, 7]}, "lr": "0.01", "only_b": true});
        let mut d = Vec::new();
        diff_json(&a, &b, "", &mut d);
        let paths: Vec<&str> = d.iter().map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(paths, ["model.depth", "model.fov[1]", "only_a", "only_b"]);
        assert_eq!(d[0], ("model.depth".into(), "2".into(), "3".into()));
        let mut none = Vec::new();
        diff_json(&a, &a, "", &mut none);
        assert!(none.is_empty());
    }
}
