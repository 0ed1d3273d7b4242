//! Contiguous segment ids.
//!
//! - [`relabel_first_appearance`]: ids `1..=n` in the order segments first appear in the buffer
//!   (`[z][y][x]` scan order). Two labellings describe the same partition exactly when their
//!   relabelled buffers are equal, which makes it the canonical form for comparisons.
//! - [`relabel_sequential`]: ids `1..=n` in increasing order of the old ids (scikit-image's
//!   `relabel_sequential`).
//!
//! 0 stays 0 in both.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// Renumbers the non-zero ids of `labels` to `1..=n` in order of first appearance; returns `n`.
pub fn relabel_first_appearance(labels: &mut [u64]) -> u64 {
    let mut map: BTreeMap<u64, u64> = BTreeMap::new();
    let mut next = 0u64;
    // Neighbouring voxels usually share their id: cache the last mapping.
    let mut last: Option<(u64, u64)> = None;
    for v in labels.iter_mut() {
        if *v == 0 {
            continue;
        }
        let new = match last {
            Some((old, new)) if old == *v => new,
            _ => {
                let new = *map.entry(*v).or_insert_with(|| {
                    next += 1;
                    next
                });
                last = Some((*v, new));
                new
            }
        };
        *v = new;
    }
    next
}

/// Renumbers the non-zero ids of `labels` to `1..=n` keeping their order; returns the old ids in
/// new-id order (`old[k - 1]` became `k`).
pub fn relabel_sequential(labels: &mut [u64]) -> Vec<u64> {
    let mut ids: Vec<u64> = labels.iter().copied().filter(|&v| v != 0).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut last: Option<(u64, u64)> = None;
    for v in labels.iter_mut() {
        if *v == 0 {
            continue;
        }
        let new = match last {
            Some((old, new)) if old == *v => new,
            _ => {
                // `ids` holds every non-zero value of `labels`, so the search always succeeds.
                let new = ids.binary_search(v).map_or(0, |k| k as u64 + 1);
                last = Some((*v, new));
                new
            }
        };
        *v = new;
    }
    ids
}

/// Number of voxels of every non-zero id.
pub fn segment_sizes(labels: &[u64]) -> BTreeMap<u64, u64> {
    let mut sizes = BTreeMap::new();
    for &v in labels {
        if v != 0 {
            *sizes.entry(v).or_insert(0) += 1;
        }
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn first_appearance_is_canonical() {
        let mut a = vec![7, 7, 0, 3, 9, 3, 0, 7];
        assert_eq!(relabel_first_appearance(&mut a), 3);
        assert_eq!(a, vec![1, 1, 0, 2, 3, 2, 0, 1]);
        // The same partition under other ids gives the same buffer.
        let mut b = vec![2, 2, 0, 100, 5, 100, 0, 2];
        relabel_first_appearance(&mut b);
        assert_eq!(a, b);
        let mut empty: Vec<u64> = vec![];
        assert_eq!(relabel_first_appearance(&mut empty), 0);
        let mut zeros = vec![0u64; 4];
        assert_eq!(relabel_first_appearance(&mut zeros), 0);
        assert_eq!(zeros, vec![0; 4]);
    }

    #[test]
    fn sequential_keeps_the_order() {
        let mut a = vec![7, 7, 0, 3, u64::MAX, 3];
        let old = relabel_sequential(&mut a);
        assert_eq!(old, vec![3, 7, u64::MAX]);
        assert_eq!(a, vec![2, 2, 0, 1, 3, 1]);
        assert_eq!(
            segment_sizes(&a).into_iter().collect::<Vec<_>>(),
            vec![(1, 2), (2, 2), (3, 1)]
        );
    }
}
