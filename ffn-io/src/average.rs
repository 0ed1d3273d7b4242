//! Weight averaging of checkpoints of one training run (stochastic weight averaging, Izmailov et
//! al. 2018): the mean of the parameters of several checkpoints along a run, which evens out the
//! step-to-step wander of a constant learning rate. FFN nets have no batch statistics, so the mean
//! weights are a model as they are.
//!
//! The result is a model for inference and for fine-tuning (`ffn train --init-checkpoint`), not a
//! point to resume from: it holds no optimiser state and its training configuration records what
//! was averaged (`training_config.averaged`), so `ffn train --resume` refuses it. One checkpoint
//! alone gives its own weights, bit for bit, without the optimiser state: a model a third the size
//! of a training checkpoint, to ship.

use std::path::{Path, PathBuf};

use crate::checkpoint::{Checkpoint, check_architecture, load_checkpoint, save_checkpoint};
use anyhow::{Context, Result, bail, ensure};
use ffn_core::model_spec::ModelConfig;
use serde_json::{Value, json};

use crate::derived::{self, AVERAGED};

/// Whether a checkpoint's training configuration marks it as a weight average.
pub fn is_average(training_config: &Value) -> bool {
    training_config.get(AVERAGED).is_some()
}

/// Averages the parameters of `paths` (ffn-rs checkpoints of one architecture and one training
/// configuration): the mean of every parameter, accumulated in f64. The result keeps the newest
/// (highest step) checkpoint's step, RNG state and training configuration (so its training
/// normalisation and CPU time), adds `averaged: {steps, paths}` to the configuration and holds no
/// optimiser state. One checkpoint gives its weights unchanged (a sum of one in f64, divided by 1,
/// is exact).
pub fn average_checkpoints(paths: &[PathBuf]) -> Result<Checkpoint> {
    ensure!(
        !paths.is_empty(),
        "averaging: expected at least 1 checkpoint, found none"
    );
    let mut newest: Option<Checkpoint> = None;
    let mut sum: Vec<f64> = Vec::new();
    let mut steps = Vec::with_capacity(paths.len());
    // The first checkpoint's path, architecture and configuration: the others must match them.
    let mut first: Option<(&PathBuf, ModelConfig, Value)> = None;
    for path in paths {
        let ck = load_checkpoint(path)?;
        if is_average(&ck.training_config) {
            bail!(
                "{}: already an average of checkpoints; average the run's own checkpoints",
                path.display()
            );
        }
        let config = ck
            .training_config
            .get("config")
            .cloned()
            .unwrap_or(Value::Null);
        match &first {
            None => {
                sum = vec![0.0; ck.params.len()];
                first = Some((path, ck.model, config));
            }
            Some((p0, m0, c0)) => {
                check_architecture(path, m0, &ck.model)?;
                if *c0 != config {
                    bail!(
                        "{}: another training configuration than {} (not the same run)",
                        path.display(),
                        p0.display()
                    );
                }
            }
        }
        sum.iter_mut()
            .zip(&ck.params)
            .for_each(|(s, &p)| *s += f64::from(p));
        steps.push(ck.step);
        if newest.as_ref().is_none_or(|n| ck.step >= n.step) {
            newest = Some(ck);
        }
    }
    let mut out = newest.expect("at least one checkpoint");
    let n = paths.len() as f64;
    out.params = sum.iter().map(|&s| (s / n) as f32).collect();
    out.optimizer.clear();
    let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let record = json!({ "steps": steps, "paths": paths });
    derived::record(&mut out.training_config, AVERAGED, record);
    Ok(out)
}

/// [`average_checkpoints`], written atomically to `out`.
pub fn write_average(paths: &[PathBuf], out: &Path) -> Result<Checkpoint> {
    let avg = average_checkpoints(paths)?;
    save_checkpoint(out, &avg).with_context(|| format!("writing {}", out.display()))?;
    Ok(avg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ffn_core::model_spec::ModelConfig;

    fn model(depth: usize) -> ModelConfig {
        ModelConfig {
            depth,
            features: 4,
            fov: [9, 9, 9],
            deltas: [2, 2, 2],
        }
    }

    /// A checkpoint of step `step` whose parameter `i` is `i * scale`, saved in `dir`.
    fn saved(dir: &Path, step: u64, scale: f32, config: Value) -> PathBuf {
        let m = model(2);
        let ck = Checkpoint {
            model: m,
            params: (0..m.num_params()).map(|i| i as f32 * scale).collect(),
            optimizer: vec![("adam/m".into(), vec![1.0; 3])],
            step,
            rng_state: [step, 2, 3, 4],
            training_config: json!({ "config": config, "cpu_seconds": step as f64 }),
        };
        let path = dir.join(crate::checkpoint::checkpoint_file_name(step));
        save_checkpoint(&path, &ck).unwrap();
        path
    }

    #[test]
    fn the_average_is_the_mean_of_the_weights_with_the_newest_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let config = json!({ "learning_rate": "0.0003" });
        let paths = [
            saved(dir.path(), 300, 3.0, config.clone()),
            saved(dir.path(), 100, 1.0, config.clone()),
            saved(dir.path(), 200, 2.0, config.clone()),
        ];
        let out = dir.path().join("avg.safetensors");
        write_average(&paths, &out).unwrap();
        let avg = load_checkpoint(&out).unwrap();
        for (i, &p) in avg.params.iter().enumerate() {
            assert!(
                (p - 2.0 * i as f32).abs() <= 1e-6 * i as f32,
                "param {i}: {p}"
            );
        }
        assert_eq!((avg.step, avg.rng_state[0]), (300, 300));
        assert!(avg.optimizer.is_empty());
        assert_eq!(avg.training_config["config"], config);
        assert_eq!(avg.training_config["cpu_seconds"], 300.0);
        assert_eq!(
            avg.training_config["averaged"]["steps"],
            json!([300, 100, 200])
        );
        // An average is not averaged again.
        let e = average_checkpoints(&[out.clone(), paths[0].clone()]).unwrap_err();
        assert!(format!("{e:#}").contains("already an average"), "{e:#}");
    }

    #[test]
    fn checkpoints_of_other_runs_or_architectures_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = saved(dir.path(), 1, 1.0, json!({ "seed": 1 }));
        let b = saved(dir.path(), 2, 1.0, json!({ "seed": 2 }));
        let e = format!("{:#}", average_checkpoints(&[a.clone(), b]).unwrap_err());
        assert!(e.contains("another training configuration"), "{e}");

        let m = model(3);
        let deeper = Checkpoint {
            model: m,
            params: vec![0.0; m.num_params()],
            optimizer: Vec::new(),
            step: 5,
            rng_state: [0; 4],
            training_config: json!({ "config": { "seed": 1 } }),
        };
        let c = dir.path().join("deeper.safetensors");
        save_checkpoint(&c, &deeper).unwrap();
        let e = format!("{:#}", average_checkpoints(&[a.clone(), c]).unwrap_err());
        assert!(e.contains("depth"), "{e}");

        let e = format!("{:#}", average_checkpoints(&[]).unwrap_err());
        assert!(e.contains("at least 1"), "{e}");
    }

    #[test]
    fn one_checkpoint_gives_its_own_weights_without_the_optimiser_state() {
        let dir = tempfile::tempdir().unwrap();
        let config = json!({ "seed": 1 });
        let path = saved(dir.path(), 7, 0.3, config.clone());
        let original = load_checkpoint(&path).unwrap();
        let out = dir.path().join("weights.safetensors");
        write_average(std::slice::from_ref(&path), &out).unwrap();
        let weights = load_checkpoint(&out).unwrap();
        let bits = |p: &[f32]| p.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&weights.params), bits(&original.params));
        assert!(weights.optimizer.is_empty() && !original.optimizer.is_empty());
        assert_eq!(weights.step, 7);
        assert_eq!(weights.training_config["config"], config);
        assert_eq!(weights.training_config["averaged"]["steps"], json!([7]));
    }
}
