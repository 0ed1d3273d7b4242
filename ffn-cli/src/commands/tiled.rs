//! `ffn infer-tiled`: flood-filling inference of a volume in overlapping tiles, on one or many
//! ranks, with resumable per-tile results and global ids.
//!
//! The work is [`ffn_io::tiled`] (`run_tiles`, `finish`); this module turns flags into its
//! `TiledOptions`, connects the ranks (run id, final barrier) and prints.
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
use ffn_core::inference::{InferenceOptions, LabelOracle, Predictor, SegmentOptions};
use ffn_core::network::ConvStack3d;
use ffn_core::segmentation::MergeRule;
use ffn_io::tiled::{TiledOptions, Worker, finish, run_tiles};
use ffn_io::{NormalisationChoice, VolumeSpec};
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
            Box::new(LabelOracle { fov }),
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
        (Box::new(net), fov, deltas, desc)
    };
    let inference = InferenceOptions {
        move_threshold: args.move_threshold,
        segment_threshold: args.segment_threshold,
        min_segment_size: args.min_segment_size,
        min_boundary_dist: parse_sizes("min-boundary-dist", &args.min_boundary_dist)?,
        ..Default::default()
    };
    inference.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    let merge = MergeRule {
        min_overlap: args.min_overlap,
        min_fraction: args.min_overlap_fraction,
    };
    merge.validate().context("--min-overlap-fraction")?;

    // The box, the plan and the normalisation.
    let full = ffn_io::dataset_shape(&image).with_context(|| format!("reading {image}"))?;
    let (offset, shape) =
        super::infer::parse_box(args.offset.as_deref(), args.size.as_deref(), full, &image)?;
    let norm = NormalisationChoice {
        given: (args.image_mean, args.image_stddev),
        trained: trained_norm,
        ..Default::default()
    }
    .resolve(|| {
        let raw = ffn_io::read_image_f32_region(&image, offset, shape)?;
        Ok(ffn_core::inference::mean_stddev(raw.iter().copied()))
    })?;
    let store_dir = args.tile_store.clone().unwrap_or_else(|| {
        let mut name = out
            .path
            .file_name()
            .map(|s| s.to_os_string())
            .unwrap_or_default();
        name.push(format!(".{}.tiles", out.dataset.replace('/', "_")));
        out.path.with_file_name(name)
    });
    let opts = TiledOptions {
        image,
        offset,
        shape,
        tile_size: parse_sizes("tile-size", &args.tile_size)?,
        tile_overlap: match &args.tile_overlap {
            Some(t) => parse_sizes("tile-overlap", t)?,
            None => fov,
        },
        store: store_dir,
        max_tiles: args.max_tiles,
        normalisation: (!args.oracle).then_some((norm.mean, norm.stddev)),
        segment: SegmentOptions {
            deltas,
            seeds: match args.seed_policy {
                SeedPolicy::Peaks => ffn_core::inference::SeedPolicy::default(),
                SeedPolicy::Grid => ffn_core::inference::SeedPolicy::Grid {
                    step: args.grid_step,
                },
            },
            inference,
        },
        merge,
        predictor: predictor_desc,
    };
    let plan = opts.plan().context("--tile-overlap / --tile-size")?;
    let (overlap, n) = (opts.tile_overlap, plan.len());
    let small = (0..3).any(|a| plan.grid_shape()[a] > 1 && overlap[a] < fov[a]);

    // The ranks and the run id.
    let mut comm_opts = CommOptions::from_env().context("reading the communicator environment")?;
    comm_opts.timeout = Duration::from_secs_f64(args.comm_timeout);
    comm_opts.stall_warning = Duration::ZERO;
    let mut comm = ffn_comm::connect(backend, &comm_opts)
        .with_context(|| format!("connecting with backend {backend}"))?;
    let (rank, ranks) = (comm.rank(), comm.size());
    let mut run_id = match rank {
        0 => ffn_comm::launch::random_bytes(16),
        _ => vec![0u8; 16],
    };
    comm.broadcast_bytes(&mut run_id, 0)
        .context("broadcasting the run id")?;
    let run_id: String = run_id.iter().map(|b| format!("{b:02x}")).collect();

    let store = opts.open_store()?;
    let xyz = |v: [usize; 3]| format!("{},{},{}", v[2], v[1], v[0]);
    if rank == 0 {
        eprintln!(
            "infer-tiled: {n} tiles (grid {}) of {} overlapping by {} over {} (all x,y,z); {ranks} rank(s); \
             {} already finished in {}",
            xyz(plan.grid_shape()),
            xyz(plan.tile_size()),
            xyz(overlap),
            xyz(shape),
            store.count_done(n),
            opts.store.display()
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
    let worker = Worker {
        run_id: &run_id,
        rank,
    };
    let done = run_tiles(
        &opts,
        &plan,
        &store,
        predictor.as_mut(),
        &worker,
        &mut |rec, finished| {
            let grid = plan.tile(rec.index).map(|t| t.grid).unwrap_or_default();
            eprintln!(
                "infer-tiled: rank {rank}: tile {} {grid:?} done ({}); job: {finished}/{n} tiles finished",
                rec.index, rec.meta
            );
        },
    )?;
    println!(
        "infer-tiled: rank {rank} computed {} tiles, skipped {} finished ones",
        done.computed, done.reused
    );
    comm.barrier()
        .context("waiting for the other ranks to finish their tiles")?;
    if rank != 0 {
        return Ok(());
    }
    let t0 = Instant::now();
    let Some(summary) = finish(&opts, &plan, &store, &run_id, &out)? else {
        println!(
            "infer-tiled: stopped with {}/{n} tiles finished (--max-tiles); run the same command again to resume",
            store.count_done(n)
        );
        return Ok(());
    };
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
