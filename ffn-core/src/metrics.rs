//! Segmentation quality metrics: variation of information (VI) and adapted Rand, with the
//! connectomics conventions.
//!
//! # Conventions
//! - `truth` is the ground truth, `test` the segmentation being scored; both are label volumes of the
//!   same shape, flattened in the same order.
//! - Voxels where `truth == 0` are dropped before anything is counted
//!   ([`MetricOptions::ignore_truth_zero`], on by default). `test == 0` is an ordinary segment unless
//!   [`MetricOptions::test_zero_singletons`] makes every such voxel a segment of its own.
//! - VI is in bits (log2): `voi_split = H(test | truth)` (high when a true object is cut into pieces),
//!   `voi_merge = H(truth | test)` (high when a segment spans several true objects).
//! - Rand: with `n_ij` the voxel counts of the contingency table, `a_i` the truth sizes and `b_j` the
//!   test sizes, `rand_split = sum n_ij^2 / sum a_i^2` and `rand_merge = sum n_ij^2 / sum b_j^2`;
//!   `adapted_rand_error = 1 - 2 rs rm / (rs + rm)`. Self-pairs are counted by default
//!   ([`MetricOptions::count_self_pairs`]); without them every sum has `N` (the voxel count)
//!   subtracted, as scikit-image does.
//!
//! The computation is pure and allocation-light: the contingency table is a `BTreeMap` filled with
//! run-length batches (neighbouring voxels usually share their label pair).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

/// Which voxels and pairs count; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricOptions {
    /// Drop voxels where the truth label is 0 (default true).
    pub ignore_truth_zero: bool,
    /// Treat every `test == 0` voxel as its own singleton segment (default false: 0 is one segment).
    pub test_zero_singletons: bool,
    /// Count the pair of a voxel with itself in the Rand sums (default true).
    pub count_self_pairs: bool,
}

impl Default for MetricOptions {
    fn default() -> Self {
        Self {
            ignore_truth_zero: true,
            test_zero_singletons: false,
            count_self_pairs: true,
        }
    }
}

impl MetricOptions {
    /// scikit-image's defaults (`variation_of_information`, `adapted_rand_error`): nothing ignored,
    /// 0 is an ordinary label, self-pairs not counted.
    pub fn skimage() -> Self {
        Self {
            ignore_truth_zero: false,
            test_zero_singletons: false,
            count_self_pairs: false,
        }
    }
}

/// Errors of the metric computations.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricsError {
    /// The two label arrays have different lengths.
    LengthMismatch {
        /// Voxels in the truth.
        truth: usize,
        /// Voxels in the test segmentation.
        test: usize,
    },
    /// No voxel is left to score (empty input, or truth is 0 everywhere).
    NoVoxels,
}

impl fmt::Display for MetricsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LengthMismatch { truth, test } => write!(
                f,
                "truth and test differ in size: expected {truth} voxels in test (as in truth), found {test}"
            ),
            Self::NoVoxels => write!(f, "no voxel to score: the truth is empty or 0 everywhere"),
        }
    }
}

impl core::error::Error for MetricsError {}

/// Test label value standing for one singleton segment (with `test_zero_singletons`).
const SINGLETON: u64 = u64::MAX;

/// The contingency table of two labellings: voxel counts per (truth, test) label pair.
#[derive(Clone, Debug, Default)]
pub struct Contingency {
    /// `(truth, test) -> voxels`. Singleton test voxels are stored under test label `u64::MAX`, one
    /// count per voxel, and handled as separate segments by every metric.
    pairs: BTreeMap<(u64, u64), u64>,
    total: u64,
}

impl Contingency {
    /// Counts the label pairs of `truth` and `test` (same length, same voxel order).
    pub fn new(truth: &[u64], test: &[u64], opts: &MetricOptions) -> Result<Self, MetricsError> {
        let mut c = Self::default();
        c.add(truth, test, opts)?;
        if c.total == 0 {
            return Err(MetricsError::NoVoxels);
        }
        Ok(c)
    }

    /// Adds the label pairs of `truth` and `test` (same length, same voxel order) to the table,
    /// so a volume can be counted block by block; the table of all blocks is that of the whole.
    pub fn add(
        &mut self,
        truth: &[u64],
        test: &[u64],
        opts: &MetricOptions,
    ) -> Result<(), MetricsError> {
        if truth.len() != test.len() {
            return Err(MetricsError::LengthMismatch {
                truth: truth.len(),
                test: test.len(),
            });
        }
        let pairs = &mut self.pairs;
        let mut run: Option<((u64, u64), u64)> = None;
        for (&t, &s) in truth.iter().zip(test) {
            if opts.ignore_truth_zero && t == 0 {
                continue;
            }
            self.total += 1;
            let s = if opts.test_zero_singletons && s == 0 {
                SINGLETON
            } else {
                s
            };
            match &mut run {
                Some((key, n)) if *key == (t, s) => *n += 1,
                _ => {
                    if let Some((key, n)) = run.take() {
                        *pairs.entry(key).or_insert(0) += n;
                    }
                    run = Some(((t, s), 1));
                }
            }
        }
        if let Some((key, n)) = run {
            *pairs.entry(key).or_insert(0) += n;
        }
        Ok(())
    }

    /// Number of voxels counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Iterates `(truth, test, voxels)` over the non-zero cells, `test == None` for singleton
    /// voxels (which are summed in one entry per truth label here).
    pub fn cells(&self) -> impl Iterator<Item = (u64, Option<u64>, u64)> + '_ {
        self.pairs
            .iter()
            .map(|(&(t, s), &n)| (t, (s != SINGLETON).then_some(s), n))
    }

    /// Voxels per truth label.
    pub fn truth_sizes(&self) -> BTreeMap<u64, u64> {
        let mut m = BTreeMap::new();
        for (&(t, _), &n) in &self.pairs {
            *m.entry(t).or_insert(0) += n;
        }
        m
    }

    /// Voxels per test label (singleton voxels excluded).
    pub fn test_sizes(&self) -> BTreeMap<u64, u64> {
        let mut m = BTreeMap::new();
        for (&(_, s), &n) in &self.pairs {
            if s != SINGLETON {
                *m.entry(s).or_insert(0) += n;
            }
        }
        m
    }

    fn singletons(&self) -> u64 {
        self.pairs
            .iter()
            .filter(|((_, s), _)| *s == SINGLETON)
            .map(|(_, &n)| n)
            .sum()
    }
}

/// The scores of one segmentation against the truth. Field names are the JSON keys of `ffn eval`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scores {
    /// H(test | truth) in bits.
    pub voi_split: f64,
    /// H(truth | test) in bits.
    pub voi_merge: f64,
    /// sum n_ij^2 / sum a_i^2 (truth marginals).
    pub rand_split: f64,
    /// sum n_ij^2 / sum b_j^2 (test marginals).
    pub rand_merge: f64,
    /// 1 - F-score of `rand_split` and `rand_merge`.
    pub adapted_rand_error: f64,
    /// Voxels scored.
    pub voxels: u64,
}

/// x * log2(x / y) for counts, 0 when x == 0.
fn xlog2(x: f64, y: f64) -> f64 {
    if x <= 0.0 { 0.0 } else { x * libm::log2(x / y) }
}

/// Computes VI and adapted Rand from a contingency table.
pub fn scores(c: &Contingency, opts: &MetricOptions) -> Scores {
    let n = c.total as f64;
    let truth = c.truth_sizes();
    let test = c.test_sizes();
    let singles = c.singletons() as f64;
    // H(test|truth) = -sum_ij p_ij log2(p_ij / p_i); singleton cells are n_ij = 1 each.
    let mut split = 0.0;
    let mut merge = 0.0;
    let mut sum_nij2 = 0.0;
    for (&(t, s), &nij) in &c.pairs {
        let nij = nij as f64;
        let ai = truth[&t] as f64;
        if s == SINGLETON {
            split -= nij * xlog2(1.0, ai);
            sum_nij2 += nij;
        } else {
            split -= xlog2(nij, ai);
            merge -= xlog2(nij, test[&s] as f64);
            sum_nij2 += nij * nij;
        }
    }
    let sum_a2: f64 = truth.values().map(|&a| (a as f64) * (a as f64)).sum();
    let sum_b2: f64 = test.values().map(|&b| (b as f64) * (b as f64)).sum::<f64>() + singles;
    let (p, a2, b2) = if opts.count_self_pairs {
        (sum_nij2, sum_a2, sum_b2)
    } else {
        (sum_nij2 - n, sum_a2 - n, sum_b2 - n)
    };
    let ratio = |num: f64, den: f64| if den > 0.0 { num / den } else { 1.0 };
    let rand_split = ratio(p, a2);
    let rand_merge = ratio(p, b2);
    let f = if rand_split + rand_merge > 0.0 {
        2.0 * rand_split * rand_merge / (rand_split + rand_merge)
    } else {
        0.0
    };
    Scores {
        voi_split: (split / n).max(0.0),
        voi_merge: (merge / n).max(0.0),
        rand_split,
        rand_merge,
        adapted_rand_error: 1.0 - f,
        voxels: c.total,
    }
}

/// Scores `test` against `truth` in one call.
pub fn evaluate(truth: &[u64], test: &[u64], opts: &MetricOptions) -> Result<Scores, MetricsError> {
    Ok(scores(&Contingency::new(truth, test, opts)?, opts))
}

/// One object involved in an error: a test segment spanning several true objects (a merge), or a
/// true object cut into several test segments (a split).
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorObject {
    /// The object's label (test label for merges, truth label for splits).
    pub id: u64,
    /// Its voxels (among the scored ones).
    pub voxels: u64,
    /// Its share of the VI term, in bits (the sum over all objects is `voi_merge` / `voi_split`).
    pub vi_bits: f64,
    /// The labels it overlaps on the other side, largest first: `(label, voxels)`. For splits, test
    /// singleton voxels are reported together under label `u64::MAX`.
    pub parts: Vec<(u64, u64)>,
}

fn worst(c: &Contingency, k: usize, by_test: bool) -> Vec<ErrorObject> {
    let n = c.total as f64;
    let mut groups: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for (&(t, s), &nij) in &c.pairs {
        if by_test {
            if s != SINGLETON {
                groups.entry(s).or_default().push((t, nij));
            }
        } else {
            groups.entry(t).or_default().push((s, nij));
        }
    }
    let mut out: Vec<ErrorObject> = groups
        .into_iter()
        .filter(|(_, parts)| parts.len() > 1 || parts.iter().any(|&(l, m)| l == SINGLETON && m > 1))
        .map(|(id, mut parts)| {
            let voxels: u64 = parts.iter().map(|p| p.1).sum();
            let vf = voxels as f64;
            let h: f64 = parts
                .iter()
                .map(|&(l, m)| {
                    if l == SINGLETON {
                        -(m as f64) * xlog2(1.0, vf)
                    } else {
                        -xlog2(m as f64, vf)
                    }
                })
                .sum();
            parts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            ErrorObject {
                id,
                voxels,
                vi_bits: h / n,
                parts,
            }
        })
        .collect();
    out.sort_by(|a, b| b.vi_bits.total_cmp(&a.vi_bits).then(a.id.cmp(&b.id)));
    out.truncate(k);
    out
}

/// The `k` test segments contributing most to `voi_merge`, worst first.
pub fn worst_merges(c: &Contingency, k: usize) -> Vec<ErrorObject> {
    worst(c, k, true)
}

/// The `k` true objects contributing most to `voi_split`, worst first.
pub fn worst_splits(c: &Contingency, k: usize) -> Vec<ErrorObject> {
    worst(c, k, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// The published case quoted in docs/ffn-reference.md (connectomics conventions).
    #[test]
    fn published_case() {
        let truth = [1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 4];
        let test = [3, 3, 3, 3, 4, 5, 6, 6, 5, 5, 5];
        let s = evaluate(&truth, &test, &MetricOptions::default()).unwrap();
        assert!(close(s.voi_split, 0.6140807, 1e-6), "{s:?}");
        assert!(close(s.voi_merge, 0.7272727, 1e-6), "{s:?}");
        assert!(close(s.rand_split, 0.6363636, 1e-6), "{s:?}");
        assert!(close(s.rand_merge, 0.5675676, 1e-6), "{s:?}");
        let f = 2.0 * s.rand_split * s.rand_merge / (s.rand_split + s.rand_merge);
        assert!(close(s.adapted_rand_error, 1.0 - f, 1e-12));
    }

    #[test]
    fn identical_and_relabelled_are_perfect() {
        let truth = [1, 1, 2, 2, 3, 3, 3, 7];
        let test = [9, 9, 4, 4, 0, 0, 0, 1];
        let s = evaluate(&truth, &test, &MetricOptions::default()).unwrap();
        assert!(s.voi_split.abs() < 1e-12 && s.voi_merge.abs() < 1e-12);
        assert!(close(s.rand_split, 1.0, 1e-12) && close(s.rand_merge, 1.0, 1e-12));
        assert!(s.adapted_rand_error.abs() < 1e-12);
    }

    #[test]
    fn truth_zero_is_ignored() {
        let truth = [0, 0, 1, 1];
        let test = [5, 6, 2, 2];
        let s = evaluate(&truth, &test, &MetricOptions::default()).unwrap();
        assert_eq!(s.voxels, 2);
        assert!(s.voi_split.abs() < 1e-12 && s.voi_merge.abs() < 1e-12);
        let all = evaluate(
            &truth,
            &test,
            &MetricOptions {
                ignore_truth_zero: false,
                ..Default::default()
            },
        )
        .unwrap();
        // truth 0 = {5, 6}: H(test|truth) = 2/4 * 1 bit.
        assert!(close(all.voi_split, 0.5, 1e-12));
    }

    #[test]
    fn one_merge_and_one_split() {
        // truth 1,2 merged into test 7; truth 3 split into 8,9.
        let truth = [1, 1, 2, 2, 3, 3, 3, 3];
        let test = [7, 7, 7, 7, 8, 8, 9, 9];
        let c = Contingency::new(&truth, &test, &MetricOptions::default()).unwrap();
        let s = scores(&c, &MetricOptions::default());
        assert!(close(s.voi_merge, 0.5, 1e-12)); // 4/8 voxels with 1 bit
        assert!(close(s.voi_split, 0.5, 1e-12));
        let m = worst_merges(&c, 5);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].id, m[0].voxels), (7, 4));
        assert_eq!(m[0].parts, vec![(1, 2), (2, 2)]);
        assert!(close(m[0].vi_bits, s.voi_merge, 1e-12));
        let sp = worst_splits(&c, 5);
        assert_eq!((sp[0].id, sp[0].voxels, sp[0].parts.len()), (3, 4, 2));
        // rand: sum nij^2 = 4+4+4+4 = 16; a: 4+4+16 = 24; b: 16+4+4 = 24.
        assert!(close(s.rand_split, 16.0 / 24.0, 1e-12));
        assert!(close(s.rand_merge, 16.0 / 24.0, 1e-12));
    }

    /// Slow reference: all voxel pairs (i, j) including i == j, direct entropy sums.
    fn reference(truth: &[u64], test: &[u64]) -> (f64, f64, f64, f64) {
        let n = truth.len() as f64;
        let (mut same_both, mut same_t, mut same_s) = (0.0, 0.0, 0.0);
        for i in 0..truth.len() {
            for j in 0..truth.len() {
                let a = truth[i] == truth[j];
                let b = test[i] == test[j];
                same_both += (a && b) as u8 as f64;
                same_t += a as u8 as f64;
                same_s += b as u8 as f64;
            }
        }
        let count = |f: &dyn Fn(usize) -> bool| (0..truth.len()).filter(|&k| f(k)).count() as f64;
        let (mut hs, mut hm) = (0.0, 0.0);
        for i in 0..truth.len() {
            let nij = count(&|k| truth[k] == truth[i] && test[k] == test[i]);
            let ai = count(&|k| truth[k] == truth[i]);
            let bj = count(&|k| test[k] == test[i]);
            hs -= libm::log2(nij / ai) / n;
            hm -= libm::log2(nij / bj) / n;
        }
        (hs, hm, same_both / same_t, same_both / same_s)
    }

    #[test]
    fn matches_pairwise_reference_on_random_labels() {
        let mut rng = crate::rng::Rng::new(7);
        for case in 0..20 {
            let len = 1 + rng.below(60);
            let nt = 1 + rng.below(5);
            let ns = 1 + rng.below(6);
            // Runs of equal labels exercise the run-length batching.
            let mut truth = Vec::new();
            let mut test = Vec::new();
            while truth.len() < len {
                let t = 1 + rng.below(nt) as u64;
                let s = rng.below(ns) as u64;
                for _ in 0..1 + rng.below(4) {
                    truth.push(t);
                    test.push(s);
                }
            }
            let s = evaluate(&truth, &test, &MetricOptions::default()).unwrap();
            let (hs, hm, rs, rm) = reference(&truth, &test);
            assert!(close(s.voi_split, hs, 1e-9), "case {case}");
            assert!(close(s.voi_merge, hm, 1e-9), "case {case}");
            assert!(close(s.rand_split, rs, 1e-12), "case {case}");
            assert!(close(s.rand_merge, rm, 1e-12), "case {case}");
        }
    }

    #[test]
    fn test_zero_singletons() {
        let truth = [1, 1, 1, 1];
        let test = [0, 0, 2, 2];
        let opts = MetricOptions {
            test_zero_singletons: true,
            ..Default::default()
        };
        let s = evaluate(&truth, &test, &opts).unwrap();
        // Equivalent labelling with explicit singletons.
        let t2 = evaluate(&truth, &[10, 11, 2, 2], &MetricOptions::default()).unwrap();
        assert!(close(s.voi_split, t2.voi_split, 1e-12));
        assert!(close(s.voi_merge, t2.voi_merge, 1e-12));
        assert!(close(s.rand_merge, t2.rand_merge, 1e-12));
        assert!(close(s.rand_split, t2.rand_split, 1e-12));
    }

    #[test]
    fn skimage_convention_drops_self_pairs() {
        let truth = [1, 1, 2, 2];
        let test = [1, 1, 1, 2];
        let s = evaluate(&truth, &test, &MetricOptions::skimage()).unwrap();
        // pairs without self: nij^2 - n = (4+1+1) - 4 = 2; a2 - n = 8 - 4 = 4; b2 - n = 10 - 4 = 6.
        assert!(close(s.rand_split, 0.5, 1e-12));
        assert!(close(s.rand_merge, 2.0 / 6.0, 1e-12));
    }

    #[test]
    fn errors() {
        assert_eq!(
            evaluate(&[1, 2], &[1], &MetricOptions::default()),
            Err(MetricsError::LengthMismatch { truth: 2, test: 1 })
        );
        assert_eq!(
            evaluate(&[0, 0], &[1, 1], &MetricOptions::default()),
            Err(MetricsError::NoVoxels)
        );
    }
}
