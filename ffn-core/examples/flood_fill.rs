//! Flood fill of an in-memory volume through the `Predictor` seam: `Canvas::segment_all` grows one
//! object per seed of a grid, with any model behind `Predictor`. Here the model is an oracle that
//! reads ground truth (the volume handed to the canvas holds the labels of a synthetic volume), so
//! the segmentation must reproduce them: every segment lies inside one neurite, and together they
//! cover most of the volume (at least 70%). Exits non-zero otherwise.
//!
//! Run: `cargo run -p ffn-core --example flood_fill`
use ffn_core::inference::{Canvas, InferenceOptions, Predictor, seeds::policy_grid};
use ffn_core::synth::{SynthConfig, generate};
use std::collections::HashMap;

/// Predicts "same object as the FOV's centre" wherever the patch holds the centre's label.
struct Oracle;

impl Predictor for Oracle {
    fn fov(&self) -> [usize; 3] {
        [9, 9, 9]
    }
    fn predict(&mut self, labels: &[f32], _seed: &[f32], out: &mut [f32]) {
        let centre = labels[labels.len() / 2];
        for (o, &l) in out.iter_mut().zip(labels) {
            *o = if l == centre { 4.0 } else { -4.0 };
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cfg = SynthConfig::new([32; 3], 8);
    let truth = generate(&cfg)?.labels;
    let labels: Vec<f32> = truth.iter().map(|&l| l as f32).collect();
    let min_segment_size = 50;
    let opts = InferenceOptions {
        min_segment_size,
        ..Default::default()
    };
    let mut canvas = Canvas::new(&labels, cfg.shape, [9; 3], [2; 3], opts)?;
    let seeds = policy_grid(cfg.shape, 6, &[4]);
    canvas.segment_all(&seeds, &mut Oracle, &|| 0.0, &mut |_| {})?;

    // Which ground-truth labels each segment covers.
    let mut cover: HashMap<u64, HashMap<u64, u64>> = HashMap::new();
    for (&s, &t) in canvas.segmentation().iter().zip(truth.iter()) {
        *cover.entry(u64::from(s)).or_default().entry(t).or_default() += 1;
    }
    for o in canvas.origins() {
        let inside: Vec<_> = cover[&o.id].keys().collect();
        println!(
            "segment {:>2}: seed {:?}, {:>5} voxels, {:>3} predictions, labels {inside:?}",
            o.id, o.seed, o.voxels, o.iterations
        );
    }
    let segmented = canvas.counters().voxels_segmented as f64 / labels.len() as f64;
    println!(
        "{} segments cover {:.1}% of the volume",
        canvas.origins().len(),
        100.0 * segmented
    );
    let impure = cover.iter().filter(|(s, t)| **s != 0 && t.len() != 1);
    let impure = impure.count();
    if impure > 0 || segmented < 0.7 {
        return Err(
            format!("{impure} segments span several neurites; {segmented:.3} covered").into(),
        );
    }
    Ok(())
}
