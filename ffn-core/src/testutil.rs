//! Helpers shared by the unit tests of the engine: seeded random data and closeness checks.

use crate::rng::Rng;
use alloc::vec::Vec;

/// The test seed: `FFN_TEST_SEED` from the environment when set (std builds), else `default`.
pub fn seed(default: u64) -> u64 {
    #[cfg(feature = "std")]
    if let Some(s) = std::env::var("FFN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return s;
    }
    default
}

/// `n` values uniform in `[-1, 1)`.
pub fn uniform(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.next_f32() * 2.0 - 1.0).collect()
}

/// Asserts `|a - b| <= atol + rtol * |b|` element-wise, naming `what` and the first bad index.
pub fn assert_close(what: &str, a: &[f32], b: &[f32], rtol: f32, atol: f32) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let tol = atol + rtol * y.abs();
        assert!(
            (x - y).abs() <= tol,
            "{what}[{i}]: {x} vs expected {y} (tolerance {tol})"
        );
    }
}

/// Central finite difference of `f` with respect to `x[i]`, in f64.
pub fn finite_diff(x: &mut [f32], i: usize, eps: f32, mut f: impl FnMut(&[f32]) -> f64) -> f64 {
    let orig = x[i];
    x[i] = orig + eps;
    let plus = f(x);
    x[i] = orig - eps;
    let minus = f(x);
    x[i] = orig;
    (plus - minus) / (2.0 * eps as f64)
}
