//! Tiled inference over a [`TileStore`]: the volume (or a box of it) is cut into overlapping tiles
//! ([`TilePlan`]), every tile is segmented on its own and saved atomically, and the finished tiles
//! are reconciled into global ids by ffn-core's one merge ([`reconcile`]).
//!
//! - **Resume**: finished tiles stay in the store, so a rerun skips them.
//! - **Scheduling**: every worker walks the tile list and takes the next unfinished tile by
//!   creating its claim file ([`TileStore::claim`]), so a worker that finishes early takes more
//!   tiles. No messages are needed; the caller gives every worker of one run the same run id, waits
//!   for all of them (a barrier), then one worker calls [`finish`]. The store folder must be
//!   shared by all workers (one host, or a shared file system).
//! - **Reconciling**: segments meeting in tile overlaps are merged by overlap size, every voxel is
//!   taken from the tile whose core holds it, ids are made contiguous, and the volume is written
//!   chunked and compressed, one tile core at a time: no process ever holds the volume, so volumes
//!   larger than memory are segmented (memory grows with the tile size and one layer of the tile
//!   grid, not with the volume).
//! - **From flags**: `ffn infer-tiled` fills [`TiledSettings`], whose [`TiledSettings::resolve`]
//!   loads the predictor and plans the run, and [`connect_ranks`] gives its ranks one run id.
//!
//! ```no_run
//! use ffn_core::inference::{LabelOracle, SegmentOptions};
//! use ffn_io::tiled::{TiledOptions, Worker, finish, run_tiles};
//!
//! let image: ffn_io::VolumeSpec = "ids.h5:ids".parse()?;
//! let shape = ffn_io::dataset_shape(&image)?;
//! let mut opts = TiledOptions::new(image, shape, "ids.h5.tiles".into(), [7, 7, 7]);
//! opts.tile_size = [64; 3];
//! opts.segment = SegmentOptions { deltas: [1, 1, 1], ..Default::default() };
//! let (plan, store) = (opts.plan()?, opts.open_store()?);
//! let worker = Worker { run_id: "run-1", rank: 0 };
//! let mut oracle = LabelOracle { fov: [7, 7, 7] };
//! run_tiles(&opts, &plan, &store, &mut oracle, &worker, &mut |_, _| {})?;
//! let merged = finish(&opts, &plan, &store, "run-1", &"seg.h5:seg".parse()?)?;
//! # Ok::<(), ffn_io::IoError>(())
//! ```

use std::borrow::Cow;
use std::path::PathBuf;
use std::time::Instant;

use ffn_core::inference::{Predictor, SegmentOptions, normalize_image_in_place, segment};
use ffn_core::segmentation::reconcile::cut_box;
use ffn_core::segmentation::reconcile::{
    MergeRule, ReconcileSummary, TileLabels, TileSource, reconcile, reconcile_ids,
};
use ffn_core::segmentation::tiling::intersection;
use ffn_core::segmentation::{Tile, TilePlan};

mod setup;

pub use setup::{TiledSettings, TiledSetup, connect_ranks, default_store_dir};

use crate::error::IoError;
use crate::region_writer::write_labels_by_region;
use crate::tile_overlaps::{OverlapBox, load_overlap, save_overlaps};
use crate::tile_store::{TileRecord, TileStore};
use crate::volume::{VolumeSpec, read_image_f32_region};

/// What a tiled run segments, how it cuts the volume and how it merges the tiles.
#[derive(Clone, Debug, PartialEq)]
pub struct TiledOptions {
    /// The image (axes z, y, x).
    pub image: VolumeSpec,
    /// First voxel of the segmented box in the image, `[z, y, x]`; tile origins are relative to it.
    pub offset: [usize; 3],
    /// Shape of the segmented box, `[z, y, x]`.
    pub shape: [usize; 3],
    /// Tile size `[z, y, x]`.
    pub tile_size: [usize; 3],
    /// Overlap of neighbouring tiles `[z, y, x]`; at least the FOV lets segments reach every voxel
    /// of a tile's core.
    pub tile_overlap: [usize; 3],
    /// The tile-store folder (shared by all workers).
    pub store: PathBuf,
    /// Stop after this worker computed this many tiles (the rest are left for a rerun).
    pub max_tiles: Option<usize>,
    /// Also stop, after the tile being computed is saved, when a stop was requested
    /// ([`crate::training::stop::stop_requested`]: SIGTERM / SIGUSR1 once the handlers are
    /// installed). The rest is left for a rerun, as with `max_tiles`.
    pub stop_on_signal: bool,
    /// `(mean, stddev)` of the `(x - mean) / stddev` normalisation; `None` feeds the raw values
    /// (for [`ffn_core::inference::LabelOracle`]).
    pub normalisation: Option<(f32, f32)>,
    /// Movement deltas, seed policy and thresholds of every tile's flood fill.
    pub segment: SegmentOptions,
    /// When segments meeting in an overlap are merged.
    pub merge: MergeRule,
    /// A description of the predictor (model file, size, architecture): part of the store's
    /// fingerprint, so tiles of another model are never mixed in.
    pub predictor: String,
}

impl TiledOptions {
    /// Tiles of 128 overlapping by `fov` over the box `[0; 3] + shape` of `image`, default
    /// options otherwise.
    pub fn new(image: VolumeSpec, shape: [usize; 3], store: PathBuf, fov: [usize; 3]) -> Self {
        Self {
            image,
            offset: [0; 3],
            shape,
            tile_size: [128; 3],
            tile_overlap: fov,
            store,
            max_tiles: None,
            stop_on_signal: false,
            normalisation: None,
            segment: SegmentOptions::default(),
            merge: MergeRule::default(),
            predictor: String::new(),
        }
    }

    /// The tile plan. An overlap not below the tile size on an axis that needs more than one
    /// tile is an error naming both (x,y,z, as on the command line).
    pub fn plan(&self) -> Result<TilePlan, IoError> {
        let (size, overlap, shape) = (self.tile_size, self.tile_overlap, self.shape);
        let xyz = |v: [usize; 3]| format!("{},{},{}", v[2], v[1], v[0]);
        if let Some(a) = (0..3).find(|&a| size[a] < shape[a] && overlap[a] >= size[a]) {
            return Err(IoError::InvalidOption {
                field: "tile overlap".into(),
                expected: format!(
                    "less than the tile size {} on every axis that needs more than one tile ({} axis; volume {} x,y,z)",
                    xyz(size),
                    ["z", "y", "x"][a],
                    xyz(shape)
                ),
                found: xyz(overlap),
            });
        }
        TilePlan::new(shape, size, overlap).map_err(|source| IoError::Segmentation {
            what: format!("the tile plan of {}", self.image),
            source,
        })
    }

    /// What the tiles are computed from: the store refuses tiles of another fingerprint.
    pub fn fingerprint(&self) -> String {
        let norm = match self.normalisation {
            Some((m, s)) => format!("{m} {s}"),
            None => "none".into(),
        };
        format!(
            "image {} box {:?} shape {:?}; tiles {:?} overlap {:?}; {}; deltas {:?}; {:?}; seeds {:?}; normalisation {norm}",
            self.image,
            self.offset,
            self.shape,
            self.tile_size,
            self.tile_overlap,
            self.predictor,
            self.segment.deltas,
            self.segment.inference,
            self.segment.seeds,
        )
    }

    /// Opens (or creates) the store of [`TiledOptions::store`] for this run's fingerprint.
    pub fn open_store(&self) -> Result<TileStore, IoError> {
        TileStore::open(&self.store, &self.fingerprint())
    }
}

/// One worker of a run: the run id all workers share (claims live under it) and this worker's
/// rank (recorded in the tiles' metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Worker<'a> {
    /// The run id, the same for all workers of one run and new for every run.
    pub run_id: &'a str,
    /// This worker's number.
    pub rank: usize,
}

/// What one worker did in [`run_tiles`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TilesRun {
    /// Tiles this worker segmented.
    pub computed: usize,
    /// Tiles that were already finished in the store.
    pub reused: usize,
    /// The signal that stopped the worker before the plan was done
    /// ([`TiledOptions::stop_on_signal`]).
    pub stopped_by: Option<i32>,
}

/// Segments one tile of `opts` with `predictor` (reading only the tile's box of the image);
/// returns the record to store, with counters and timing as JSON metadata.
pub fn segment_tile<P: Predictor + ?Sized>(
    opts: &TiledOptions,
    tile: &Tile,
    predictor: &mut P,
    rank: usize,
) -> Result<TileRecord, IoError> {
    let t0 = Instant::now();
    let origin = core::array::from_fn(|a| opts.offset[a] + tile.origin[a]);
    let raw = read_image_f32_region(&opts.image, origin, tile.shape)?;
    let mut image: Vec<f32> = raw.iter().copied().collect();
    if let Some((mean, stddev)) = opts.normalisation {
        normalize_image_in_place(&mut image, mean, stddev);
    }
    let clock = || t0.elapsed().as_secs_f64();
    let seg = segment(
        &image,
        tile.shape,
        predictor,
        &opts.segment,
        &clock,
        &mut |_| {},
    )
    .map_err(|source| IoError::Inference {
        what: format!(
            "{}: tile {} at {:?} of shape {:?} (z, y, x)",
            opts.image, tile.index, origin, tile.shape
        ),
        source,
    })?;
    let c = &seg.counters;
    let meta = serde_json::json!({
        "rank": rank,
        "segments": c.segments,
        "predict_calls": c.predict_calls,
        "seeds": seg.seeds.len(),
        "seconds": t0.elapsed().as_secs_f64(),
    });
    Ok(TileRecord {
        index: tile.index,
        origin: tile.origin,
        shape: tile.shape,
        labels: seg.labels.into_iter().map(u64::from).collect(),
        meta: meta.to_string(),
    })
}

/// Segments the unfinished tiles of `plan` that this worker claims, saving each to `store`
/// atomically, until all are finished or claimed, `opts.max_tiles` were computed, or (with
/// `opts.stop_on_signal`) a stop was requested: the tile being computed is finished and saved
/// first, so a stop loses no work and leaves no half-written tile.
/// `on_tile(record, finished)` is called after each saved tile with the number of finished tiles.
pub fn run_tiles<P: Predictor + ?Sized>(
    opts: &TiledOptions,
    plan: &TilePlan,
    store: &TileStore,
    predictor: &mut P,
    worker: &Worker<'_>,
    on_tile: &mut dyn FnMut(&TileRecord, usize),
) -> Result<TilesRun, IoError> {
    let mut run = TilesRun::default();
    let limit = opts.max_tiles.unwrap_or(usize::MAX);
    for tile in plan.tiles() {
        if run.computed >= limit {
            break;
        }
        if opts.stop_on_signal
            && let Some(signal) = crate::training::stop::stop_requested()
        {
            run.stopped_by = Some(signal);
            break;
        }
        if store.is_done(tile.index) {
            run.reused += 1;
            continue;
        }
        if !store.claim(worker.run_id, tile.index)? {
            continue;
        }
        let rec = segment_tile(opts, &tile, predictor, worker.rank)?;
        // The overlaps first: the tile file marks the tile finished.
        save_overlaps(
            store.dir(),
            tile.index,
            overlap_boxes(plan, &tile, &rec.labels),
        )?;
        store.save(&rec)?;
        run.computed += 1;
        on_tile(&rec, store.count_done(plan.len()));
    }
    Ok(run)
}

/// The labels of `tile` in the box it shares with each of its neighbours in `plan`, cut one at a
/// time as the iterator is advanced.
fn overlap_boxes<'a>(
    plan: &'a TilePlan,
    tile: &'a Tile,
    labels: &'a [u64],
) -> impl Iterator<Item = Result<OverlapBox, IoError>> + 'a {
    plan.neighbours(tile.index)
        .into_iter()
        .filter_map(move |j| {
            let (lo, hi) = plan.tile(j).and_then(|b| intersection(tile, &b))?;
            Some(
                cut_box(tile, labels, lo, hi)
                    .map(|labels| OverlapBox { lo, hi, labels })
                    .map_err(IoError::from),
            )
        })
}

/// The store's tiles, checked against the plan: a tile stored at another box is an error naming
/// its file and both boxes.
impl TileSource for TileStore {
    type Error = IoError;

    fn max_id(&self, tile: &Tile) -> Result<u64, IoError> {
        TileStore::max_id(self, tile.index)
    }

    fn labels(&self, tile: &Tile) -> Result<Cow<'_, [u64]>, IoError> {
        let r = self.load(tile.index)?;
        if r.origin != tile.origin || r.shape != tile.shape {
            return Err(IoError::Config {
                path: self.tile_path(tile.index),
                reason: format!(
                    "tile {} was stored at {:?} with shape {:?}, but the plan puts it at {:?} with shape {:?}",
                    tile.index, r.origin, r.shape, tile.origin, tile.shape
                ),
            });
        }
        Ok(Cow::Owned(r.labels))
    }

    /// Reads only the box from the tile's overlaps file; a store without one (written before
    /// they existed) loads the whole tile.
    fn labels_in(
        &self,
        tile: &Tile,
        lo: [usize; 3],
        hi: [usize; 3],
    ) -> Result<Cow<'_, [u64]>, IoError> {
        match load_overlap(self.dir(), tile.index, lo, hi)? {
            Some(labels) => Ok(Cow::Owned(labels)),
            None => Ok(Cow::Owned(cut_box(tile, &self.labels(tile)?, lo, hi)?)),
        }
    }
}

/// Reconciles the finished tiles of `store` into one relabelled volume (`[z][y][x]`) with
/// ffn-core's [`reconcile`]; at most one layer of the tile grid is held in memory.
pub fn merge(
    plan: &TilePlan,
    store: &TileStore,
    rule: MergeRule,
) -> Result<(Vec<u64>, ReconcileSummary), IoError> {
    reconcile(plan, store, rule)
}

/// After all workers of run `run_id` stopped: removes the run's claims and, when every tile is
/// finished, reconciles them ([`reconcile_ids`]) and writes the volume to `out` tile core by tile
/// core ([`write_labels_by_region`]), so memory holds a layer of tiles and the merged ids, never
/// the volume. Returns `None` while tiles are missing (a rerun resumes), else the merge's summary.
pub fn finish(
    opts: &TiledOptions,
    plan: &TilePlan,
    store: &TileStore,
    run_id: &str,
    out: &VolumeSpec,
) -> Result<Option<ReconcileSummary>, IoError> {
    store.clear_claims(run_id)?;
    if store.count_done(plan.len()) < plan.len() {
        return Ok(None);
    }
    let mut ids = reconcile_ids(plan, store, opts.merge)?;
    write_labels_by_region(out, plan.shape(), ids.segments(), |volume| {
        for tile in plan.tiles() {
            let labels = store.labels(&tile)?;
            let core = ids
                .core_ids(&TileLabels {
                    tile,
                    labels: &labels,
                })
                .map_err(|source| IoError::Segmentation {
                    what: format!("tile {} of {}", tile.index, store.dir().display()),
                    source,
                })?;
            let shape = [0, 1, 2].map(|a| tile.core_hi[a] - tile.core_lo[a]);
            volume.write(tile.core_lo, shape, &core)?;
        }
        Ok(())
    })?;
    Ok(Some(ids.summary()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ffn_core::inference::LabelOracle;
    use ndarray::Array3;

    /// Boxes of ids along x and z (8 objects) in a 20 x 22 x 24 volume, written as the float image.
    fn write_ids(dir: &std::path::Path) -> (VolumeSpec, Array3<u64>) {
        let truth = Array3::from_shape_fn((20, 22, 24), |(z, y, x)| {
            1 + (z / 10) as u64 * 4 + (y / 11) as u64 * 2 + (x / 12) as u64
        });
        let spec = VolumeSpec::new(dir.join("ids.h5"), "ids");
        crate::write_image_f32(&spec, &truth.mapv(|v| v as f32)).unwrap();
        (spec, truth)
    }

    fn oracle_opts(image: VolumeSpec, store: PathBuf, tile: [usize; 3]) -> TiledOptions {
        let mut o = TiledOptions::new(image, [20, 22, 24], store, [7, 7, 7]);
        o.tile_size = tile;
        o.tile_overlap = [8; 3];
        o.predictor = "oracle".into();
        o.segment = LabelOracle::exhaustive_options();
        o
    }

    fn canonical(v: &[u64]) -> Vec<u64> {
        let mut v = v.to_vec();
        ffn_core::segmentation::relabel_first_appearance(&mut v);
        v
    }

    #[test]
    fn a_tiled_run_resumes_and_merges_like_one_tile() {
        let dir = tempfile::tempdir().unwrap();
        let (image, _) = write_ids(dir.path());
        let mut oracle = LabelOracle { fov: [7, 7, 7] };
        let mut run = |tile: [usize; 3], store: &str, out: &str, max: Option<usize>| {
            let mut o = oracle_opts(image.clone(), dir.path().join(store), tile);
            o.max_tiles = max;
            let (plan, st) = (o.plan().unwrap(), o.open_store().unwrap());
            let w = Worker {
                run_id: "r",
                rank: 0,
            };
            let mut seen = 0;
            let r = run_tiles(&o, &plan, &st, &mut oracle, &w, &mut |_, _| seen += 1).unwrap();
            assert_eq!(seen, r.computed);
            let spec = VolumeSpec::new(dir.path().join("seg.h5"), out);
            let merged = finish(&o, &plan, &st, "r", &spec).unwrap();
            (r, merged, spec)
        };
        let (r, merged, one) = run([64; 3], "one", "one", None);
        assert_eq!((r.computed, r.reused), (1, 0));
        assert!(merged.is_some());
        // 3 x 3 x 3 tiles; a first run stops after 3, the rerun computes the other 24.
        let (r, merged, _) = run([12, 13, 14], "tiled", "tiled", Some(3));
        assert_eq!(r.computed, 3);
        assert!(merged.is_none(), "tiles are missing: nothing merged");
        let (r, merged, tiled) = run([12, 13, 14], "tiled", "tiled", None);
        assert_eq!((r.computed, r.reused), (24, 3));
        let summary = merged.unwrap();
        assert!(
            summary.tile_pairs > 0 && summary.pairs.merges > 0,
            "{summary:?}"
        );
        let (a, b) = (
            crate::read_labels(&one).unwrap(),
            crate::read_labels(&tiled).unwrap(),
        );
        let (a, b): (Vec<u64>, Vec<u64>) =
            (a.iter().copied().collect(), b.iter().copied().collect());
        assert_eq!(summary.segments, 8);
        assert!(canonical(&a) == canonical(&b), "tiled equals one tile");
    }

    #[test]
    fn bad_overlaps_and_foreign_stores_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (image, _) = write_ids(dir.path());
        let mut o = oracle_opts(image, dir.path().join("s"), [12, 13, 14]);
        o.tile_overlap = [12, 0, 0];
        let e = o.plan().unwrap_err().to_string();
        assert!(
            e.starts_with("tile overlap:") && e.contains("found 0,0,12"),
            "{e}"
        );
        o.tile_overlap = [8; 3];
        o.open_store().unwrap();
        // The merge rule does not change the tiles; the seeds do.
        o.merge.min_overlap = 1;
        o.open_store().unwrap();
        o.segment.seeds = ffn_core::inference::SeedPolicy::Grid { step: 2 };
        let e = o.open_store().unwrap_err().to_string();
        assert!(
            e.contains("fingerprint") || e.contains("another run"),
            "{e}"
        );
    }

    #[test]
    fn a_stored_tile_at_another_box_is_an_error_naming_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let plan = TilePlan::new([4, 4, 4], [4, 4, 4], [0; 3]).unwrap();
        let store = TileStore::open(&dir.path().join("s"), "f").unwrap();
        store
            .save(&TileRecord {
                index: 0,
                origin: [1, 0, 0],
                shape: [4, 4, 4],
                labels: vec![1; 64],
                meta: String::new(),
            })
            .unwrap();
        let e = merge(&plan, &store, MergeRule::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tile_000000") && e.contains("plan puts it at [0, 0, 0]"),
            "{e}"
        );
    }
}
