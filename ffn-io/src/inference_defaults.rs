//! Inference settings that travel with a model: the move threshold, segment threshold, minimum
//! segment size and test-time symmetries chosen for it (for example by scoring segmentations of boxes with ground truth),
//! recorded under `inference_defaults` in an ffn-rs checkpoint's training configuration.
//!
//! `ffn infer`, `ffn infer-tiled` and `ffn demo` start from them instead of google/ffn's defaults
//! (0.9 / 0.6 / 1000) and say so; the command line wins over them, and a google/ffn inference
//! request, which is a complete set of inference options, replaces them. Training does not carry
//! them into new checkpoints: new weights need their own choice.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ffn_core::inference::{InferenceOptions, Symmetries};
use serde_json::{Map, Value, json};

use crate::checkpoint::{Checkpoint, load_checkpoint, save_checkpoint};
use crate::error::IoError;
use crate::tf_bundle;

/// The key of the record in a checkpoint's training configuration.
pub const KEY: &str = "inference_defaults";

/// The inference settings recorded with a model; `None` fields keep google/ffn's defaults.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InferenceDefaults {
    /// Probability needed to move the field of view.
    pub move_threshold: Option<f32>,
    /// Probability at which voxels join a segment.
    pub segment_threshold: Option<f32>,
    /// Smallest segment kept (voxels).
    pub min_segment_size: Option<usize>,
    /// The symmetries whose predictions are averaged (test-time augmentation).
    pub symmetries: Option<Symmetries>,
    /// How the settings were chosen (free text, e.g. the boxes they were scored on).
    pub chosen_on: Option<String>,
}

impl InferenceDefaults {
    /// Whether no setting is recorded.
    pub fn is_empty(&self) -> bool {
        self.move_threshold.is_none()
            && self.segment_threshold.is_none()
            && self.min_segment_size.is_none()
            && self.symmetries.is_none()
    }

    /// Sets the recorded fields of `options`, leaving the others.
    pub fn apply(&self, options: &mut InferenceOptions) {
        if let Some(v) = self.move_threshold {
            options.move_threshold = v;
        }
        if let Some(v) = self.segment_threshold {
            options.segment_threshold = v;
        }
        if let Some(v) = self.min_segment_size {
            options.min_segment_size = v;
        }
        if let Some(v) = self.symmetries {
            options.symmetries = v;
        }
    }

    /// google/ffn's defaults with these settings applied.
    pub fn options(&self) -> InferenceOptions {
        let mut options = InferenceOptions::default();
        self.apply(&mut options);
        options
    }

    /// Checks the values as [`InferenceOptions::validate`] does (thresholds strictly between 0
    /// and 1); the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        self.options().validate().map_err(|e| e.0)
    }

    /// The record as stored in a training configuration.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        if let Some(v) = self.move_threshold {
            map.insert("move_threshold".into(), json!(v));
        }
        if let Some(v) = self.segment_threshold {
            map.insert("segment_threshold".into(), json!(v));
        }
        if let Some(v) = self.min_segment_size {
            map.insert("min_segment_size".into(), json!(v));
        }
        if let Some(v) = self.symmetries {
            map.insert("symmetries".into(), json!(v.to_string()));
        }
        if let Some(v) = &self.chosen_on {
            map.insert("chosen_on".into(), json!(v));
        }
        Value::Object(map)
    }
}

impl fmt::Display for InferenceDefaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(v) = self.move_threshold {
            parts.push(format!("move threshold {v}"));
        }
        if let Some(v) = self.segment_threshold {
            parts.push(format!("segment threshold {v}"));
        }
        if let Some(v) = self.min_segment_size {
            parts.push(format!("min segment size {v}"));
        }
        if let Some(v) = self.symmetries {
            parts.push(format!("predictions averaged over symmetries {v}"));
        }
        write!(f, "{}", parts.join(", "))
    }
}

/// The settings recorded in a checkpoint's training configuration; `None` when it records none.
/// A record of the wrong shape is an error naming the file and the field.
pub fn read(path: &Path, training_config: &Value) -> Result<Option<InferenceDefaults>, IoError> {
    let Some(record) = training_config.get(KEY) else {
        return Ok(None);
    };
    let bad = |field: &str, expected: &str, found: &Value| IoError::Checkpoint {
        path: path.into(),
        reason: format!("training_config.{KEY}{field}: expected {expected}, found {found}"),
    };
    let Some(map) = record.as_object() else {
        return Err(bad("", "an object", record));
    };
    let mut d = InferenceDefaults::default();
    for (k, v) in map {
        let field = format!(".{k}");
        match k.as_str() {
            "move_threshold" | "segment_threshold" => {
                let x = v.as_f64().ok_or_else(|| bad(&field, "a number", v))? as f32;
                if k == "move_threshold" {
                    d.move_threshold = Some(x);
                } else {
                    d.segment_threshold = Some(x);
                }
            }
            "min_segment_size" => {
                let n = v
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| bad(&field, "a whole number of voxels", v))?;
                d.min_segment_size = Some(n);
            }
            "symmetries" => {
                let text = v.as_str().ok_or_else(|| bad(&field, "text", v))?;
                let s = Symmetries::parse(text).map_err(|e| bad(&field, &e, v))?;
                d.symmetries = Some(s);
            }
            "chosen_on" => {
                d.chosen_on = Some(v.as_str().ok_or_else(|| bad(&field, "text", v))?.into());
            }
            _ => {
                return Err(bad(
                    "",
                    "only move_threshold, segment_threshold, min_segment_size, symmetries and \
                     chosen_on",
                    &json!(k),
                ));
            }
        }
    }
    d.validate().map_err(|reason| IoError::Checkpoint {
        path: path.into(),
        reason: format!("training_config.{KEY}.{reason}"),
    })?;
    Ok(Some(d))
}

/// What [`record_defaults`] records and where.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordOptions {
    /// An ffn-rs model file (`.safetensors`).
    pub model: PathBuf,
    /// The settings; they replace any recorded before.
    pub defaults: InferenceDefaults,
}

/// The checkpoint of `opts.model` with `opts.defaults` recorded (weights, step, optimiser state and
/// the rest of the training configuration unchanged).
pub fn with_defaults(opts: &RecordOptions) -> Result<Checkpoint> {
    if tf_bundle::is_tf_checkpoint(&opts.model) {
        bail!(
            "{}: a google/ffn TensorFlow checkpoint has no training configuration to record \
             settings in; expected an ffn-rs model (.safetensors)",
            opts.model.display()
        );
    }
    if opts.defaults.is_empty() {
        bail!(
            "no settings to record: give a move threshold, segment threshold, min segment size \
             or symmetries"
        );
    }
    opts.defaults
        .validate()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut ck = load_checkpoint(&opts.model)?;
    match &mut ck.training_config {
        Value::Object(map) => {
            map.insert(KEY.into(), opts.defaults.to_json());
        }
        other => *other = json!({ KEY: opts.defaults.to_json() }),
    }
    Ok(ck)
}

/// [`with_defaults`], written atomically to `out` (which may be the model itself).
pub fn write_with_defaults(opts: &RecordOptions, out: &Path) -> Result<Checkpoint> {
    let ck = with_defaults(opts)?;
    save_checkpoint(out, &ck).with_context(|| format!("writing {}", out.display()))?;
    Ok(ck)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("m.safetensors")
    }

    #[test]
    fn a_record_round_trips_and_applies_over_the_defaults() {
        let d = InferenceDefaults {
            segment_threshold: Some(0.5),
            min_segment_size: Some(100),
            symmetries: Some(Symmetries::parse("flip-x,swap-xy").unwrap()),
            chosen_on: Some("three boxes".into()),
            ..Default::default()
        };
        let tc = json!({ "config": {}, KEY: d.to_json() });
        let back = read(p(), &tc).unwrap().unwrap();
        assert_eq!(back, d);
        let o = back.options();
        assert_eq!(
            (o.move_threshold, o.segment_threshold, o.min_segment_size),
            (0.9, 0.5, 100)
        );
        assert_eq!(o.symmetries.count(), 4);
        assert_eq!(
            back.to_string(),
            "segment threshold 0.5, min segment size 100, predictions averaged over symmetries \
             flip-x,swap-xy"
        );
        assert_eq!(read(p(), &json!({ "config": {} })).unwrap(), None);
    }

    #[test]
    fn bad_records_name_the_field() {
        let cases = [
            (
                json!(3),
                "training_config.inference_defaults: expected an object",
            ),
            (
                json!({ "segment_threshold": "high" }),
                "inference_defaults.segment_threshold: expected a number",
            ),
            (
                json!({ "min_segment_size": -4 }),
                "inference_defaults.min_segment_size: expected a whole number",
            ),
            (
                json!({ "move_threshold": 1.5 }),
                "inference_defaults.move_threshold: expected a probability strictly between 0 and \
                 1, found 1.5",
            ),
            (
                json!({ "symmetries": "flip-w" }),
                "inference_defaults.symmetries: expected unknown symmetry \"flip-w\"",
            ),
            (
                json!({ "speed": 2 }),
                "inference_defaults: expected only move_threshold, segment_threshold, \
                 min_segment_size, symmetries and chosen_on, found \"speed\"",
            ),
        ];
        for (record, expected) in cases {
            let e = read(p(), &json!({ KEY: record })).unwrap_err().to_string();
            assert!(e.contains(expected) && e.contains("m.safetensors"), "{e}");
        }
    }
}
