//! Global segment ids from independently segmented, overlapping tiles.
//!
//! # The rule
//! Every tile is segmented on its own, with tile-local ids. For every pair of tiles whose boxes
//! intersect (face, edge or corner neighbours), the intersection box `R` is examined voxel by voxel:
//!
//! - `n(a, b)`: voxels of `R` labelled `a` in the first tile and `b` in the second (both non-zero);
//! - `|a|_R`, `|b|_R`: voxels of `R` labelled `a` (first tile) and `b` (second tile).
//!
//! The two segments are **merged** (made one global object, through union-find) when
//!
//! `n(a, b) >= min_overlap` and `n(a, b) >= min_fraction * min(|a|_R, |b|_R)`.
//!
//! Defaults: `min_overlap = 20` voxels, `min_fraction = 0.5`. The absolute threshold ignores
//! accidental contacts of a few voxels; the relative one asks that at least half of the smaller
//! segment's part of the overlap agrees, so a segment that one tile split in two is joined again
//! (each piece lies mostly inside the other tile's segment) while two objects that merely touch
//! are not. Merges are transitive across tiles.
//!
//! The final volume takes every voxel from the tile whose core holds it
//! ([`super::tiling`]), renamed to its global id; ids are then made contiguous in order of first
//! appearance ([`super::relabel_first_appearance`]).

use super::tiling::{Tile, TilePlan, intersection};
use super::union_find::UnionFind;
use super::{SegmentationError, prod, relabel};
use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

/// When two segments meeting in a tile overlap are merged; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MergeRule {
    /// Least number of shared voxels (default 20).
    pub min_overlap: u64,
    /// Least fraction of the smaller segment's voxels inside the overlap box that must be shared
    /// (default 0.5).
    pub min_fraction: f64,
}

impl Default for MergeRule {
    fn default() -> Self {
        Self {
            min_overlap: 20,
            min_fraction: 0.5,
        }
    }
}

impl MergeRule {
    /// Checks that the fraction lies in `[0, 1]`.
    pub fn validate(&self) -> Result<(), SegmentationError> {
        if !(0.0..=1.0).contains(&self.min_fraction) {
            return Err(SegmentationError::InvalidParameter {
                field: "min_fraction",
                reason: format!("expected a number in [0, 1], found {}", self.min_fraction),
            });
        }
        Ok(())
    }

    /// The rule for one pair: `shared` voxels in common, `size_a` and `size_b` voxels of each
    /// segment inside the overlap box.
    pub fn accepts(&self, shared: u64, size_a: u64, size_b: u64) -> bool {
        shared > 0
            && shared >= self.min_overlap
            && shared as f64 >= self.min_fraction * size_a.min(size_b) as f64
    }
}

/// A tile's segmentation: `labels` holds `tile.shape` voxels, `[z][y][x]`, local ids.
#[derive(Clone, Copy, Debug)]
pub struct TileLabels<'a> {
    /// Where the tile lies.
    pub tile: Tile,
    /// Its local segment ids.
    pub labels: &'a [u64],
}

impl TileLabels<'_> {
    fn check(&self) -> Result<(), SegmentationError> {
        if self.labels.len() != self.tile.voxels() {
            return Err(SegmentationError::LengthMismatch {
                what: format!(
                    "labels of tile {} (shape {:?})",
                    self.tile.index, self.tile.shape
                ),
                expected: self.tile.voxels(),
                actual: self.labels.len(),
            });
        }
        Ok(())
    }

    fn at(&self, p: [usize; 3]) -> u64 {
        let t = &self.tile;
        let l = [0, 1, 2].map(|a| p[a] - t.origin[a]);
        self.labels[(l[0] * t.shape[1] + l[1]) * t.shape[2] + l[2]]
    }
}

/// What one tile pair contributed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairStats {
    /// Distinct non-zero `(a, b)` label pairs found in the overlap.
    pub pairs: u64,
    /// Pairs accepted by the rule.
    pub accepted: u64,
    /// Accepted pairs that joined two sets that were separate.
    pub merges: u64,
}

/// Union-find over all `(tile, local id)` segments of a plan.
#[derive(Clone, Debug)]
pub struct Reconciler {
    rule: MergeRule,
    /// First union-find index of each tile's ids (`local id 1` maps to `offsets[t]`).
    offsets: Vec<usize>,
    max_ids: Vec<u64>,
    uf: UnionFind,
}

impl Reconciler {
    /// A reconciler for tiles whose local ids lie in `1..=max_ids[t]`.
    pub fn new(max_ids: &[u64], rule: MergeRule) -> Result<Self, SegmentationError> {
        rule.validate()?;
        let mut offsets = Vec::with_capacity(max_ids.len());
        let mut total = 0usize;
        for (t, &m) in max_ids.iter().enumerate() {
            offsets.push(total);
            total = usize::try_from(m)
                .ok()
                .and_then(|m| total.checked_add(m))
                .ok_or_else(|| SegmentationError::InvalidParameter {
                    field: "tile max ids",
                    reason: format!("too many segments in total (tile {t} has max id {m})"),
                })?;
        }
        Ok(Self {
            rule,
            offsets,
            max_ids: max_ids.to_vec(),
            uf: UnionFind::new(total),
        })
    }

    fn key(&self, tile: usize, local: u64) -> Result<Option<usize>, SegmentationError> {
        let max = *self
            .max_ids
            .get(tile)
            .ok_or_else(|| SegmentationError::InvalidParameter {
                field: "tile index",
                reason: format!("expected < {}, found {tile}", self.max_ids.len()),
            })?;
        if local == 0 {
            return Ok(None);
        }
        if local > max {
            return Err(SegmentationError::InvalidParameter {
                field: "tile labels",
                reason: format!("tile {tile}: id {local} is above the tile's max id {max}"),
            });
        }
        Ok(Some(self.offsets[tile] + (local - 1) as usize))
    }

    /// Counts the label pairs of two tiles in their intersection and merges those the rule
    /// accepts. Tiles that do not intersect contribute nothing.
    pub fn observe(
        &mut self,
        a: &TileLabels,
        b: &TileLabels,
    ) -> Result<PairStats, SegmentationError> {
        a.check()?;
        b.check()?;
        let Some((lo, hi)) = intersection(&a.tile, &b.tile) else {
            return Ok(PairStats::default());
        };
        let mut shared: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        let mut size_a: BTreeMap<u64, u64> = BTreeMap::new();
        let mut size_b: BTreeMap<u64, u64> = BTreeMap::new();
        // Runs of equal pairs are common: count them before touching the maps.
        let mut run: Option<((u64, u64), u64)> = None;
        let mut flush = |run: ((u64, u64), u64), shared: &mut BTreeMap<(u64, u64), u64>| {
            let ((la, lb), n) = run;
            if la != 0 {
                *size_a.entry(la).or_insert(0) += n;
            }
            if lb != 0 {
                *size_b.entry(lb).or_insert(0) += n;
            }
            if la != 0 && lb != 0 {
                *shared.entry((la, lb)).or_insert(0) += n;
            }
        };
        for z in lo[0]..hi[0] {
            for y in lo[1]..hi[1] {
                for x in lo[2]..hi[2] {
                    let pair = (a.at([z, y, x]), b.at([z, y, x]));
                    match &mut run {
                        Some((p, n)) if *p == pair => *n += 1,
                        _ => {
                            if let Some(r) = run.take() {
                                flush(r, &mut shared);
                            }
                            run = Some((pair, 1));
                        }
                    }
                }
            }
        }
        if let Some(r) = run.take() {
            flush(r, &mut shared);
        }
        let mut stats = PairStats {
            pairs: shared.len() as u64,
            ..Default::default()
        };
        for (&(la, lb), &n) in &shared {
            let (sa, sb) = (
                size_a.get(&la).copied().unwrap_or(0),
                size_b.get(&lb).copied().unwrap_or(0),
            );
            if self.rule.accepts(n, sa, sb) {
                stats.accepted += 1;
                let ka = self.key(a.tile.index, la)?;
                let kb = self.key(b.tile.index, lb)?;
                if let (Some(ka), Some(kb)) = (ka, kb)
                    && self.uf.union(ka, kb)
                {
                    stats.merges += 1;
                }
            }
        }
        // Ids above the max that were not in any accepted pair are reported too.
        for &la in size_a.keys() {
            self.key(a.tile.index, la)?;
        }
        for &lb in size_b.keys() {
            self.key(b.tile.index, lb)?;
        }
        Ok(stats)
    }

    /// The global id of a tile's local id (0 for 0): one more than the smallest union-find index
    /// of its set, so it does not depend on the order in which pairs were observed.
    pub fn global_id(&mut self, tile: usize, local: u64) -> Result<u64, SegmentationError> {
        Ok(match self.key(tile, local)? {
            None => 0,
            Some(k) => self.uf.min_member(k) as u64 + 1,
        })
    }

    /// Calls `visit(position, set)` for every run of equal ids along x in the tile's core, with
    /// `position` the run's first voxel (volume coordinates) and `set` the global id of the run's
    /// set ([`Reconciler::global_id`], 0 for background), in raster order of the core.
    fn for_each_core_run(
        &mut self,
        t: &TileLabels,
        mut visit: impl FnMut([usize; 3], usize, u64) -> Result<(), SegmentationError>,
    ) -> Result<(), SegmentationError> {
        t.check()?;
        let (lo, hi) = (t.tile.core_lo, t.tile.core_hi);
        let mut last: Option<(u64, u64)> = None;
        for z in lo[0]..hi[0] {
            for y in lo[1]..hi[1] {
                let mut x = lo[2];
                while x < hi[2] {
                    let local = t.at([z, y, x]);
                    let mut end = x + 1;
                    while end < hi[2] && t.at([z, y, end]) == local {
                        end += 1;
                    }
                    let g = match last {
                        Some((l, g)) if l == local => g,
                        _ => {
                            let g = self.global_id(t.tile.index, local)?;
                            last = Some((local, g));
                            g
                        }
                    };
                    visit([z, y, x], end - x, g)?;
                    x = end;
                }
            }
        }
        Ok(())
    }
}

/// The ids of a reconciled plan: the merged sets of tile-local segments ([`Reconciler`]) and the
/// final id of every set that owns a voxel, `1..=segments` in order of first appearance in the
/// volume (raster order, z slowest). Made by [`reconcile_ids`]; [`Reconciliation::core_ids`] then
/// gives every tile's core in final ids, one tile at a time, so a volume of any size can be
/// written region by region.
#[derive(Clone, Debug)]
pub struct Reconciliation {
    reconciler: Reconciler,
    volume_shape: [usize; 3],
    /// Final id of each set (keyed by [`Reconciler::global_id`]).
    final_ids: BTreeMap<u64, u64>,
    summary: ReconcileSummary,
}

impl Reconciliation {
    /// Segments of the final volume (its largest id).
    pub fn segments(&self) -> u64 {
        self.summary.segments
    }

    /// Totals of the reconciliation.
    pub fn summary(&self) -> ReconcileSummary {
        self.summary
    }

    /// The core of tile `t` in final ids: `[z][y][x]` of the core's shape
    /// (`t.tile.core_hi - t.tile.core_lo`), to be placed at `t.tile.core_lo` in the volume.
    pub fn core_ids(&mut self, t: &TileLabels) -> Result<Vec<u64>, SegmentationError> {
        let core: [usize; 3] = [0, 1, 2].map(|a| t.tile.core_hi[a] - t.tile.core_lo[a]);
        if (0..3).any(|a| t.tile.core_hi[a] > self.volume_shape[a]) {
            return Err(SegmentationError::InvalidParameter {
                field: "tile core",
                reason: format!(
                    "tile {} core ends at {:?}, outside the volume {:?}",
                    t.tile.index, t.tile.core_hi, self.volume_shape
                ),
            });
        }
        let mut out = Vec::with_capacity(prod(core));
        let final_ids = &self.final_ids;
        self.reconciler.for_each_core_run(t, |_, n, set| {
            let id = if set == 0 {
                0
            } else {
                *final_ids
                    .get(&set)
                    .ok_or_else(|| SegmentationError::InvalidParameter {
                        field: "tile labels",
                        reason: format!(
                            "tile {}: a segment that was not seen when the ids were counted",
                            t.tile.index
                        ),
                    })?
            };
            out.extend(core::iter::repeat_n(id, n));
            Ok(())
        })?;
        Ok(out)
    }
}

/// Totals of a reconciliation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReconcileSummary {
    /// Tile pairs examined.
    pub tile_pairs: u64,
    /// Sum of [`PairStats`] over all pairs.
    pub pairs: PairStats,
    /// Tile-local segments in total.
    pub local_segments: u64,
    /// Segments of the final volume.
    pub segments: u64,
}

/// Where [`reconcile`] reads the finished tiles of a plan from: memory (`[Vec<u64>]`, tile `t` at
/// index `t`) or a store on disk (ffn-io's `TileStore`). The merge reads each tile a few times and
/// holds at most the tiles of one layer of the tile grid at once, so a source may load lazily.
pub trait TileSource {
    /// The source's error; reconciliation errors convert into it.
    type Error: From<SegmentationError>;

    /// The largest local id of `tile` (0 for an empty tile), ideally without loading its labels.
    fn max_id(&self, tile: &Tile) -> Result<u64, Self::Error>;

    /// The local ids of `tile`, `[z][y][x]` of `tile.shape`. A source that records where a tile
    /// lies checks it against `tile` and fails naming both.
    fn labels(&self, tile: &Tile) -> Result<Cow<'_, [u64]>, Self::Error>;

    /// The local ids of `tile` in the box `lo..hi` (volume coordinates, inside the tile),
    /// `[z][y][x]`: what the merge reads of a tile overlap. The default cuts the box out of
    /// [`TileSource::labels`]; a source that keeps the overlaps apart reads only them.
    fn labels_in(
        &self,
        tile: &Tile,
        lo: [usize; 3],
        hi: [usize; 3],
    ) -> Result<Cow<'_, [u64]>, Self::Error> {
        let labels = self.labels(tile)?;
        Ok(Cow::Owned(cut_box(tile, &labels, lo, hi)?))
    }
}

/// The ids of the box `lo..hi` (volume coordinates) of a tile's `labels`, `[z][y][x]`; a box
/// outside the tile or labels of the wrong length are errors.
pub fn cut_box(
    tile: &Tile,
    labels: &[u64],
    lo: [usize; 3],
    hi: [usize; 3],
) -> Result<Vec<u64>, SegmentationError> {
    let t = TileLabels {
        tile: *tile,
        labels,
    };
    t.check()?;
    if (0..3).any(|a| lo[a] < tile.origin[a] || hi[a] > tile.end()[a] || lo[a] > hi[a]) {
        return Err(SegmentationError::InvalidParameter {
            field: "overlap box",
            reason: format!(
                "expected a box inside tile {} ({:?}..{:?}), found {lo:?}..{hi:?}",
                tile.index,
                tile.origin,
                tile.end()
            ),
        });
    }
    let mut out = Vec::with_capacity(prod([0, 1, 2].map(|a| hi[a] - lo[a])));
    for z in lo[0]..hi[0] {
        for y in lo[1]..hi[1] {
            for x in lo[2]..hi[2] {
                out.push(t.at([z, y, x]));
            }
        }
    }
    Ok(out)
}

/// `tile` narrowed to the box `lo..hi` (same index and grid position), for the labels of an
/// overlap.
fn narrowed(tile: &Tile, lo: [usize; 3], hi: [usize; 3]) -> Tile {
    Tile {
        origin: lo,
        shape: [0, 1, 2].map(|a| hi[a] - lo[a]),
        ..*tile
    }
}

impl TileSource for [Vec<u64>] {
    type Error = SegmentationError;

    fn max_id(&self, tile: &Tile) -> Result<u64, SegmentationError> {
        Ok(self.labels(tile)?.iter().copied().max().unwrap_or(0))
    }

    fn labels(&self, tile: &Tile) -> Result<Cow<'_, [u64]>, SegmentationError> {
        self.get(tile.index)
            .map(|t| Cow::Borrowed(t.as_slice()))
            .ok_or_else(|| SegmentationError::InvalidParameter {
                field: "tile index",
                reason: format!(
                    "expected < {} (tiles held), found {}",
                    self.len(),
                    tile.index
                ),
            })
    }
}

fn plan_tile(plan: &TilePlan, i: usize) -> Result<Tile, SegmentationError> {
    plan.tile(i)
        .ok_or_else(|| SegmentationError::InvalidParameter {
            field: "tile index",
            reason: format!("expected < {} (tiles of the plan), found {i}", plan.len()),
        })
}

/// Reconciles the tiles of `plan` read from `source`: observes every overlapping pair (merging
/// segments by the rule) from the two tiles' labels in their shared box only
/// ([`TileSource::labels_in`]), then reads every tile once more, one at a time, to find which
/// merged sets own voxels and where each first appears, and numbers them `1..=n` in that order.
/// Memory: one tile, two overlap boxes, and the merged sets (a few words per tile-local segment);
/// nothing of the size of the volume or of a layer of tiles.
pub fn reconcile_ids<S: TileSource + ?Sized>(
    plan: &TilePlan,
    source: &S,
    rule: MergeRule,
) -> Result<Reconciliation, S::Error> {
    let tiles: Vec<Tile> = plan.tiles().collect();
    let max_ids: Vec<u64> = tiles
        .iter()
        .map(|t| source.max_id(t))
        .collect::<Result<_, _>>()?;
    let mut rec = Reconciler::new(&max_ids, rule)?;
    let mut summary = ReconcileSummary::default();
    for (i, j) in plan.overlapping_pairs() {
        let (a, b) = (plan_tile(plan, i)?, plan_tile(plan, j)?);
        let Some((lo, hi)) = intersection(&a, &b) else {
            continue;
        };
        let (la, lb) = (source.labels_in(&a, lo, hi)?, source.labels_in(&b, lo, hi)?);
        let s = rec.observe(
            &TileLabels {
                tile: narrowed(&a, lo, hi),
                labels: &la,
            },
            &TileLabels {
                tile: narrowed(&b, lo, hi),
                labels: &lb,
            },
        )?;
        summary.tile_pairs += 1;
        summary.pairs.pairs += s.pairs;
        summary.pairs.accepted += s.accepted;
        summary.pairs.merges += s.merges;
    }
    // First appearance of every set: the raster order of a core is the volume's raster order
    // restricted to it, so a set's first voxel is the earliest of its first voxels per core.
    let shape = plan.shape();
    let mut first: BTreeMap<u64, usize> = BTreeMap::new();
    for tile in &tiles {
        let labels = source.labels(tile)?;
        let t = TileLabels {
            tile: *tile,
            labels: &labels,
        };
        summary.local_segments += relabel::segment_sizes(t.labels).len() as u64;
        rec.for_each_core_run(&t, |p, _, set| {
            if set != 0 {
                let at = (p[0] * shape[1] + p[1]) * shape[2] + p[2];
                let e = first.entry(set).or_insert(at);
                *e = (*e).min(at);
            }
            Ok(())
        })?;
    }
    let mut order: Vec<(usize, u64)> = first.into_iter().map(|(set, at)| (at, set)).collect();
    order.sort_unstable();
    let final_ids: BTreeMap<u64, u64> = order
        .iter()
        .enumerate()
        .map(|(k, &(_, set))| (set, k as u64 + 1))
        .collect();
    summary.segments = final_ids.len() as u64;
    Ok(Reconciliation {
        reconciler: rec,
        volume_shape: shape,
        final_ids,
        summary,
    })
}

/// Reconciles the tiles of `plan` read from `source` into one volume in memory (`[z][y][x]` of
/// `plan.shape()`, ids `1..=n` in order of first appearance); see [`reconcile_ids`], which this
/// completes by placing every tile's [`Reconciliation::core_ids`]. For volumes that do not fit in
/// memory, use [`reconcile_ids`] and write the cores region by region.
pub fn reconcile<S: TileSource + ?Sized>(
    plan: &TilePlan,
    source: &S,
    rule: MergeRule,
) -> Result<(Vec<u64>, ReconcileSummary), S::Error> {
    let mut ids = reconcile_ids(plan, source, rule)?;
    let shape = plan.shape();
    let mut out = vec![0u64; prod(shape)];
    for tile in plan.tiles() {
        let labels = source.labels(&tile)?;
        let core = ids.core_ids(&TileLabels {
            tile,
            labels: &labels,
        })?;
        let (lo, hi) = (tile.core_lo, tile.core_hi);
        let row = hi[2] - lo[2];
        for (k, chunk) in core.chunks_exact(row.max(1)).enumerate() {
            let (z, y) = (lo[0] + k / (hi[1] - lo[1]), lo[1] + k % (hi[1] - lo[1]));
            let at = (z * shape[1] + y) * shape[2] + lo[2];
            out[at..at + row].copy_from_slice(chunk);
        }
    }
    Ok((out, ids.summary()))
}

/// Reconciles tiles held in memory (`tiles[t]` = tile `t`'s labels); see [`reconcile`].
pub fn reconcile_in_memory(
    plan: &TilePlan,
    tiles: &[Vec<u64>],
    rule: MergeRule,
) -> Result<(Vec<u64>, ReconcileSummary), SegmentationError> {
    if tiles.len() != plan.len() {
        return Err(SegmentationError::LengthMismatch {
            what: "tiles of the plan".to_string(),
            expected: plan.len(),
            actual: tiles.len(),
        });
    }
    reconcile(plan, tiles, rule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segmentation::relabel_first_appearance;
    use crate::segmentation::tests::boxes;

    /// Cuts a tile out of a volume, with a tile-specific renaming of the ids (as independent
    /// segmentations of the tiles would give).
    fn cut(vol: &[u64], shape: [usize; 3], t: &Tile, salt: u64) -> Vec<u64> {
        let mut out = Vec::with_capacity(t.voxels());
        for z in t.origin[0]..t.end()[0] {
            for y in t.origin[1]..t.end()[1] {
                for x in t.origin[2]..t.end()[2] {
                    out.push(vol[(z * shape[1] + y) * shape[2] + x]);
                }
            }
        }
        // Rename: local ids 1..=n in a tile-dependent order (a rotation, reversed).
        let mut ids: Vec<u64> = out.iter().copied().filter(|&v| v != 0).collect();
        ids.sort_unstable();
        ids.dedup();
        let n = ids.len() as u64;
        for v in out.iter_mut() {
            if *v != 0 {
                let k = ids.binary_search(v).unwrap_or(0) as u64;
                *v = (n - 1 - (k + salt) % n) + 1;
            }
        }
        out
    }

    #[test]
    fn perfect_tiles_reconcile_to_the_volume() {
        let shape = [30, 34, 26];
        let mut truth = boxes(shape, 5, 3);
        // Some background too.
        for (i, v) in truth.iter_mut().enumerate() {
            if i % 97 < 5 {
                *v = 0;
            }
        }
        for (size, overlap) in [
            ([12, 12, 12], [4, 4, 4]),
            ([16, 10, 26], [6, 3, 0]),
            ([30, 34, 26], [0, 0, 0]),
        ] {
            let plan = TilePlan::new(shape, size, overlap).unwrap();
            let tiles: Vec<Vec<u64>> = plan
                .tiles()
                .map(|t| cut(&truth, shape, &t, t.index as u64))
                .collect();
            // Overlap boxes of one voxel are thin: accept any contact for this test.
            let rule = MergeRule {
                min_overlap: 1,
                min_fraction: 0.5,
            };
            let (got, summary) = reconcile_in_memory(&plan, &tiles, rule).unwrap();
            let mut want = truth.clone();
            let n = relabel_first_appearance(&mut want);
            if overlap == [0, 0, 0] && plan.len() > 1 {
                // No overlap: nothing can be matched, objects crossing tiles stay split.
                assert!(summary.segments > n);
                continue;
            }
            assert_eq!(summary.segments, n, "{size:?} {overlap:?}");
            assert!(got == want, "{size:?} {overlap:?}");
        }
    }

    #[test]
    fn the_rule_separates_touching_objects_and_joins_split_ones() {
        // Two tiles along x, overlapping in x = 4..8 (4 columns).
        let plan = TilePlan::new([1, 10, 12], [1, 10, 8], [0, 0, 4]).unwrap();
        let (t0, t1) = (plan.tile(0).unwrap(), plan.tile(1).unwrap());
        assert_eq!((t0.origin[2], t1.origin[2]), (0, 4));
        // Tile 0: segment 1 in rows 0..5, segment 2 in rows 5..10.
        let a: Vec<u64> = (0..80).map(|i| if i / 8 < 5 { 1 } else { 2 }).collect();
        // Tile 1: segment 1 covers rows 0..6 (one row of 2 leaks in: 4 voxels of contact),
        // rows 6..10 are split into segments 2 (x < 6) and 3.
        let b: Vec<u64> = (0..80)
            .map(|i| {
                if i / 8 < 6 {
                    1
                } else if i % 8 < 2 {
                    2
                } else {
                    3
                }
            })
            .collect();
        let rule = MergeRule {
            min_overlap: 5,
            min_fraction: 0.5,
        };
        let mut rec = Reconciler::new(&[2, 3], rule).unwrap();
        let s = rec
            .observe(
                &TileLabels {
                    tile: t0,
                    labels: &a,
                },
                &TileLabels {
                    tile: t1,
                    labels: &b,
                },
            )
            .unwrap();
        // Pairs in the overlap: (1,1) 20 voxels, (2,1) 4, (2,2) 8, (2,3) 8.
        assert_eq!(s.pairs, 4);
        assert_eq!(s.accepted, 3, "{s:?}");
        let g = |rec: &mut Reconciler, t, l| rec.global_id(t, l).unwrap();
        assert_eq!(g(&mut rec, 0, 1), g(&mut rec, 1, 1));
        assert_eq!(g(&mut rec, 0, 2), g(&mut rec, 1, 2));
        assert_eq!(g(&mut rec, 0, 2), g(&mut rec, 1, 3));
        assert_ne!(g(&mut rec, 0, 1), g(&mut rec, 0, 2));
        assert_eq!(g(&mut rec, 1, 0), 0);
        // With a low absolute threshold and no fraction, the 4-voxel contact merges everything.
        let mut loose = Reconciler::new(
            &[2, 3],
            MergeRule {
                min_overlap: 1,
                min_fraction: 0.0,
            },
        )
        .unwrap();
        loose
            .observe(
                &TileLabels {
                    tile: t0,
                    labels: &a,
                },
                &TileLabels {
                    tile: t1,
                    labels: &b,
                },
            )
            .unwrap();
        assert_eq!(g(&mut loose, 0, 1), g(&mut loose, 0, 2));
    }

    #[test]
    fn bad_inputs_are_errors() {
        let plan = TilePlan::new([1, 4, 8], [1, 4, 6], [0, 0, 4]).unwrap();
        let t0 = plan.tile(0).unwrap();
        let mut rec = Reconciler::new(&[1, 1], MergeRule::default()).unwrap();
        let short = [1u64; 5];
        let e = rec.observe(
            &TileLabels {
                tile: t0,
                labels: &short,
            },
            &TileLabels {
                tile: t0,
                labels: &short,
            },
        );
        assert!(
            matches!(
                e,
                Err(SegmentationError::LengthMismatch {
                    expected: 24,
                    actual: 5,
                    ..
                })
            ),
            "{e:?}"
        );
        let high = [3u64; 24];
        let e = rec.observe(
            &TileLabels {
                tile: t0,
                labels: &high,
            },
            &TileLabels {
                tile: plan.tile(1).unwrap(),
                labels: &high,
            },
        );
        assert!(
            e.unwrap_err()
                .to_string()
                .contains("id 3 is above the tile's max id 1")
        );
        let e = Reconciler::new(
            &[1],
            MergeRule {
                min_overlap: 1,
                min_fraction: 1.5,
            },
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("min_fraction:"), "{e}");
        assert!(reconcile_in_memory(&plan, &[vec![0; 24]], MergeRule::default()).is_err());
    }
}
