//! Sigmoid cross-entropy with logits against soft labels, mean over voxels, and its gradient.
//!
//! Per voxel, with logit `x` and label `z` in `[0, 1]`:
//! `max(x, 0) - x z + log(1 + exp(-|x|))`, which equals `-z log σ(x) - (1 - z) log(1 - σ(x))` and
//! never overflows, whatever `|x|`. Its derivative is `σ(x) - z`.

use crate::parallel::{ELEMENTWISE_CHUNK, for_each_chunk_mut};

/// Loss of one voxel (f64 for accumulation).
pub fn sigmoid_ce(x: f32, z: f32) -> f64 {
    let x = x as f64;
    x.max(0.0) - x * z as f64 + libm::log1p(libm::exp(-x.abs()))
}

/// Logistic sigmoid `1 / (1 + exp(-x))`, computed as `exp(x) / (1 + exp(x))` for negative `x`.
///
/// The one sigmoid of ffn-core: the loss gradient, the probability map of inference
/// ([`crate::inference::sigmoid`]) and [`crate::training::sigmoid`] all use it.
pub fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + libm::expf(-x))
    } else {
        let e = libm::expf(x);
        e / (1.0 + e)
    }
}

/// Mean sigmoid cross-entropy of `logits` against `labels`. Returns 0 for empty input.
///
/// # Panics
/// When the lengths differ.
pub fn sigmoid_ce_mean(logits: &[f32], labels: &[f32]) -> f32 {
    assert_eq!(
        logits.len(),
        labels.len(),
        "sigmoid_ce_mean: logits and labels lengths differ"
    );
    if logits.is_empty() {
        return 0.0;
    }
    let sum: f64 = logits
        .iter()
        .zip(labels)
        .map(|(x, z)| sigmoid_ce(*x, *z))
        .sum();
    (sum / logits.len() as f64) as f32
}

/// Mean loss and its gradient `grad[i] = (σ(x_i) - z_i) / n` (overwritten).
///
/// # Panics
/// When the lengths differ.
pub fn sigmoid_ce_mean_grad(logits: &[f32], labels: &[f32], grad: &mut [f32]) -> f32 {
    assert_eq!(
        logits.len(),
        grad.len(),
        "sigmoid_ce_mean_grad: logits and gradient lengths differ"
    );
    let loss = sigmoid_ce_mean(logits, labels);
    let inv = 1.0 / logits.len().max(1) as f32;
    for_each_chunk_mut(grad, ELEMENTWISE_CHUNK, |i, g| {
        let o = i * ELEMENTWISE_CHUNK;
        for ((g, x), z) in g.iter_mut().zip(&logits[o..]).zip(&labels[o..]) {
            *g = (sigmoid(*x) - z) * inv;
        }
    });
    loss
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::testutil::{finite_diff, uniform};
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn matches_the_textbook_formula_and_stays_finite() {
        for (x, z) in [(0.3f32, 0.95f32), (-2.0, 0.05), (4.0, 0.5)] {
            let s = 1.0 / (1.0 + (-(x as f64)).exp());
            let naive = -(z as f64) * s.ln() - (1.0 - z as f64) * (1.0 - s).ln();
            assert!((sigmoid_ce(x, z) - naive).abs() < 1e-12);
        }
        // Large |x|: exact asymptotes, no inf or NaN.
        assert!((sigmoid_ce(1e4, 0.05) - 0.95e4).abs() < 1e-3);
        assert!((sigmoid_ce(-1e4, 0.05) - 0.05e4).abs() < 1e-3);
        assert_eq!(sigmoid(-1e4), 0.0);
        assert_eq!(sigmoid(1e4), 1.0);
        let mut g = vec![0.0; 2];
        let l = sigmoid_ce_mean_grad(&[1e30, -1e30], &[0.0, 1.0], &mut g);
        assert!(l.is_finite() && g.iter().all(|v| v.is_finite()));
        assert_eq!(g, [0.5, -0.5]);
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let mut rng = Rng::new(crate::testutil::seed(9));
        let mut x: Vec<f32> = uniform(&mut rng, 64).iter().map(|v| v * 6.0).collect();
        let z: Vec<f32> = (0..64)
            .map(|i| if i % 3 == 0 { 0.95 } else { 0.05 })
            .collect();
        let mut g = vec![0.0; 64];
        sigmoid_ce_mean_grad(&x, &z, &mut g);
        for i in 0..x.len() {
            let fd = finite_diff(&mut x, i, 1e-2, |x| {
                x.iter()
                    .zip(&z)
                    .map(|(x, z)| sigmoid_ce(*x, *z))
                    .sum::<f64>()
                    / 64.0
            });
            assert!((fd - g[i] as f64).abs() < 1e-5, "{i}: {fd} vs {}", g[i]);
        }
    }
}
