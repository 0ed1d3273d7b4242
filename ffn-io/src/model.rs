//! A trained model as inference and fine-tuning use it: architecture, weights and, for ffn-rs
//! checkpoints, the image normalisation the model was trained with (recorded in the checkpoint's
//! training configuration), so that a model is run on input scaled as in training.

use std::fmt;
use std::path::{Path, PathBuf};

use ffn_core::model_spec::ModelConfig;
use serde_json::Value;

use crate::checkpoint::{architecture_diff, latest_checkpoint, load_checkpoint};
use crate::error::IoError;
use crate::inference_defaults::{self, InferenceDefaults};
use crate::tf_bundle;

/// How the images a model was trained on were normalised, `(x - mean) / stddev`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TrainingNormalisation {
    /// Every training volume with the same mean and standard deviation (for example google/ffn's
    /// 128 / 33): new images are normalised with the same values.
    Fixed {
        /// Mean subtracted.
        mean: f64,
        /// Standard deviation divided by.
        stddev: f64,
    },
    /// Each training volume by its own mean and standard deviation: a new image is normalised by
    /// its own statistics too.
    PerVolume,
}

impl fmt::Display for TrainingNormalisation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed { mean, stddev } => write!(f, "mean {mean}, stddev {stddev}"),
            Self::PerVolume => write!(f, "each volume by its own mean and stddev"),
        }
    }
}

/// A model loaded for inference or as the start of fine-tuning.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedModel {
    /// The file the weights came from (the newest checkpoint when a folder was given).
    pub path: PathBuf,
    /// Architecture (for google/ffn TF checkpoints FOV and deltas are google/ffn's defaults).
    pub config: ModelConfig,
    /// Flat parameters in [`ModelConfig::param_specs`] order.
    pub params: Vec<f32>,
    /// The training normalisation, where the file records it (ffn-rs checkpoints); `None` for
    /// google/ffn TF checkpoints, which do not.
    pub normalisation: Option<TrainingNormalisation>,
    /// The inference settings recorded with the model ([`crate::inference_defaults`]); `None`
    /// when it records none (always for google/ffn TF checkpoints).
    pub inference_defaults: Option<InferenceDefaults>,
}

/// Loads any supported model: an ffn-rs `.safetensors` checkpoint, a folder of them or a training
/// run's folder (its `checkpoints/`; the newest), or a google/ffn TensorFlow checkpoint
/// (`model.ckpt-N`, its `.index` or its data file).
pub fn load_model(path: &Path) -> Result<LoadedModel, IoError> {
    let file = if path.is_dir() {
        let run = path.join("checkpoints");
        let found = match latest_checkpoint(path)? {
            None if run.is_dir() => latest_checkpoint(&run)?,
            found => found,
        };
        found.ok_or_else(|| IoError::Checkpoint {
            path: path.into(),
            reason: "folder holds no ckpt-STEP.safetensors file (nor does its checkpoints/)".into(),
        })?
    } else {
        path.to_path_buf()
    };
    if tf_bundle::is_tf_checkpoint(&file) {
        let (config, params) = tf_bundle::load_tf_model(&file)?;
        return Ok(LoadedModel {
            path: file,
            config,
            params,
            normalisation: None,
            inference_defaults: None,
        });
    }
    if !file.exists() {
        return Err(IoError::NotFound { path: file });
    }
    let ck = load_checkpoint(&file)?;
    let normalisation = training_normalisation(&file, &ck.training_config)?;
    let inference_defaults = inference_defaults::read(&file, &ck.training_config)?;
    Ok(LoadedModel {
        path: file,
        config: ck.model,
        params: ck.params,
        normalisation,
        inference_defaults,
    })
}

/// The normalisation recorded in an ffn-rs checkpoint's training configuration
/// (`config.volumes[].mean/stddev`, written by `ffn train`); `None` when it records none. Values
/// that are not numbers (or numeric strings) are an error naming the field.
pub fn training_normalisation(
    path: &Path,
    training_config: &Value,
) -> Result<Option<TrainingNormalisation>, IoError> {
    let Some(volumes) = training_config
        .get("config")
        .and_then(|c| c.get("volumes"))
        .and_then(Value::as_array)
    else {
        return Ok(None);
    };
    let number = |i: usize, v: &Value, key: &str| -> Result<f64, IoError> {
        let x = v.get(key);
        x.and_then(|x| {
            x.as_f64()
                .or_else(|| x.as_str().and_then(|s| s.parse().ok()))
        })
        .filter(|x: &f64| x.is_finite())
        .ok_or_else(|| IoError::Checkpoint {
            path: path.into(),
            reason: format!(
                "training_config.config.volumes[{i}].{key}: expected a finite number, found {x:?}"
            ),
        })
    };
    let mut pairs = Vec::with_capacity(volumes.len());
    for (i, v) in volumes.iter().enumerate() {
        pairs.push((number(i, v, "mean")?, number(i, v, "stddev")?));
    }
    Ok(match pairs.split_first() {
        None => None,
        Some((&(mean, stddev), rest)) if rest.iter().all(|&p| p == (mean, stddev)) => {
            Some(TrainingNormalisation::Fixed { mean, stddev })
        }
        Some(_) => Some(TrainingNormalisation::PerVolume),
    })
}

/// Loads the weights to start a training run from (fine-tuning: the optimiser starts fresh). The
/// file must hold a network of the run's depth and features (the fields that fix the weights'
/// shapes); FOV and deltas may differ, since the convolutions do not depend on them. A different
/// architecture is [`IoError::Architecture`] naming the fields.
pub fn load_initial_weights(path: &Path, run: &ModelConfig) -> Result<LoadedModel, IoError> {
    let model = load_model(path)?;
    let shapes_only = ModelConfig {
        fov: run.fov,
        deltas: run.deltas,
        ..model.config
    };
    let diff = architecture_diff(run, &shapes_only);
    if !diff.is_empty() {
        return Err(IoError::Architecture {
            path: model.path.clone(),
            diff: format!(
                "{diff} ({} parameters in the run, {} in the file)",
                run.num_params(),
                model.config.num_params()
            ),
        });
    }
    Ok(model)
}

/// Loads architecture and parameters of any supported model (see [`load_model`]).
pub fn load_any_model(path: &Path) -> Result<(ModelConfig, Vec<f32>), IoError> {
    let m = load_model(path)?;
    Ok((m.config, m.params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn norm(v: Value) -> Result<Option<TrainingNormalisation>, IoError> {
        training_normalisation(Path::new("c.safetensors"), &v)
    }

    #[test]
    fn one_shared_normalisation_is_fixed_and_differing_ones_are_per_volume() {
        let cfg = |vols: Value| json!({ "config": { "volumes": vols } });
        assert_eq!(
            norm(cfg(json!([{"name": "a", "mean": "128", "stddev": "33"}]))).unwrap(),
            Some(TrainingNormalisation::Fixed {
                mean: 128.0,
                stddev: 33.0
            })
        );
        assert_eq!(
            norm(cfg(json!([
                {"name": "a", "mean": 120.5, "stddev": "30"},
                {"name": "b", "mean": "120.5", "stddev": 30}
            ])))
            .unwrap(),
            Some(TrainingNormalisation::Fixed {
                mean: 120.5,
                stddev: 30.0
            })
        );
        assert_eq!(
            norm(cfg(json!([
                {"name": "a", "mean": "120", "stddev": "30"},
                {"name": "b", "mean": "140", "stddev": "30"}
            ])))
            .unwrap(),
            Some(TrainingNormalisation::PerVolume)
        );
        assert_eq!(norm(json!({})).unwrap(), None);
        assert_eq!(norm(cfg(json!([]))).unwrap(), None);
    }

    #[test]
    fn a_bad_recorded_value_is_an_error_naming_the_field() {
        let e = norm(json!({ "config": { "volumes": [{"mean": "x", "stddev": "1"}] } }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("volumes[0].mean"), "{e}");
        assert!(e.contains("c.safetensors"), "{e}");
    }
}
