//! The architecture of the FFN `convstack_3d` network as plain data: its hyper-parameters and the
//! fixed order, names and shapes of its parameters.
//!
//! Every crate agrees on this order. Parameters (and gradients) live in one flat `f32` buffer,
//! layer after layer, each layer's weights then its biases:
//!
//! `conv0_a`, `conv0_b`, `conv1_a`, `conv1_b`, ..., `conv{depth-1}_a`, `conv{depth-1}_b`, `conv_lom`.
//!
//! Weights are stored as `[kz, ky, kx, in, out]` (row-major), exactly Google's TensorFlow layout, and
//! biases as `[out]`. Names are those of google/ffn without the `seed_update/` scope, e.g.
//! `conv3_b/weights`.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// Deepest network [`ModelConfig::validate`] accepts (google/ffn's published models have depth 9
/// to 12); a larger depth read from a file is an error instead of millions of parameter specs.
pub const MAX_DEPTH: usize = 1024;

/// Hyper-parameters of a `convstack_3d` network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// TF-style depth: `conv0_a`, `conv0_b`, then `depth - 1` residual modules. Must be >= 1.
    pub depth: usize,
    /// Feature maps of every hidden conv layer (32 in the published models).
    pub features: usize,
    /// Field of view, `[z, y, x]`, every entry odd.
    pub fov: [usize; 3],
    /// FOV movement step, `[z, y, x]`.
    pub deltas: [usize; 3],
}

impl ModelConfig {
    /// A network of `depth`, `features` maps, field of view `fov` and movement step `deltas`
    /// (both `[z, y, x]`).
    pub const fn new(depth: usize, features: usize, fov: [usize; 3], deltas: [usize; 3]) -> Self {
        Self {
            depth,
            features,
            fov,
            deltas,
        }
    }
}

impl Default for ModelConfig {
    /// google/ffn's code default: depth 9, 32 features, FOV 33^3, deltas 8.
    fn default() -> Self {
        Self {
            depth: 9,
            features: 32,
            fov: [33, 33, 33],
            deltas: [8, 8, 8],
        }
    }
}

/// One parameter tensor of the network: its name and shape, and where it lives in the flat buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    /// google/ffn name without the `seed_update/` scope, e.g. `conv0_a/weights`.
    pub name: String,
    /// Shape: `[kz, ky, kx, in, out]` for weights, `[out]` for biases.
    pub shape: Vec<usize>,
    /// Offset of the first element in the flat parameter buffer.
    pub offset: usize,
}

impl ParamSpec {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the tensor holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One convolution layer of the network: name, kernel edge and channel counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvSpec {
    /// Layer name, e.g. `conv2_a` or `conv_lom`.
    pub name: String,
    /// Kernel edge (3 for hidden layers, 1 for `conv_lom`).
    pub kernel: usize,
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
}

impl ModelConfig {
    /// The conv layers in parameter order.
    pub fn conv_layers(&self) -> Vec<ConvSpec> {
        let f = self.features;
        let mut layers = Vec::with_capacity(2 * self.depth + 1);
        let conv = |name: String, kernel, in_channels, out_channels| ConvSpec {
            name,
            kernel,
            in_channels,
            out_channels,
        };
        layers.push(conv("conv0_a".into(), 3, 2, f));
        layers.push(conv("conv0_b".into(), 3, f, f));
        for i in 1..self.depth {
            layers.push(conv(format!("conv{i}_a"), 3, f, f));
            layers.push(conv(format!("conv{i}_b"), 3, f, f));
        }
        layers.push(conv("conv_lom".into(), 1, f, 1));
        layers
    }

    /// Every parameter tensor in the fixed flat order (weights then biases per layer).
    pub fn param_specs(&self) -> Vec<ParamSpec> {
        let mut specs = Vec::new();
        let mut offset = 0;
        for layer in self.conv_layers() {
            let k = layer.kernel;
            let w = ParamSpec {
                name: format!("{}/weights", layer.name),
                shape: alloc::vec![k, k, k, layer.in_channels, layer.out_channels],
                offset,
            };
            offset += w.len();
            let b = ParamSpec {
                name: format!("{}/biases", layer.name),
                shape: alloc::vec![layer.out_channels],
                offset,
            };
            offset += b.len();
            specs.push(w);
            specs.push(b);
        }
        specs
    }

    /// Total number of parameters (length of the flat buffer).
    pub fn num_params(&self) -> usize {
        self.param_specs().iter().map(ParamSpec::len).sum()
    }

    /// The parameter count computed with checked arithmetic, without listing the tensors; `None`
    /// when it overflows `usize`.
    fn checked_num_params(&self) -> Option<usize> {
        let f = self.features;
        // A 3^3 conv from `inputs` to `f` maps, with its biases.
        let conv3 = |inputs: usize| 27usize.checked_mul(inputs)?.checked_mul(f)?.checked_add(f);
        let residual = conv3(f)?
            .checked_mul(2)?
            .checked_mul(self.depth.checked_sub(1)?)?;
        conv3(2)?
            .checked_add(conv3(f)?)?
            .checked_add(residual)?
            .checked_add(f.checked_add(1)?)
    }

    /// Checks the hyper-parameters; the error names the field and what was expected.
    pub fn validate(&self) -> Result<(), String> {
        if self.depth == 0 {
            return Err("model.depth: expected >= 1, found 0".into());
        }
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "model.depth: expected at most {MAX_DEPTH}, found {}",
                self.depth
            ));
        }
        if self.features == 0 {
            return Err("model.features: expected >= 1, found 0".into());
        }
        if self.checked_num_params().is_none() {
            return Err(format!(
                "model.features: {} features at depth {}: the parameter count overflows",
                self.features, self.depth
            ));
        }
        if let Some(bad) = self.fov.iter().find(|&&s| s % 2 == 0) {
            return Err(format!(
                "model.fov: expected odd sizes, found {bad} in {:?}",
                self.fov
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_parameter_counts() {
        let d12 = ModelConfig {
            depth: 12,
            ..ModelConfig::default()
        };
        assert_eq!(d12.num_params(), 638_433);
        assert_eq!(ModelConfig::default().num_params(), 472_353);
    }

    #[test]
    fn order_and_offsets_are_contiguous() {
        let cfg = ModelConfig {
            depth: 2,
            features: 4,
            ..ModelConfig::default()
        };
        let specs = cfg.param_specs();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "conv0_a/weights",
                "conv0_a/biases",
                "conv0_b/weights",
                "conv0_b/biases",
                "conv1_a/weights",
                "conv1_a/biases",
                "conv1_b/weights",
                "conv1_b/biases",
                "conv_lom/weights",
                "conv_lom/biases"
            ]
        );
        let mut next = 0;
        for s in &specs {
            assert_eq!(s.offset, next, "{}", s.name);
            next += s.len();
        }
        assert_eq!(specs[0].shape, [3, 3, 3, 2, 4]);
        assert_eq!(specs[8].shape, [1, 1, 1, 4, 1]);
    }

    #[test]
    fn checked_count_matches_the_specs_and_huge_configs_are_refused() {
        for (depth, features) in [(1, 1), (2, 4), (9, 32), (12, 32)] {
            let cfg = ModelConfig {
                depth,
                features,
                ..ModelConfig::default()
            };
            assert_eq!(cfg.checked_num_params(), Some(cfg.num_params()));
        }
        let deep = ModelConfig {
            depth: MAX_DEPTH + 1,
            ..ModelConfig::default()
        };
        assert!(deep.validate().unwrap_err().contains("model.depth"));
        let wide = ModelConfig {
            features: usize::MAX / 2,
            ..ModelConfig::default()
        };
        assert!(wide.validate().unwrap_err().contains("overflows"));
    }

    #[test]
    fn validate_names_the_field() {
        let bad = ModelConfig {
            fov: [33, 32, 33],
            ..ModelConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("model.fov"));
        assert!(ModelConfig::default().validate().is_ok());
    }
}
