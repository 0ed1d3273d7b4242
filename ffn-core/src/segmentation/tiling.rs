//! Overlapping sub-volumes ("tiles") of a volume.
//!
//! Along each axis, tiles of `size` voxels start every `size - overlap` voxels from 0; the last
//! tile is moved back so that it ends exactly at the volume's edge (its overlap with the one before
//! may then be larger). An axis not longer than `size` has one tile covering all of it. Tiles are
//! numbered z-major over the tile grid (`index = (gz * ny + gy) * nx + gx`).
//!
//! Every voxel has exactly one owning tile: its **core** box. Core boundaries lie in the middle of
//! each overlap (`(start of the next tile + end of this tile) / 2`), so the core of an interior tile
//! stays at least `overlap / 2` voxels away from its faces, where flood filling is blind to context
//! beyond the tile. The reconciled volume takes every voxel from the tile whose core holds it.
//!
//! With a flood-filling network of field of view `fov`, choose `overlap >= fov` on each axis: then a
//! segment can reach every voxel of its tile's core (FOV centres stay `fov / 2` from the faces).

use super::{SegmentationError, prod};
use alloc::format;
use alloc::vec::Vec;

/// One tile of a [`TilePlan`]. Coordinates are `[z, y, x]` in the volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tile {
    /// Position in the plan's tile order.
    pub index: usize,
    /// Position in the tile grid.
    pub grid: [usize; 3],
    /// First voxel of the tile.
    pub origin: [usize; 3],
    /// Extent of the tile.
    pub shape: [usize; 3],
    /// First voxel of the core (the voxels this tile owns).
    pub core_lo: [usize; 3],
    /// One past the last voxel of the core.
    pub core_hi: [usize; 3],
}

impl Tile {
    /// One past the last voxel of the tile.
    pub fn end(&self) -> [usize; 3] {
        [0, 1, 2].map(|a| self.origin[a] + self.shape[a])
    }

    /// Number of voxels of the tile.
    pub fn voxels(&self) -> usize {
        prod(self.shape)
    }
}

/// The tiles of a volume; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TilePlan {
    shape: [usize; 3],
    size: [usize; 3],
    overlap: [usize; 3],
    starts: [Vec<usize>; 3],
    /// Core boundaries per axis: `bounds[a][i]..bounds[a][i + 1]` is the core of grid position `i`.
    bounds: [Vec<usize>; 3],
}

fn axis_starts(len: usize, size: usize, step: usize) -> Vec<usize> {
    if len <= size {
        return alloc::vec![0];
    }
    let mut starts = Vec::new();
    let mut s = 0;
    loop {
        starts.push(s);
        if s + size >= len {
            return starts;
        }
        s = (s + step).min(len - size);
    }
}

impl TilePlan {
    /// A plan for a volume of `shape` with tiles of `size` overlapping by `overlap` (all `[z, y, x]`).
    /// Sizes larger than the volume are clipped to it.
    pub fn new(
        shape: [usize; 3],
        size: [usize; 3],
        overlap: [usize; 3],
    ) -> Result<Self, SegmentationError> {
        if shape.contains(&0) {
            return Err(SegmentationError::InvalidParameter {
                field: "volume shape",
                reason: format!("expected every axis >= 1 voxel, found {shape:?} (z, y, x)"),
            });
        }
        let size = [0, 1, 2].map(|a| size[a].min(shape[a]));
        let mut starts: [Vec<usize>; 3] = Default::default();
        let mut bounds: [Vec<usize>; 3] = Default::default();
        for a in 0..3 {
            if size[a] == 0 {
                return Err(SegmentationError::InvalidParameter {
                    field: "tile_size",
                    reason: format!("expected every axis >= 1 voxel, found {size:?} (z, y, x)"),
                });
            }
            if shape[a] > size[a] && overlap[a] >= size[a] {
                return Err(SegmentationError::InvalidParameter {
                    field: "tile_overlap",
                    reason: format!(
                        "expected less than the tile size {:?} on every axis, found {overlap:?} (z, y, x)",
                        size
                    ),
                });
            }
            starts[a] = axis_starts(shape[a], size[a], size[a].saturating_sub(overlap[a]).max(1));
            let s = &starts[a];
            let mut b = alloc::vec![0];
            for i in 0..s.len() - 1 {
                b.push((s[i + 1] + s[i] + size[a]) / 2);
            }
            b.push(shape[a]);
            bounds[a] = b;
        }
        Ok(Self {
            shape,
            size,
            overlap,
            starts,
            bounds,
        })
    }

    /// The volume shape.
    pub fn shape(&self) -> [usize; 3] {
        self.shape
    }

    /// Tile size (clipped to the volume).
    pub fn tile_size(&self) -> [usize; 3] {
        self.size
    }

    /// The requested overlap.
    pub fn overlap(&self) -> [usize; 3] {
        self.overlap
    }

    /// Number of tiles along each axis.
    pub fn grid_shape(&self) -> [usize; 3] {
        [0, 1, 2].map(|a| self.starts[a].len())
    }

    /// Number of tiles.
    pub fn len(&self) -> usize {
        prod(self.grid_shape())
    }

    /// True when the plan has no tiles (never: a plan covers at least one voxel).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tile `index`, or None past the end.
    pub fn tile(&self, index: usize) -> Option<Tile> {
        if index >= self.len() {
            return None;
        }
        let g = self.grid_shape();
        let grid = [index / (g[1] * g[2]), index / g[2] % g[1], index % g[2]];
        let origin = [0, 1, 2].map(|a| self.starts[a][grid[a]]);
        Some(Tile {
            index,
            grid,
            origin,
            shape: self.size,
            core_lo: [0, 1, 2].map(|a| self.bounds[a][grid[a]]),
            core_hi: [0, 1, 2].map(|a| self.bounds[a][grid[a] + 1]),
        })
    }

    /// All tiles, in index order.
    pub fn tiles(&self) -> impl Iterator<Item = Tile> + '_ {
        (0..self.len()).filter_map(|i| self.tile(i))
    }

    /// Grid positions along axis `a` whose tiles share voxels with the tile at position `p`
    /// (itself included): a contiguous range, as tile starts increase.
    fn axis_neighbours(&self, a: usize, p: usize) -> core::ops::Range<usize> {
        let (starts, size) = (&self.starts[a], self.size[a]);
        let first = (0..p)
            .rev()
            .take_while(|&q| starts[q] + size > starts[p])
            .last()
            .unwrap_or(p);
        let end = (p + 1..starts.len())
            .take_while(|&q| starts[p] + size > starts[q])
            .last()
            .map_or(p + 1, |q| q + 1);
        first..end
    }

    /// The tiles whose boxes share at least one voxel with tile `index` (face, edge and corner
    /// neighbours, not the tile itself), in increasing order; empty past the end.
    pub fn neighbours(&self, index: usize) -> Vec<usize> {
        let Some(t) = self.tile(index) else {
            return Vec::new();
        };
        let g = self.grid_shape();
        let mut out = Vec::new();
        for z in self.axis_neighbours(0, t.grid[0]) {
            for y in self.axis_neighbours(1, t.grid[1]) {
                for x in self.axis_neighbours(2, t.grid[2]) {
                    let j = (z * g[1] + y) * g[2] + x;
                    if j != index {
                        out.push(j);
                    }
                }
            }
        }
        out
    }

    /// Pairs of tiles `(i, j)`, `i < j`, whose boxes share at least one voxel (face, edge and
    /// corner neighbours), in increasing order. Found through the grid ([`TilePlan::neighbours`]),
    /// so the cost grows with the number of tiles, not its square.
    pub fn overlapping_pairs(&self) -> Vec<(usize, usize)> {
        (0..self.len())
            .flat_map(|i| {
                self.neighbours(i)
                    .into_iter()
                    .filter(move |&j| j > i)
                    .map(move |j| (i, j))
            })
            .collect()
    }
}

/// The box `[lo, hi)` shared by two tiles, or None.
pub fn intersection(a: &Tile, b: &Tile) -> Option<([usize; 3], [usize; 3])> {
    let lo = [0, 1, 2].map(|k| a.origin[k].max(b.origin[k]));
    let hi = [0, 1, 2].map(|k| a.end()[k].min(b.end()[k]));
    (0..3).all(|k| lo[k] < hi[k]).then_some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// Property checks over many shapes: tiles inside the volume, every voxel covered, cores a
    /// partition, consecutive tiles overlapping by at least the requested amount, cores away
    /// from the inner faces by at least overlap / 2.
    #[test]
    #[allow(clippy::needless_range_loop)]
    fn plans_cover_and_partition() {
        for len in [1usize, 2, 5, 16, 17, 31, 64, 100] {
            for size in [1usize, 3, 8, 16, 40, 200] {
                for overlap in [0usize, 1, 2, 7, 15] {
                    let shape = [len, (len + 3) % 9 + 1, 5];
                    let sz = [size, size, 4];
                    let ov = [overlap, overlap, 1];
                    let plan = match TilePlan::new(shape, sz, ov) {
                        Ok(p) => p,
                        Err(e) => {
                            // Only an overlap that does not fit may be refused.
                            let clipped = [0, 1, 2].map(|a| sz[a].min(shape[a]));
                            assert!(
                                (0..3).any(|a| shape[a] > clipped[a] && ov[a] >= clipped[a]),
                                "{shape:?} {sz:?} {ov:?}: {e}"
                            );
                            continue;
                        }
                    };
                    let mut owners = vec![0u32; prod(shape)];
                    let mut covered = vec![0u32; prod(shape)];
                    for t in plan.tiles() {
                        for a in 0..3 {
                            assert!(t.end()[a] <= shape[a]);
                            assert!(
                                t.origin[a] <= t.core_lo[a] && t.core_hi[a] <= t.end()[a],
                                "{t:?}"
                            );
                            if t.core_lo[a] > 0 {
                                assert!(
                                    t.core_lo[a] - t.origin[a] >= plan.overlap()[a] / 2,
                                    "{t:?}"
                                );
                            }
                            if t.core_hi[a] < shape[a] {
                                assert!(
                                    t.end()[a] - t.core_hi[a] >= plan.overlap()[a] / 2,
                                    "{t:?}"
                                );
                            }
                        }
                        for z in t.origin[0]..t.end()[0] {
                            for y in t.origin[1]..t.end()[1] {
                                for x in t.origin[2]..t.end()[2] {
                                    let i = (z * shape[1] + y) * shape[2] + x;
                                    covered[i] += 1;
                                    let p = [z, y, x];
                                    if (0..3).all(|a| t.core_lo[a] <= p[a] && p[a] < t.core_hi[a]) {
                                        owners[i] += 1;
                                    }
                                }
                            }
                        }
                    }
                    assert!(covered.iter().all(|&c| c >= 1), "{shape:?} {sz:?} {ov:?}");
                    assert!(owners.iter().all(|&c| c == 1), "{shape:?} {sz:?} {ov:?}");
                    let g = plan.grid_shape();
                    for a in 0..3 {
                        let s = &plan.starts[a];
                        for w in s.windows(2) {
                            assert!(w[0] < w[1]);
                            assert!(w[0] + plan.tile_size()[a] >= w[1] + ov[a], "{s:?}");
                        }
                        assert_eq!(s.len(), g[a]);
                    }
                }
            }
        }
    }

    #[test]
    fn a_known_plan() {
        // 100 voxels, tiles of 40 overlapping by 10: starts 0, 30, 60; cores split the overlaps.
        let plan = TilePlan::new([100, 1, 1], [40, 8, 8], [10, 2, 2]).unwrap();
        assert_eq!(plan.grid_shape(), [3, 1, 1]);
        assert_eq!(plan.tile_size(), [40, 1, 1]);
        let t: Vec<Tile> = plan.tiles().collect();
        assert_eq!(
            t.iter().map(|t| t.origin[0]).collect::<Vec<_>>(),
            vec![0, 30, 60]
        );
        assert_eq!(
            t.iter()
                .map(|t| (t.core_lo[0], t.core_hi[0]))
                .collect::<Vec<_>>(),
            vec![(0, 35), (35, 65), (65, 100)]
        );
        assert_eq!(plan.overlapping_pairs(), vec![(0, 1), (1, 2)]);
        // The last tile is moved back to end at the edge: 0, 30, 50 for 90 voxels.
        let plan = TilePlan::new([90, 1, 1], [40, 1, 1], [10, 0, 0]).unwrap();
        assert_eq!(
            plan.tiles().map(|t| t.origin[0]).collect::<Vec<_>>(),
            vec![0, 30, 50]
        );
        assert_eq!(plan.tile(3), None);
    }

    #[test]
    fn diagonal_neighbours_are_pairs() {
        let plan = TilePlan::new([20, 20, 20], [12, 12, 12], [4, 4, 4]).unwrap();
        assert_eq!(plan.len(), 8);
        // Every pair of the 2x2x2 grid shares the central voxels.
        assert_eq!(plan.overlapping_pairs().len(), 28);
    }

    /// The grid's neighbours are exactly the tiles that intersect, checked pair by pair.
    #[test]
    fn neighbours_are_the_intersecting_tiles() {
        for (shape, size, overlap) in [
            ([20, 20, 20], [12, 12, 12], [4, 4, 4]),
            ([17, 40, 9], [8, 9, 9], [6, 2, 0]),
            ([100, 31, 64], [16, 7, 64], [15, 6, 3]),
            ([5, 50, 33], [5, 10, 8], [0, 9, 1]),
        ] {
            let plan = TilePlan::new(shape, size, overlap).unwrap();
            let tiles: Vec<Tile> = plan.tiles().collect();
            let mut brute = Vec::new();
            for a in &tiles {
                let want: Vec<usize> = tiles
                    .iter()
                    .filter(|b| b.index != a.index && intersection(a, b).is_some())
                    .map(|b| b.index)
                    .collect();
                assert_eq!(
                    plan.neighbours(a.index),
                    want,
                    "{shape:?} {size:?} {overlap:?}"
                );
                brute.extend(want.iter().filter(|&&j| j > a.index).map(|&j| (a.index, j)));
            }
            assert_eq!(plan.overlapping_pairs(), brute);
        }
        let plan = TilePlan::new([4, 4, 4], [4, 4, 4], [0; 3]).unwrap();
        assert!(plan.neighbours(0).is_empty() && plan.neighbours(1).is_empty());
    }

    #[test]
    fn bad_parameters_are_named() {
        let e = TilePlan::new([10, 10, 10], [4, 4, 4], [4, 1, 1])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("tile_overlap:") && e.contains("[4, 1, 1]"),
            "{e}"
        );
        let e = TilePlan::new([10, 10, 10], [4, 0, 4], [1, 1, 1])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("tile_size:"), "{e}");
        let e = TilePlan::new([0, 10, 10], [4, 4, 4], [1, 1, 1])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("volume shape:"), "{e}");
        // An overlap as large as an axis that needs no second tile is fine.
        assert!(TilePlan::new([4, 10, 10], [4, 5, 5], [9, 1, 1]).is_ok());
    }
}
