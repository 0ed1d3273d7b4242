//! The computation of the no_std program, written against ffn-core and `alloc` only, so that the
//! same source also compiles with std: `tests/nostd_program.rs` includes this file and compares its
//! results with those the `#![no_std]` program prints.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use ffn_core::inference::seeds::policy_grid;
use ffn_core::inference::{Canvas, InferenceError, InferenceOptions, Predictor};
use ffn_core::model_spec::ModelConfig;
use ffn_core::network::ConvStack3d;
use ffn_core::rng::Rng;
use ffn_core::synth::{SynthConfig, generate};

/// What the program computes.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Parameters of the network.
    pub params: usize,
    /// Logits of one forward pass over the FOV at the volume's centre.
    pub logits: Vec<f32>,
    /// `(id, voxels)` of every segment of the flood fill, in creation order.
    pub segments: Vec<(u64, u64)>,
    /// Network evaluations of the flood fill.
    pub predict_calls: u64,
    /// The smallest `|logit|` the network produced during the flood fill.
    pub min_abs_logit: f32,
}

/// The network with its logits binarised to `+-4` (`> 0`: object): the flood fill depends on the
/// network's logits only through their signs, so logits that differ in their last bits (std and
/// no_std GEMMs round differently) give the same segmentation unless one lies within rounding of
/// 0; `min_abs_logit` records how far they stayed from it.
struct Signs {
    net: ConvStack3d,
    min_abs_logit: f32,
}

impl Predictor for Signs {
    fn fov(&self) -> [usize; 3] {
        self.net.config().fov
    }
    fn predict(&mut self, image: &[f32], seed: &[f32], out: &mut [f32]) {
        self.net.forward(image, seed, 1, out);
        for o in out.iter_mut() {
            self.min_abs_logit = self.min_abs_logit.min(o.abs());
            *o = if *o > 0.0 { 4.0 } else { -4.0 };
        }
    }
}

/// Volume shape `[z, y, x]`.
pub const SHAPE: [usize; 3] = [16, 16, 16];

/// Network (depth 2, 4 features, FOV 5^3, deltas 2), synthetic volume and flood fill, all seeded.
pub fn run() -> Result<Report, InferenceError> {
    let cfg = ModelConfig {
        depth: 2,
        features: 4,
        fov: [5; 3],
        deltas: [2; 3],
    };
    let mut net = ConvStack3d::new(cfg, 1.0, &mut Rng::new(5));
    let synth = SynthConfig {
        shape: SHAPE,
        neurites: 5,
        radius: (2.0, 4.0),
        seed: 3,
        ..SynthConfig::default()
    };
    let volume = generate(&synth).map_err(|e| InferenceError::Geometry(alloc::format!("{e}")))?;
    let image: Vec<f32> = volume
        .image
        .iter()
        .map(|&v| (v as f32 - 128.0) / 33.0)
        .collect();

    // Forward pass over the FOV at the centre, with google/ffn's seed: 0.95 at the centre, 0.05
    // elsewhere (as logits).
    let lg = InferenceOptions::default().logits();
    let f = cfg.fov[0];
    let c = SHAPE.map(|s| s / 2 - f / 2);
    let mut patch = Vec::with_capacity(f * f * f);
    for z in 0..f {
        for y in 0..f {
            let row = ((c[0] + z) * SHAPE[1] + c[1] + y) * SHAPE[2] + c[2];
            patch.extend_from_slice(&image[row..row + f]);
        }
    }
    let mut seed = vec![lg.pad_value; f * f * f];
    seed[f * f * f / 2] = lg.init_activation;
    let mut logits = vec![0.0; f * f * f];
    net.forward(&patch, &seed, 1, &mut logits);

    // Flood fill from a grid of seeds, with the network's logits binarised.
    let mut signs = Signs {
        net,
        min_abs_logit: f32::INFINITY,
    };
    let opts = InferenceOptions {
        min_segment_size: 5,
        ..InferenceOptions::default()
    };
    let mut canvas = Canvas::new(&image, SHAPE, cfg.fov, cfg.deltas, opts)?;
    let seeds = policy_grid(SHAPE, 3, &[2]);
    canvas.segment_all(&seeds, &mut signs, &|| 0.0, &mut |_| {})?;
    Ok(Report {
        params: signs.net.params().len(),
        logits,
        segments: canvas.origins().iter().map(|o| (o.id, o.voxels)).collect(),
        predict_calls: canvas.counters().predict_calls,
        min_abs_logit: signs.min_abs_logit,
    })
}

/// Writes `report` as lines `key value...`; f32 values in Rust's shortest round-trip form.
pub fn print(report: &Report, out: &mut impl Write) -> fmt::Result {
    writeln!(out, "params {}", report.params)?;
    let sum: f64 = report.logits.iter().map(|&v| v as f64).sum();
    writeln!(out, "logit_sum {sum}")?;
    for (i, v) in report.logits.iter().enumerate() {
        writeln!(out, "logit {i} {v}")?;
    }
    writeln!(out, "predict_calls {}", report.predict_calls)?;
    writeln!(out, "min_abs_logit {}", report.min_abs_logit)?;
    writeln!(out, "segments {}", report.segments.len())?;
    for (id, voxels) in &report.segments {
        writeln!(out, "segment {id} {voxels}")?;
    }
    Ok(())
}
