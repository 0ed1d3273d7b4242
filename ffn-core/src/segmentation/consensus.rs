//! Consensus of two segmentations by intersection (google/ffn's
//! `split_segmentation_by_intersection`).
//!
//! # The rule
//! Every distinct pair `(a, b)` of labels found at the same voxel of the two segmentations is a
//! piece of its own. Then, in the order of the pairs sorted by `(b, a)`:
//!
//! - pieces with `a == 0`, and pieces of fewer than `min_size` voxels, become 0;
//! - the piece of `a` with its largest overlap (ties: the smallest `b`; `b == 0` counts as an
//!   ordinary partner) keeps the id `a`;
//! - every other piece gets a new id, `max(a) + 1, max(a) + 2, ...` in that order.
//!
//! So `(a, 0)` pieces survive (the second segmentation saw nothing there) while `(0, b)` pieces are
//! dropped. The result over-segments both inputs: it splits wherever either one does.

use super::SegmentationError;
use alloc::collections::BTreeMap;
use alloc::string::ToString;
use alloc::vec::Vec;

/// Replaces `a` by its intersection with `b` (see the module docs); returns the number of
/// non-zero ids in the result.
pub fn split_segmentation_by_intersection(
    a: &mut [u64],
    b: &[u64],
    min_size: u64,
) -> Result<u64, SegmentationError> {
    if a.len() != b.len() {
        return Err(SegmentationError::LengthMismatch {
            what: "second segmentation (same shape as the first)".to_string(),
            expected: a.len(),
            actual: b.len(),
        });
    }
    // (b, a) -> voxels, sorted like google/ffn's joint labels (b in the high bits).
    let mut counts: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let mut run: Option<((u64, u64), u64)> = None;
    for (&va, &vb) in a.iter().zip(b) {
        match &mut run {
            Some((k, n)) if *k == (vb, va) => *n += 1,
            _ => {
                if let Some((k, n)) = run.take() {
                    *counts.entry(k).or_insert(0) += n;
                }
                run = Some(((vb, va), 1));
            }
        }
    }
    if let Some((k, n)) = run.take() {
        *counts.entry(k).or_insert(0) += n;
    }
    // Largest partner of every a: the first maximum in (b, a) order, i.e. the smallest b.
    let mut best: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (&(lb, la), &n) in &counts {
        let e = best.entry(la).or_insert((lb, n));
        if e.1 < n {
            *e = (lb, n);
        }
    }
    let mut next = a.iter().copied().max().unwrap_or(0);
    let mut new_ids: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for (&(lb, la), &n) in &counts {
        let id = if n < min_size || la == 0 {
            0
        } else if best.get(&la).is_some_and(|&(bb, _)| bb == lb) {
            la
        } else {
            next = next
                .checked_add(1)
                .ok_or_else(|| SegmentationError::InvalidParameter {
                    field: "segment ids",
                    reason: "new ids would exceed u64::MAX".to_string(),
                })?;
            next
        };
        new_ids.insert((lb, la), id);
    }
    let mut last: Option<((u64, u64), u64)> = None;
    for (va, &vb) in a.iter_mut().zip(b) {
        let key = (vb, *va);
        let id = match last {
            Some((k, id)) if k == key => id,
            _ => {
                let id = new_ids.get(&key).copied().unwrap_or(0);
                last = Some((key, id));
                id
            }
        };
        *va = id;
    }
    let mut ids: Vec<u64> = new_ids.into_values().filter(|&v| v != 0).collect();
    ids.sort_unstable();
    ids.dedup();
    Ok(ids.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn a_worked_example() {
        // a: segment 5 over 8 voxels, segment 2 over 4; b splits 5 into 1 (5 voxels) and 3
        // (3 voxels), and sees nothing under segment 2 except one voxel of 4.
        let mut a = vec![5, 5, 5, 5, 5, 5, 5, 5, 2, 2, 2, 2, 0, 0];
        let b = vec![1, 1, 1, 1, 1, 3, 3, 3, 0, 0, 0, 4, 4, 0];
        let n = split_segmentation_by_intersection(&mut a, &b, 1).unwrap();
        // Pairs in (b, a) order: (0,0) -> 0, (0,2) keeps 2 (3 voxels, largest), (1,5) keeps 5,
        // (3,5) -> 6, (4,0) -> 0, (4,2) -> 7.
        assert_eq!(a, vec![5, 5, 5, 5, 5, 6, 6, 6, 2, 2, 2, 7, 0, 0]);
        assert_eq!(n, 4);
    }

    #[test]
    fn small_pieces_vanish_and_ties_go_to_the_smallest_b() {
        let mut a = vec![1, 1, 1, 1, 1, 1, 9];
        let b = vec![4, 4, 4, 2, 2, 2, 7];
        split_segmentation_by_intersection(&mut a, &b, 2).unwrap();
        // (2,1) and (4,1) tie with 3 voxels: b = 2 keeps id 1; (4,1) becomes 10; (7,9) is too small.
        assert_eq!(a, vec![10, 10, 10, 1, 1, 1, 0]);
    }

    #[test]
    fn self_consensus_is_identity_and_shapes_are_checked() {
        let orig = vec![3, 3, 0, 1, 1, 2, 8];
        let mut a = orig.clone();
        split_segmentation_by_intersection(&mut a, &orig, 1).unwrap();
        assert_eq!(a, orig);
        let e = split_segmentation_by_intersection(&mut a, &[1, 2], 1).unwrap_err();
        assert!(matches!(
            e,
            SegmentationError::LengthMismatch {
                expected: 7,
                actual: 2,
                ..
            }
        ));
        let mut empty: Vec<u64> = vec![];
        assert_eq!(
            split_segmentation_by_intersection(&mut empty, &[], 1).unwrap(),
            0
        );
    }
}
