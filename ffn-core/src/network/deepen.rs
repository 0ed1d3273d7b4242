//! Deepening a trained network without changing what it computes (Net2DeeperNet-style growth,
//! Chen et al. 2016): residual modules are inserted before `conv_lom` whose second convolution
//! (`conv{i}_b`, weights and biases) is zero, so each new module adds zero to its input and the
//! deeper network's output is the trained network's output, bit for bit. Training then starts
//! from the trained model with more capacity: the zero `conv{i}_b` gets gradients at once, and
//! the freshly drawn `conv{i}_a` as soon as `conv{i}_b` moves away from zero.

use super::WeightInit;
use crate::error::CoreError;
use crate::model_spec::ModelConfig;
use crate::rng::Rng;
use alloc::format;
use alloc::vec::Vec;

/// The configuration and flat parameters (model_spec order) of `cfg`/`params` deepened to
/// `depth`: the trained layers keep their values, the new modules' `conv{i}_a` weights are drawn
/// by `init` from `rng` in parameter order, every other new parameter is zero.
///
/// # Errors
/// [`CoreError::LengthMismatch`] when `params` does not fit `cfg`; [`CoreError::InvalidConfig`]
/// when `depth` is not deeper than `cfg.depth` or is beyond what [`ModelConfig::validate`] accepts.
pub fn deepen(
    cfg: &ModelConfig,
    params: &[f32],
    depth: usize,
    init: WeightInit,
    rng: &mut Rng,
) -> Result<(ModelConfig, Vec<f32>), CoreError> {
    cfg.validate().map_err(CoreError::InvalidConfig)?;
    if params.len() != cfg.num_params() {
        return Err(CoreError::LengthMismatch {
            what: format!(
                "parameters of a convstack_3d (depth {}, {} features)",
                cfg.depth, cfg.features
            ),
            expected: cfg.num_params(),
            actual: params.len(),
        });
    }
    if depth <= cfg.depth {
        return Err(CoreError::InvalidConfig(format!(
            "model.depth: deepening needs a depth above the model's {}, found {depth}",
            cfg.depth
        )));
    }
    let deeper = ModelConfig { depth, ..*cfg };
    deeper.validate().map_err(CoreError::InvalidConfig)?;
    let old = cfg.param_specs();
    let new = deeper.param_specs();
    let mut out = alloc::vec![0.0f32; deeper.num_params()];
    // The trained tensors, found by name: everything but the new modules.
    for spec in &new {
        match old.iter().find(|o| o.name == spec.name) {
            Some(o) => out[spec.offset..spec.offset + spec.len()]
                .copy_from_slice(&params[o.offset..o.offset + o.len()]),
            None if spec.name.ends_with("_a/weights") => {
                init.fill(
                    &spec.shape,
                    &mut out[spec.offset..spec.offset + spec.len()],
                    rng,
                );
            }
            None => {} // conv{i}_b and the biases stay zero.
        }
    }
    Ok((deeper, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::ConvStack3d;

    fn small(depth: usize) -> ModelConfig {
        ModelConfig::new(depth, 4, [7, 7, 7], [2, 2, 2])
    }

    #[test]
    fn deepened_network_computes_the_same_output_bit_for_bit() {
        let cfg = small(2);
        let mut rng = Rng::new(7);
        let mut shallow = ConvStack3d::with_init(cfg, WeightInit::GlorotUniform, &mut rng);
        // Trained-looking biases, so that copying them is checked too.
        let n = shallow.params().len();
        for (i, p) in shallow.params_mut().iter_mut().enumerate() {
            if i % 5 == 0 {
                *p += 0.01 * (i % 7) as f32;
            }
        }
        let (dcfg, dparams) = deepen(
            &cfg,
            shallow.params(),
            4,
            WeightInit::GlorotUniform,
            &mut Rng::new(3),
        )
        .unwrap();
        assert_eq!(dcfg.depth, 4);
        assert!(dparams.len() > n);
        let mut deep = ConvStack3d::from_params(dcfg, dparams.clone()).unwrap();
        let voxels = 2 * 343;
        let image: Vec<f32> = (0..voxels).map(|_| rng.next_f64() as f32 - 0.5).collect();
        let seed: Vec<f32> = (0..voxels).map(|_| rng.next_f64() as f32 - 0.5).collect();
        let (mut a, mut b) = (alloc::vec![0.0f32; voxels], alloc::vec![0.0f32; voxels]);
        shallow.forward(&image, &seed, 2, &mut a);
        deep.forward(&image, &seed, 2, &mut b);
        assert_eq!(a, b);
        // The new modules: conv_a drawn (non-zero), conv_b and all new biases zero.
        for spec in dcfg.param_specs() {
            let v = &dparams[spec.offset..spec.offset + spec.len()];
            match spec.name.as_str() {
                "conv2_a/weights" | "conv3_a/weights" => assert!(v.iter().any(|&w| w != 0.0)),
                name if name.starts_with("conv2") || name.starts_with("conv3") => {
                    assert!(v.iter().all(|&w| w == 0.0), "{name}")
                }
                _ => {}
            }
        }
    }

    #[test]
    fn deepening_refuses_a_shallower_depth_and_wrong_parameters() {
        let cfg = small(3);
        let params = alloc::vec![0.0; cfg.num_params()];
        let mut rng = Rng::new(1);
        let e = deepen(&cfg, &params, 3, WeightInit::GlorotUniform, &mut rng).unwrap_err();
        assert!(format!("{e}").contains("model.depth"), "{e}");
        let e = deepen(&cfg, &params[1..], 5, WeightInit::GlorotUniform, &mut rng).unwrap_err();
        assert!(format!("{e}").contains("expected"), "{e}");
    }
}
