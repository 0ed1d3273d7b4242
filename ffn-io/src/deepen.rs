//! Deepening a trained model ([`ffn_core::network::deepen`]): the model of a file (an ffn-rs
//! checkpoint or a google/ffn TF checkpoint) with identity residual modules added, written as an
//! ffn-rs model to fine-tune at the greater depth (`ffn train --depth N --init-checkpoint`). It
//! segments exactly as the model it came from until training changes it.
//!
//! Like a weight average, the result holds no optimiser state; its training configuration keeps
//! the source's (so its training normalisation) and adds `deepened: {from, from_depth, depth,
//! seed}`, and `ffn train --resume` refuses it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ffn_core::network::WeightInit;
use ffn_core::rng::Rng;
use serde_json::{Value, json};

use crate::checkpoint::{Checkpoint, load_checkpoint, save_checkpoint};
use crate::derived::{self, DEEPENED};
use crate::model::load_model;
use crate::tf_bundle;

/// Whether a checkpoint's training configuration marks it as a deepened model.
pub fn is_deepened(training_config: &Value) -> bool {
    training_config.get(DEEPENED).is_some()
}

/// What to deepen and how.
#[derive(Clone, Debug, PartialEq)]
pub struct DeepenOptions {
    /// The trained model (as [`load_model`] reads it).
    pub model: PathBuf,
    /// The new depth (google/ffn's: `conv0` plus `depth - 1` residual modules); above the model's.
    pub depth: usize,
    /// Seed of the Glorot-uniform draw of the new modules' first convolutions.
    pub seed: u64,
}

/// The deepened model of `opts`: the source's weights, step and training configuration, the new
/// modules' `conv{i}_a` weights Glorot-uniform from `opts.seed`, every other new parameter zero.
pub fn deepen_model(opts: &DeepenOptions) -> Result<Checkpoint> {
    let source = load_model(&opts.model)?;
    let (training_config, step, rng_state) = if tf_bundle::is_tf_checkpoint(&source.path) {
        (json!({}), 0, [0; 4])
    } else {
        let ck = load_checkpoint(&source.path)?;
        (ck.training_config, ck.step, ck.rng_state)
    };
    let (model, params) = ffn_core::network::deepen::deepen(
        &source.config,
        &source.params,
        opts.depth,
        WeightInit::GlorotUniform,
        &mut Rng::new(opts.seed),
    )
    .with_context(|| format!("deepening {}", source.path.display()))?;
    let record = json!({
        "from": source.path.display().to_string(),
        "from_depth": source.config.depth,
        "depth": opts.depth,
        "seed": opts.seed,
    });
    let mut training_config = training_config;
    derived::record(&mut training_config, DEEPENED, record);
    Ok(Checkpoint {
        model,
        params,
        optimizer: Vec::new(),
        step,
        rng_state,
        training_config,
    })
}

/// [`deepen_model`], written atomically to `out`.
pub fn write_deepened(opts: &DeepenOptions, out: &Path) -> Result<Checkpoint> {
    let deeper = deepen_model(opts)?;
    save_checkpoint(out, &deeper).with_context(|| format!("writing {}", out.display()))?;
    Ok(deeper)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ffn_core::model_spec::ModelConfig;

    fn saved(dir: &Path) -> (PathBuf, Checkpoint) {
        let m = ModelConfig::new(2, 4, [9, 9, 9], [2, 2, 2]);
        let ck = Checkpoint {
            model: m,
            params: (0..m.num_params())
                .map(|i| (i % 13) as f32 * 0.01)
                .collect(),
            optimizer: vec![("adam/m".into(), vec![1.0; 3])],
            step: 42,
            rng_state: [1, 2, 3, 4],
            training_config: json!({ "config": { "volumes": [{"name": "a", "mean": "128", "stddev": "33"}] } }),
        };
        let path = dir.join("ckpt-0000000042.safetensors");
        save_checkpoint(&path, &ck).unwrap();
        (path, ck)
    }

    #[test]
    fn deepened_file_keeps_weights_and_normalisation_and_records_its_source() {
        let dir = tempfile::tempdir().unwrap();
        let (path, ck) = saved(dir.path());
        let out = dir.path().join("deep.safetensors");
        let opts = DeepenOptions {
            model: path.clone(),
            depth: 4,
            seed: 9,
        };
        write_deepened(&opts, &out).unwrap();
        let deep = crate::model::load_model(&out).unwrap();
        assert_eq!(deep.config.depth, 4);
        assert_eq!(deep.config.fov, ck.model.fov);
        assert!(matches!(
            deep.normalisation,
            Some(crate::model::TrainingNormalisation::Fixed { mean: 128.0, .. })
        ));
        // conv0 and conv1 unchanged: the first tensors in the flat order.
        let old = ck.model.param_specs();
        let conv1_b_bias = old.iter().find(|s| s.name == "conv1_b/biases").unwrap();
        let end = conv1_b_bias.offset + conv1_b_bias.len();
        assert_eq!(deep.params[..end], ck.params[..end]);
        let lom = |specs: &[ffn_core::model_spec::ParamSpec], p: &[f32]| {
            let s = specs.iter().find(|s| s.name == "conv_lom/weights").unwrap();
            p[s.offset..s.offset + s.len()].to_vec()
        };
        assert_eq!(
            lom(&deep.config.param_specs(), &deep.params),
            lom(&old, &ck.params)
        );
        let saved = load_checkpoint(&out).unwrap();
        assert!(is_deepened(&saved.training_config));
        assert!(saved.optimizer.is_empty());
        assert_eq!(saved.training_config["deepened"]["from_depth"], 2);
        // The same seed draws the same new weights.
        assert_eq!(deepen_model(&opts).unwrap().params, saved.params);
    }

    #[test]
    fn a_depth_not_above_the_models_is_an_error_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = saved(dir.path());
        let e = deepen_model(&DeepenOptions {
            model: path,
            depth: 2,
            seed: 1,
        })
        .unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("model.depth") && msg.contains("deepening"),
            "{msg}"
        );
    }
}
