//! Disjoint sets over dense indices `0..n` (union by size, path halving).
//!
//! The representative of a set is not specified; [`UnionFind::min_member`] gives a deterministic
//! name for a set (its smallest index) whatever the order of the unions.

use alloc::vec::Vec;

/// Disjoint sets over `0..len()`.
#[derive(Clone, Debug, Default)]
pub struct UnionFind {
    parent: Vec<usize>,
    size: Vec<usize>,
    /// Smallest member of each set, valid at roots.
    min: Vec<usize>,
}

impl UnionFind {
    /// `n` singleton sets.
    pub fn new(n: usize) -> Self {
        Self {
            parent: (0..n).collect(),
            size: alloc::vec![1; n],
            min: (0..n).collect(),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// The root of `i`'s set.
    ///
    /// # Panics
    /// When `i >= len()`.
    pub fn find(&mut self, mut i: usize) -> usize {
        while self.parent[i] != i {
            let grand = self.parent[self.parent[i]];
            self.parent[i] = grand;
            i = grand;
        }
        i
    }

    /// Merges the sets of `a` and `b`; returns true when they were separate.
    pub fn union(&mut self, a: usize, b: usize) -> bool {
        let (mut ra, mut rb) = (self.find(a), self.find(b));
        if ra == rb {
            return false;
        }
        if self.size[ra] < self.size[rb] {
            core::mem::swap(&mut ra, &mut rb);
        }
        self.parent[rb] = ra;
        self.size[ra] += self.size[rb];
        self.min[ra] = self.min[ra].min(self.min[rb]);
        true
    }

    /// The smallest index in `i`'s set: a name that does not depend on the order of unions.
    pub fn min_member(&mut self, i: usize) -> usize {
        let r = self.find(i);
        self.min[r]
    }

    /// Number of elements in `i`'s set.
    pub fn set_size(&mut self, i: usize) -> usize {
        let r = self.find(i);
        self.size[r]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The slow obvious reference: relabel a whole component array on every union.
    fn reference(n: usize, pairs: &[(usize, usize)]) -> Vec<usize> {
        let mut comp: Vec<usize> = (0..n).collect();
        for &(a, b) in pairs {
            let (ca, cb) = (comp[a], comp[b]);
            let m = ca.min(cb);
            for c in comp.iter_mut() {
                if *c == ca || *c == cb {
                    *c = m;
                }
            }
        }
        comp
    }

    #[test]
    fn matches_the_reference_on_random_unions() {
        let mut rng = Rng::new(11);
        for n in [0usize, 1, 2, 7, 50] {
            for _ in 0..5 {
                let pairs: Vec<(usize, usize)> = if n == 0 {
                    Vec::new()
                } else {
                    (0..n)
                        .map(|_| {
                            (
                                (rng.next_f64() * n as f64) as usize,
                                (rng.next_f64() * n as f64) as usize,
                            )
                        })
                        .collect()
                };
                let mut uf = UnionFind::new(n);
                for &(a, b) in &pairs {
                    uf.union(a, b);
                }
                let want = reference(n, &pairs);
                let got: Vec<usize> = (0..n).map(|i| uf.min_member(i)).collect();
                assert_eq!(got, want, "n {n} pairs {pairs:?}");
                for i in 0..n {
                    assert_eq!(
                        uf.set_size(i),
                        want.iter().filter(|&&c| c == want[i]).count()
                    );
                }
            }
        }
    }

    #[test]
    fn union_reports_whether_sets_were_separate() {
        let mut uf = UnionFind::new(3);
        assert!(uf.union(0, 2));
        assert!(!uf.union(2, 0));
        assert_eq!(uf.min_member(2), 0);
        assert_eq!(uf.min_member(1), 1);
        assert_eq!(uf.len(), 3);
        assert!(!uf.is_empty());
    }
}
