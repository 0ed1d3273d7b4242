//! `ffn infer-tiled`: flood-filling inference of a volume in overlapping tiles, on one or many
//! ranks, with resumable per-tile results and global ids.
//!
//! 1. The volume is cut into tiles of `--tile-size` overlapping by `--tile-overlap`
//!    (`ffn_core::segmentation::tiling`); each tile reads only its own box of the image.
//! 2. Every tile is segmented on its own (canvas, seed policy, predictor) and saved to the tile store
//!    (`--tile-store`, `ffn_io::tile_store`) atomically. A rerun skips finished tiles, so a killed job
//!    resumes where it stopped.
//! 3. Scheduling is dynamic: every rank walks the tile list and takes the next unfinished tile by
//!    creating its claim file in the store (atomic `create_new`), so a rank that finishes early takes
//!    more tiles. No point-to-point messages are needed: the communicator only broadcasts the run id
//!    and holds the final barrier. (The store folder must be shared by all ranks: one host, or a
//!    shared file system.)
//! 4. Rank 0 reconciles: segments meeting in tile overlaps are merged by overlap size
//!    (`ffn_core::segmentation::reconcile`), every voxel is taken from the tile whose core holds it,
//!    ids are made contiguous, and the volume is written chunked and compressed (`write_labels`).

use anyhow::{Context, Result, bail};
use ffn_comm::{Backend, CommOptions};
use ffn_core::inference::seeds::{GRID_OFFSETS, PeaksOptions, policy_grid, policy_peaks};
use ffn_core::inference::{Canvas, InferenceOptions, Predictor, normalize_image};
use ffn_core::network::ConvStack3d;
use ffn_core::segmentation::reconcile::{MergeRule, ReconcileSummary, Reconciler, TileLabels};
use ffn_core::segmentation::{Tile, TilePlan, relabel_first_appearance};
use ffn_io::VolumeSpec;
use ffn_io::tile_store::{TileRecord, TileStore};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Seed policies.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedPolicy {
    /// google/ffn's PolicyPeaks (distance-transform maxima away from image edges).
    Peaks,
    /// A regular grid (`--grid-step`), google/ffn's PolicyGrid3d offsets.
    Grid,
}

/// Arguments of `ffn infer-tiled`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The image, FILE.h5:DATASET (axes z,y,x).
    #[arg(long)]
    pub image: String,
    /// The final segmentation, FILE.h5:DATASET (written by rank 0, chunked and compressed).
    #[arg(long)]
    pub out: String,
    /// Model checkpoint: an ffn-rs .safetensors file or folder, or Google's model.ckpt-N prefix.
    #[arg(long, required_unless_present = "oracle")]
    pub checkpoint: Option<PathBuf>,
    /// Test predictor: the image holds label ids and the prediction is the true mask of the object
    /// at the FOV centre (no model). Uses --fov and --deltas.
    #[arg(long, hide = true, conflicts_with = "checkpoint")]
    pub oracle: bool,
    /// FOV x,y,z of the oracle predictor.
    #[arg(long, default_value = "7,7,7", hide = true)]
    pub fov: String,
    /// Movement deltas x,y,z of the oracle predictor.
    #[arg(long, default_value = "1,1,1", hide = true)]
    pub deltas: String,
    /// Tile size in voxels: one number or x,y,z.
    #[arg(long, default_value = "128")]
    pub tile_size: String,
    /// Overlap of neighbouring tiles in voxels: one number or x,y,z (default: the FOV size, the
    /// least that lets segments reach every voxel of a tile's core).
    #[arg(long)]
    pub tile_overlap: Option<String>,
    /// Folder of finished tiles (default: next to OUT's file, `FILE.DATASET.tiles`). Reruns resume from it.
    #[arg(long)]
    pub tile_store: Option<PathBuf>,
    /// Stop after this process computed this many tiles (the rest are left for a rerun).
    #[arg(long)]
    pub max_tiles: Option<usize>,
    /// Segment only the box starting here, x,y,z (with --size); OUT then holds the box.
    #[arg(long)]
    pub offset: Option<String>,
    /// Size of the box to segment, x,y,z (with --offset).
    #[arg(long)]
    pub size: Option<String>,
    /// Convolution algorithm of the 3x3x3 layers: `winograd` (F(4,3) along x, about 1.8x fewer
    /// multiply-adds, rounding differences of order 1e-7; on AVX2 CPUs for layers of 32k channels,
    /// the others run direct) or `direct`.
    #[arg(long, default_value = "winograd", value_parser = super::parse_conv_algorithm)]
    pub conv: ffn_core::conv::winograd::ConvAlgorithm,
    /// Communicator backend: local (one rank), shm or zmq (under `ffn launch -n N`), mpi (under mpirun).
    #[arg(long, default_value = "local")]
    pub backend: String,
    /// Seconds a rank may wait for the others at the final barrier.
    #[arg(long, default_value_t = 86400.0)]
    pub comm_timeout: f64,
    /// Image normalisation: mean [the checkpoint's training normalisation, else 128].
    #[arg(long)]
    pub image_mean: Option<f32>,
    /// Image normalisation: standard deviation [the checkpoint's, else 33].
    #[arg(long)]
    pub image_stddev: Option<f32>,
    /// Seed policy.
    #[arg(long, value_enum, default_value_t = SeedPolicy::Peaks)]
    pub seed_policy: SeedPolicy,
    /// Step of the grid seed policy.
    #[arg(long, default_value_t = 16)]
    pub grid_step: usize,
    /// Segments with fewer voxels are dropped.
    #[arg(long, default_value_t = 1000)]
    pub min_segment_size: usize,
    /// Object probability needed to move the FOV (and to keep a seed).
    #[arg(long, default_value_t = 0.9)]
    pub move_threshold: f32,
    /// Object probability at which a voxel joins a segment.
    #[arg(long, default_value_t = 0.6)]
    pub segment_threshold: f32,
    /// Seeds closer than this (x,y,z or one number) to an existing segment are skipped.
    #[arg(long, default_value = "1")]
    pub min_boundary_dist: String,
    /// Merge rule: least number of voxels two segments must share in a tile overlap.
    #[arg(long, default_value_t = 20)]
    pub min_overlap: u64,
    /// Merge rule: least fraction of the smaller segment's voxels in the overlap box that must be shared.
    #[arg(long, default_value_t = 0.5)]
    pub min_overlap_fraction: f64,
}

/// Parses `n` or `x,y,z` (the order `ffn infer` uses on the command line) into `[z, y, x]`.
pub fn parse_sizes(flag: &str, text: &str) -> Result<[usize; 3]> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let err = || anyhow::anyhow!("--{flag} {text:?}: expected one number or three numbers x,y,z");
    let v: Vec<usize> = parts
        .iter()
        .map(|p| p.parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| err())?;
    match v[..] {
        [n] => Ok([n; 3]),
        [x, y, z] => Ok([z, y, x]),
        _ => Err(err()),
    }
}

/// The oracle predictor: logits of the true mask of the object at the FOV centre (the image holds
/// label ids), falling slightly with the distance from the centre so that face-max movement goes
/// straight along the axes.
struct Oracle {
    fov: [usize; 3],
}

impl Predictor for Oracle {
    fn fov(&self) -> [usize; 3] {
        self.fov
    }
    fn predict(&mut self, image: &[f32], _seed: &[f32], out: &mut [f32]) {
        let c = image[image.len() / 2];
        let f = self.fov;
        for (i, (o, &v)) in out.iter_mut().zip(image).enumerate() {
            let p = [i / (f[1] * f[2]), i / f[2] % f[1], i % f[2]];
            let d2: usize = (0..3).map(|a| p[a].abs_diff(f[a] / 2).pow(2)).sum();
            *o = if v == c { 4.0 - 0.01 * d2 as f32 } else { -4.0 };
        }
    }
}

/// The `convstack_3d` network as a [`Predictor`]: seed plus update, one FOV at a time.
struct NetPredictor {
    net: ConvStack3d,
}

impl Predictor for NetPredictor {
    fn fov(&self) -> [usize; 3] {
        self.net.config().fov
    }
    fn predict(&mut self, image: &[f32], seed: &[f32], out: &mut [f32]) {
        self.net.forward(image, seed, 1, out);
    }
}

/// What every rank needs to segment a tile.
struct Job {
    image: VolumeSpec,
    /// Origin of the segmented box in the image (z,y,x); tile origins are relative to it.
    offset: [usize; 3],
    oracle: bool,
    fov: [usize; 3],
    deltas: [usize; 3],
    opts: InferenceOptions,
    seed_policy: SeedPolicy,
    grid_step: usize,
    mean: f32,
    stddev: f32,
}

impl Job {
    /// Segments one tile with `predictor`; returns the record to store.
    fn segment(
        &self,
        tile: &Tile,
        predictor: &mut dyn Predictor,
        rank: usize,
    ) -> Result<TileRecord> {
        let t0 = Instant::now();
        let origin = core::array::from_fn(|a| self.offset[a] + tile.origin[a]);
        let raw = ffn_io::read_image_f32_region(&self.image, origin, tile.shape)
            .with_context(|| format!("tile {}: reading its image box", tile.index))?;
        let raw: Vec<f32> = raw.iter().copied().collect();
        let image = if self.oracle {
            raw
        } else {
            let mut norm = vec![0.0; raw.len()];
            normalize_image(&raw, self.mean, self.stddev, &mut norm);
            norm
        };
        let mut canvas = Canvas::new(&image, tile.shape, self.fov, self.deltas, self.opts.clone())
            .map_err(|e| anyhow::anyhow!("tile {} of shape {:?}: {e}", tile.index, tile.shape))?;
        let seeds = match self.seed_policy {
            SeedPolicy::Peaks => policy_peaks(&image, tile.shape, &PeaksOptions::default()),
            SeedPolicy::Grid => {
                let offsets: Vec<usize> = GRID_OFFSETS
                    .iter()
                    .copied()
                    .filter(|&o| o < self.grid_step)
                    .collect();
                policy_grid(tile.shape, self.grid_step, &offsets)
            }
        };
        let clock = || t0.elapsed().as_secs_f64();
        canvas
            .segment_all(&seeds, predictor, &clock, &mut |_| {})
            .map_err(|e| anyhow::anyhow!("tile {}: {e}", tile.index))?;
        let c = canvas.counters();
        let meta = serde_json::json!({
            "rank": rank,
            "segments": c.segments,
            "predict_calls": c.predict_calls,
            "seeds": seeds.len(),
            "seconds": t0.elapsed().as_secs_f64(),
        });
        Ok(TileRecord {
            index: tile.index,
            origin: tile.origin,
            shape: tile.shape,
            labels: canvas.segmentation(),
            meta: meta.to_string(),
        })
    }
}

/// Runs `ffn infer-tiled`.
pub fn run(args: Args) -> Result<()> {
    let image: VolumeSpec = args.image.parse().context("ffn infer-tiled: --image")?;
    let out: VolumeSpec = args.out.parse().context("ffn infer-tiled: --out")?;
    let backend: Backend = args.backend.parse().context("ffn infer-tiled: --backend")?;
    if !(args.comm_timeout.is_finite() && args.comm_timeout > 0.0) {
        bail!(
            "--comm-timeout {}: expected a positive number of seconds",
            args.comm_timeout
        );
    }
    if args.grid_step == 0 {
        bail!("--grid-step 0: expected at least 1");
    }

    // The predictor (the model is loaded by every rank).
    let mut trained_norm = None;
    let (mut predictor, fov, deltas, predictor_desc): (
        Box<dyn Predictor>,
        [usize; 3],
        [usize; 3],
        String,
    ) = if args.oracle {
        let fov = parse_sizes("fov", &args.fov)?;
        let deltas = parse_sizes("deltas", &args.deltas)?;
        (
            Box::new(Oracle { fov }),
            fov,
            deltas,
            format!("oracle fov {fov:?} deltas {deltas:?}"),
        )
    } else {
        let path = args
            .checkpoint
            .clone()
            .context("--checkpoint is required (or --oracle)")?;
        let loaded = ffn_io::load_model(&path)
            .with_context(|| format!("loading the model {}", path.display()))?;
        trained_norm = loaded.normalisation;
        let (cfg, params) = (loaded.config, loaded.params);
        let (fov, deltas) = (cfg.fov, cfg.deltas);
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let desc = format!("model {} ({size} bytes) {cfg:?}", path.display());
        let mut net = ConvStack3d::from_params(cfg, params)
            .with_context(|| format!("model {}", path.display()))?;
        net.set_conv_algorithm(args.conv);
        (Box::new(NetPredictor { net }), fov, deltas, desc)
    };
    let mbd = parse_sizes("min-boundary-dist", &args.min_boundary_dist)?;
    let opts = InferenceOptions {
        move_threshold: args.move_threshold,
        segment_threshold: args.segment_threshold,
        min_segment_size: args.min_segment_size,
        min_boundary_dist: mbd,
        ..Default::default()
    };
    opts.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    let rule = MergeRule {
        min_overlap: args.min_overlap,
        min_fraction: args.min_overlap_fraction,
    };
    rule.validate().context("--min-overlap-fraction")?;

    // The plan.
    let full = ffn_io::dataset_shape(&image).with_context(|| format!("reading {image}"))?;
    let (offset, shape) =
        super::infer::parse_box(args.offset.as_deref(), args.size.as_deref(), full, &image)?;
    let size = parse_sizes("tile-size", &args.tile_size)?;
    let overlap = match &args.tile_overlap {
        Some(t) => parse_sizes("tile-overlap", t)?,
        None => fov,
    };
    let xyz = |v: [usize; 3]| format!("{},{},{}", v[2], v[1], v[0]);
    if let Some(a) = (0..3).find(|&a| size[a] < shape[a] && overlap[a] >= size[a]) {
        bail!(
            "--tile-overlap {}: expected less than --tile-size {} on every axis that needs more than one tile \
             ({} axis; volume {} x,y,z)",
            xyz(overlap),
            xyz(size),
            ["z", "y", "x"][a],
            xyz(shape)
        );
    }
    let plan = TilePlan::new(shape, size, overlap).context("ffn infer-tiled: the tile plan")?;
    let norm = ffn_io::normalisation::choose(
        (args.image_mean, args.image_stddev),
        (None, None),
        trained_norm,
        || {
            let raw = ffn_io::read_image_f32_region(&image, offset, shape)?;
            Ok(ffn_core::inference::mean_stddev(raw.iter().copied()))
        },
    )?;
    let small = (0..3).any(|a| plan.grid_shape()[a] > 1 && overlap[a] < fov[a]);
    let n = plan.len();

    // The ranks and the run id.
    let mut comm_opts = CommOptions::from_env().context("reading the communicator environment")?;
    comm_opts.timeout = Duration::from_secs_f64(args.comm_timeout);
    comm_opts.stall_warning = Duration::ZERO;
    let mut comm = ffn_comm::connect(backend, &comm_opts)
        .with_context(|| format!("connecting with backend {backend}"))?;
    let (rank, ranks) = (comm.rank(), comm.size());
    let mut run_id = [0u8; 16];
    if rank == 0 {
        run_id = random_bytes();
    }
    comm.broadcast_bytes(&mut run_id, 0)
        .context("broadcasting the run id")?;
    let run_id: String = run_id.iter().map(|b| format!("{b:02x}")).collect();

    let store_dir = args.tile_store.clone().unwrap_or_else(|| {
        let mut name = out
            .path
            .file_name()
            .map(|s| s.to_os_string())
            .unwrap_or_default();
        name.push(format!(".{}.tiles", out.dataset.replace('/', "_")));
        out.path.with_file_name(name)
    });
    let fingerprint = format!(
        "image {image} box {offset:?} shape {shape:?}; tiles {:?} overlap {overlap:?}; {predictor_desc}; {opts:?}; seeds {:?} step {}; \
         normalisation {} {}",
        plan.tile_size(),
        args.seed_policy,
        args.grid_step,
        norm.mean,
        norm.stddev
    );
    let store = TileStore::open(&store_dir, &fingerprint)?;
    if rank == 0 {
        eprintln!(
            "infer-tiled: {n} tiles (grid {}) of {} overlapping by {} over {} (all x,y,z); {ranks} rank(s); \
             {} already finished in {}",
            xyz(plan.grid_shape()),
            xyz(plan.tile_size()),
            xyz(overlap),
            xyz(shape),
            store.count_done(n),
            store_dir.display()
        );
        eprintln!(
            "infer-tiled: image normalisation (x - {}) / {}, {}",
            norm.mean, norm.stddev, norm.source
        );
        if small {
            eprintln!(
                "infer-tiled: warning: tile overlap {} is smaller than the FOV {} (x,y,z): segments may not reach \
                 every voxel of a tile's core",
                xyz(overlap),
                xyz(fov)
            );
        }
    }

    // Dynamic scheduling through claims in the store.
    let job = Job {
        image: image.clone(),
        offset,
        oracle: args.oracle,
        fov,
        deltas,
        opts,
        seed_policy: args.seed_policy,
        grid_step: args.grid_step,
        mean: norm.mean,
        stddev: norm.stddev,
    };
    let mut computed = 0usize;
    let mut reused = 0usize;
    let limit = args.max_tiles.unwrap_or(usize::MAX);
    for tile in plan.tiles() {
        if computed >= limit {
            break;
        }
        if store.is_done(tile.index) {
            reused += 1;
            continue;
        }
        if !store.claim(&run_id, tile.index)? {
            continue;
        }
        let rec = job.segment(&tile, predictor.as_mut(), rank)?;
        store.save(&rec)?;
        computed += 1;
        eprintln!(
            "infer-tiled: rank {rank}: tile {} {:?} done ({}); job: {}/{n} tiles finished",
            tile.index,
            tile.grid,
            rec.meta,
            store.count_done(n)
        );
    }
    println!("infer-tiled: rank {rank} computed {computed} tiles, skipped {reused} finished ones");
    comm.barrier()
        .context("waiting for the other ranks to finish their tiles")?;
    if rank != 0 {
        return Ok(());
    }
    store.clear_claims(&run_id)?;
    let done = store.count_done(n);
    if done < n {
        println!(
            "infer-tiled: stopped with {done}/{n} tiles finished (--max-tiles); run the same command again to resume"
        );
        return Ok(());
    }
    let t0 = Instant::now();
    let (volume, summary) = merge(&plan, &store, rule)?;
    let seg = ndarray::Array3::from_shape_vec((shape[0], shape[1], shape[2]), volume)
        .context("assembling the reconciled volume")?;
    ffn_io::write_labels(&out, &seg)?;
    println!(
        "infer-tiled: merged {n} tiles ({} tile pairs, {} local segments, {} merges) into {} segments in {:.1} s; wrote {out}",
        summary.tile_pairs,
        summary.local_segments,
        summary.pairs.merges,
        summary.segments,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Reconciles the finished tiles of `store` into one relabelled volume (`[z][y][x]`). At most the
/// tiles of one layer of the tile grid (plus the output volume) are held in memory.
pub fn merge(
    plan: &TilePlan,
    store: &TileStore,
    rule: MergeRule,
) -> Result<(Vec<u64>, ReconcileSummary)> {
    let n = plan.len();
    let max_ids: Vec<u64> = (0..n).map(|i| store.max_id(i)).collect::<Result<_, _>>()?;
    let mut rec = Reconciler::new(&max_ids, rule)?;
    let mut cache: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut summary = ReconcileSummary::default();
    let load = |cache: &mut BTreeMap<usize, Vec<u64>>, i: usize| -> Result<()> {
        if let std::collections::btree_map::Entry::Vacant(e) = cache.entry(i) {
            let r = store.load(i)?;
            let t = plan.tile(i).context("tile index outside the plan")?;
            if r.origin != t.origin || r.shape != t.shape {
                bail!(
                    "{}: tile {i} was stored at {:?} with shape {:?}, but the plan puts it at {:?} with shape {:?}",
                    store.tile_path(i).display(),
                    r.origin,
                    r.shape,
                    t.origin,
                    t.shape
                );
            }
            e.insert(r.labels);
        }
        Ok(())
    };
    fn view<'a>(
        plan: &TilePlan,
        cache: &'a BTreeMap<usize, Vec<u64>>,
        i: usize,
    ) -> Result<TileLabels<'a>> {
        let tile = plan.tile(i).context("tile index outside the plan")?;
        let labels = cache.get(&i).context("tile not loaded")?;
        Ok(TileLabels { tile, labels })
    }
    for (i, j) in plan.overlapping_pairs() {
        // Pairs come in increasing order of i: tiles before i are never needed again.
        cache.retain(|&k, _| k >= i);
        load(&mut cache, i)?;
        load(&mut cache, j)?;
        let s = rec.observe(&view(plan, &cache, i)?, &view(plan, &cache, j)?)?;
        summary.tile_pairs += 1;
        summary.pairs.pairs += s.pairs;
        summary.pairs.accepted += s.accepted;
        summary.pairs.merges += s.merges;
    }
    cache.clear();
    let shape = plan.shape();
    let mut out = vec![0u64; shape.iter().product()];
    for i in 0..n {
        load(&mut cache, i)?;
        rec.paint_core(&view(plan, &cache, i)?, shape, &mut out)?;
        let labels = cache.remove(&i).unwrap_or_default();
        let mut ids: Vec<u64> = labels.into_iter().filter(|&v| v != 0).collect();
        ids.sort_unstable();
        ids.dedup();
        summary.local_segments += ids.len() as u64;
    }
    summary.segments = relabel_first_appearance(&mut out);
    Ok((out, summary))
}

/// 16 random bytes for the run id (from /dev/urandom, else the clock and the process id).
fn random_bytes() -> [u8; 16] {
    let mut buf = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok();
    if !ok {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let seed = t ^ ((std::process::id() as u128) << 64);
        buf = seed.to_le_bytes();
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triples_parse() {
        assert_eq!(parse_sizes("tile-size", "64").unwrap(), [64; 3]);
        assert_eq!(parse_sizes("tile-size", "8, 16,32").unwrap(), [32, 16, 8]);
        let e = parse_sizes("tile-size", "8,16").unwrap_err().to_string();
        assert!(e.contains("--tile-size \"8,16\""), "{e}");
        assert!(parse_sizes("fov", "a").is_err());
    }
}
