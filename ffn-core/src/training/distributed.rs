//! The pure arithmetic of synchronous data-parallel training (no threads, no transport):
//!
//! - [`LrScaling`] / [`RankScaling`]: the learning rate scaled with the number of ranks (none,
//!   linear, square root), reached by a linear warm-up from the base rate (Goyal et al.; the seed
//!   paper: linear with 2000 warm-up steps);
//! - [`param_checksum`] and [`fingerprint`]: order-sensitive 64-bit digests to compare parameters
//!   and configurations across ranks;
//! - [`BucketPlan`]: the fixed partition of the flat gradient into fused allreduce buckets, in the
//!   order in which the backward pass finishes them (the same on every rank, so the collectives
//!   are called in the same order with the same lengths, and the result does not depend on timing).

use alloc::vec::Vec;
use core::ops::Range;

use super::{TrainingError, invalid};

/// How the learning rate grows with the number of ranks `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LrScaling {
    /// The base rate whatever the number of ranks.
    None,
    /// `n x` the base rate (the seed paper; Goyal et al.).
    #[default]
    Linear,
    /// `sqrt(n) x` the base rate (reported better beyond 16 nodes).
    Sqrt,
}

impl LrScaling {
    /// The target multiplier for `ranks` ranks.
    pub fn multiplier(self, ranks: usize) -> f64 {
        let n = ranks.max(1) as f64;
        match self {
            LrScaling::None => 1.0,
            LrScaling::Linear => n,
            LrScaling::Sqrt => libm::sqrt(n),
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LrScaling::None => "none",
            LrScaling::Linear => "linear",
            LrScaling::Sqrt => "sqrt",
        }
    }
}

/// The rank-dependent factor applied on top of the learning-rate schedule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankScaling {
    /// Scaling rule.
    pub mode: LrScaling,
    /// Number of ranks.
    pub ranks: usize,
    /// Steps over which the factor ramps linearly from 1 to its target (0: target from step 0).
    pub warmup_steps: u64,
}

impl RankScaling {
    /// The seed paper's default: linear scaling, 2000 warm-up steps.
    pub fn paper(ranks: usize) -> Self {
        Self {
            mode: LrScaling::Linear,
            ranks,
            warmup_steps: 2000,
        }
    }

    /// Checks the fields.
    pub fn validate(&self) -> Result<(), TrainingError> {
        if self.ranks == 0 {
            return Err(invalid("ranks", ">= 1", 0));
        }
        Ok(())
    }

    /// The factor at the (0-based, global) `step`: `1 + (k - 1) * min(step, warmup) / warmup`
    /// where `k` is the target multiplier. One rank always gives 1.
    pub fn factor(&self, step: u64) -> f64 {
        let k = self.mode.multiplier(self.ranks);
        if self.warmup_steps == 0 || step >= self.warmup_steps {
            return k;
        }
        1.0 + (k - 1.0) * step as f64 / self.warmup_steps as f64
    }

    /// `base_lr` (the schedule's rate at `step`) times [`RankScaling::factor`].
    pub fn scale(&self, base_lr: f32, step: u64) -> f32 {
        (base_lr as f64 * self.factor(step)) as f32
    }
}

use crate::hash::{FNV_OFFSET, FNV_PRIME};

/// 64-bit FNV-1a of `bytes` ([`crate::hash::fnv1a`]): a stable fingerprint of a canonical
/// configuration text.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    crate::hash::fnv1a(bytes)
}

/// An order-sensitive digest of the bit patterns of `params` (and their number): ranks whose
/// parameters differ in any bit (or whose order differs) get different checksums with overwhelming
/// probability. Not cryptographic.
pub fn param_checksum(params: &[f32]) -> u64 {
    // Four independent lanes keep the loop fast; each lane is a multiply-xorshift hash.
    let mut lanes = [
        FNV_OFFSET,
        FNV_PRIME,
        0x9E37_79B9_7F4A_7C15,
        0xD1B5_4A32_D192_ED03,
    ];
    let mix = |h: u64, v: u64| {
        let x = (h ^ v).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x ^ (x >> 29)
    };
    let mut chunks = params.chunks_exact(4);
    for c in &mut chunks {
        for l in 0..4 {
            lanes[l] = mix(lanes[l], c[l].to_bits() as u64);
        }
    }
    for (l, v) in chunks.remainder().iter().enumerate() {
        lanes[l] = mix(lanes[l], v.to_bits() as u64 | 1 << 40);
    }
    let mut h = mix(params.len() as u64, 0x5851_F42D_4C95_7F2D);
    for l in lanes {
        h = mix(h.rotate_left(17), l);
    }
    h
}

/// The fixed partition of a flat gradient into fused allreduce buckets.
///
/// Built from the gradient ranges in the order the backward pass completes them (the last layer
/// first): consecutive ranges are merged until a bucket holds at least `min_floats` values.
/// Bucket `i` is reduced as soon as all its ranges are final; buckets are reduced in index order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketPlan {
    buckets: Vec<Range<usize>>,
    total: usize,
}

impl BucketPlan {
    /// Merges `ready_order` (disjoint ranges covering `0..total`, in completion order; each merged
    /// bucket must stay contiguous) into buckets of at least `min_floats` values (the last may be
    /// smaller). `min_floats == 0` gives one bucket per range.
    pub fn new(ready_order: &[Range<usize>], min_floats: usize) -> Result<Self, TrainingError> {
        let total: usize = ready_order.iter().map(|r| r.len()).sum();
        let mut covered = alloc::vec![false; total];
        for r in ready_order {
            if r.end > total || r.start > r.end {
                return Err(invalid(
                    "gradient ranges",
                    alloc::format!("ranges within 0..{total}"),
                    r,
                ));
            }
            for c in &mut covered[r.clone()] {
                if *c {
                    return Err(invalid("gradient ranges", "disjoint ranges", r));
                }
                *c = true;
            }
        }
        let mut buckets: Vec<Range<usize>> = Vec::new();
        let mut open: Option<Range<usize>> = None;
        for r in ready_order.iter().filter(|r| !r.is_empty()) {
            open = Some(match open.take() {
                None => r.clone(),
                Some(b) if b.start == r.end => r.start..b.end,
                Some(b) if b.end == r.start => b.start..r.end,
                Some(b) => {
                    // Not adjacent: close the open bucket.
                    buckets.push(b);
                    r.clone()
                }
            });
            if let Some(b) = &open
                && b.len() >= min_floats
            {
                buckets.push(b.clone());
                open = None;
            }
        }
        if let Some(b) = open {
            buckets.push(b);
        }
        Ok(Self { buckets, total })
    }

    /// The buckets, in reduction order.
    pub fn buckets(&self) -> &[Range<usize>] {
        &self.buckets
    }

    /// Values covered (the gradient length).
    pub fn total(&self) -> usize {
        self.total
    }

    /// The bucket holding value `index`.
    pub fn bucket_of(&self, index: usize) -> Option<usize> {
        self.buckets.iter().position(|b| b.contains(&index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_rules_and_warmup() {
        let lin = RankScaling {
            mode: LrScaling::Linear,
            ranks: 4,
            warmup_steps: 4,
        };
        let f: Vec<f64> = (0..6).map(|s| lin.factor(s)).collect();
        assert_eq!(f, [1.0, 1.75, 2.5, 3.25, 4.0, 4.0]);
        let sq = RankScaling {
            mode: LrScaling::Sqrt,
            ranks: 16,
            warmup_steps: 0,
        };
        assert_eq!(sq.factor(0), 4.0);
        let none = RankScaling {
            mode: LrScaling::None,
            ranks: 16,
            warmup_steps: 10,
        };
        assert!((0..20).all(|s| none.factor(s) == 1.0));
        // One rank never changes the rate, whatever the rule.
        for mode in [LrScaling::None, LrScaling::Linear, LrScaling::Sqrt] {
            let one = RankScaling {
                mode,
                ranks: 1,
                warmup_steps: 7,
            };
            assert!((0..20).all(|s| one.scale(0.01, s) == 0.01));
        }
        assert_eq!(RankScaling::paper(8).warmup_steps, 2000);
        assert_eq!(RankScaling::paper(8).factor(1000), 4.5);
        assert!(RankScaling { ranks: 0, ..lin }.validate().is_err());
    }

    #[test]
    fn checksums_see_every_bit_and_the_order() {
        let a: Vec<f32> = (0..1001).map(|i| i as f32 * 0.37 - 5.0).collect();
        let base = param_checksum(&a);
        assert_eq!(base, param_checksum(&a.clone()));
        for i in [0, 3, 500, 999, 1000] {
            let mut b = a.clone();
            b[i] = f32::from_bits(b[i].to_bits() ^ 1);
            assert_ne!(param_checksum(&b), base, "flip at {i}");
        }
        let mut swapped = a.clone();
        swapped.swap(1, 2);
        assert_ne!(param_checksum(&swapped), base);
        assert_ne!(param_checksum(&a[..1000]), base);
        assert_ne!(param_checksum(&[0.0]), param_checksum(&[0.0, 0.0]));
        assert_ne!(fingerprint(b"{\"lr\":1}"), fingerprint(b"{\"lr\":2}"));
        assert_eq!(fingerprint(b""), FNV_OFFSET);
    }

    #[test]
    fn buckets_merge_in_completion_order() {
        // Backward order: the last layer first.
        let order = [90..100, 60..90, 50..60, 10..50, 0..10];
        let p = BucketPlan::new(&order, 35).unwrap();
        assert_eq!(p.buckets(), &[60..100, 10..60, 0..10]);
        assert_eq!(p.total(), 100);
        assert_eq!(p.bucket_of(55), Some(1));
        let one_each = BucketPlan::new(&order, 0).unwrap();
        assert_eq!(one_each.buckets().len(), 5);
        let all = BucketPlan::new(&order, 1000).unwrap();
        assert_eq!(all.buckets().len(), 1);
        assert_eq!(all.buckets()[0], 0..100);
        assert!(BucketPlan::new(&[0..10, 5..20], 4).is_err());
        assert!(BucketPlan::new(&[0..10, 20..30], 4).is_err());
        let gap = BucketPlan::new(&[10..20, 0..5, 5..10], 100).unwrap();
        assert_eq!(gap.buckets(), &[10..20, 0..10]);
    }
}
