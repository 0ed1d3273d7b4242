//! `ffn infer-tiled`: flood-filling inference of a volume in overlapping tiles, on one or many
//! ranks, with resumable per-tile results and global ids.
//!
//! The work is [`ffn_io::tiled`] (how tiles are cut, claimed, resumed and reconciled is described
//! there): [`TiledSettings::resolve`] turns the flags into the predictor, options and plan,
//! [`connect_ranks`] gives the ranks one run id, `run_tiles` segments the tiles this rank claims
//! and rank 0 merges them (`finish`) after the final barrier. This module parses and prints.

use anyhow::{Context, Result, bail};
use ffn_comm::{Backend, stop};
use ffn_core::segmentation::MergeRule;
use ffn_io::VolumeSpec;
use ffn_io::tiled::{TiledSettings, Worker, connect_ranks, finish, run_tiles};
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
#[command(
    after_help = "Thresholds (--move-threshold, --segment-threshold, --min-segment-size): the command line, else the settings recorded with the model (ffn set-inference), else the defaults of google/ffn."
)]
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
    #[command(flatten)]
    pub conv: crate::args::InferenceConvFlag,
    /// Communicator backend: local (one rank), shm, zmq or hier (under `ffn launch -n N`), mpi (under mpirun).
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
    /// Flood-fill thresholds [the model's recorded settings (`ffn set-inference`), else
    /// google/ffn's defaults].
    #[command(flatten)]
    pub thresholds: crate::args::ThresholdFlags,
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
    let mut setup = TiledSettings {
        image,
        out: out.clone(),
        checkpoint: args.checkpoint,
        oracle: args.oracle,
        fov: args.fov,
        deltas: args.deltas,
        tile_size: args.tile_size,
        tile_overlap: args.tile_overlap,
        tile_store: args.tile_store,
        max_tiles: args.max_tiles,
        offset: args.offset,
        size: args.size,
        conv: args.conv.conv,
        image_mean: args.image_mean,
        image_stddev: args.image_stddev,
        grid_seeds: args.seed_policy == SeedPolicy::Grid,
        grid_step: args.grid_step,
        min_segment_size: args.thresholds.min_segment_size,
        move_threshold: args.thresholds.move_threshold,
        segment_threshold: args.thresholds.segment_threshold,
        symmetries: args.thresholds.symmetries,
        min_boundary_dist: args.min_boundary_dist,
        merge: MergeRule {
            min_overlap: args.min_overlap,
            min_fraction: args.min_overlap_fraction,
        },
    }
    .resolve()?;
    // SIGTERM / SIGUSR1 (a scheduler's preemption warning): finish the current tile, then stop.
    stop::install_stop_signals().context("installing the SIGTERM / SIGUSR1 handlers")?;
    setup.options.stop_on_signal = true;
    let (opts, plan, norm) = (&setup.options, &setup.plan, &setup.normalisation);
    let (overlap, n) = (opts.tile_overlap, plan.len());

    // The ranks and the run id.
    let (mut comm, run_id) = connect_ranks(backend, Duration::from_secs_f64(args.comm_timeout))?;
    let (rank, ranks) = (comm.rank(), comm.size());
    let store = opts.open_store()?;
    let xyz = |v: [usize; 3]| format!("{},{},{}", v[2], v[1], v[0]);
    if rank == 0 {
        eprintln!(
            "infer-tiled: {n} tiles (grid {}) of {} overlapping by {} over {} (all x,y,z); {ranks} rank(s); \
             {} already finished in {}",
            xyz(plan.grid_shape()),
            xyz(plan.tile_size()),
            xyz(overlap),
            xyz(opts.shape),
            store.count_done(n),
            opts.store.display()
        );
        eprintln!(
            "infer-tiled: image normalisation (x - {}) / {}, {}",
            norm.mean, norm.stddev, norm.source
        );
        if let Some(d) = &setup.model_defaults {
            eprintln!(
                "infer-tiled: inference settings recorded with the model: {d} (the command line \
                 overrides them)"
            );
        }
        if setup.overlap_below_fov() {
            eprintln!(
                "infer-tiled: warning: tile overlap {} is smaller than the FOV {} (x,y,z): segments may not reach \
                 every voxel of a tile's core",
                xyz(overlap),
                xyz(setup.fov)
            );
        }
    }

    // Dynamic scheduling through claims in the store.
    let worker = Worker {
        run_id: &run_id,
        rank,
    };
    let done = run_tiles(
        &setup.options,
        &setup.plan,
        &store,
        setup.predictor.as_mut(),
        &worker,
        &mut |rec, finished| {
            let grid = setup
                .plan
                .tile(rec.index)
                .map(|t| t.grid)
                .unwrap_or_default();
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
    if let Some(signal) = done.stopped_by {
        eprintln!(
            "infer-tiled: rank {rank}: stopped by {} after its current tile",
            stop::signal_name(signal)
        );
    }
    comm.barrier()
        .context("waiting for the other ranks to finish their tiles")?;
    let stopped = done.stopped_by.or_else(stop::stop_requested);
    let exit_if_stopped = || {
        if stopped.is_some() {
            std::process::exit(stop::STOPPED_EXIT_CODE);
        }
    };
    if rank != 0 {
        exit_if_stopped();
        return Ok(());
    }
    let t0 = Instant::now();
    let Some(summary) = finish(&setup.options, &setup.plan, &store, &run_id, &out)? else {
        let why = match stopped {
            Some(signal) => stop::signal_name(signal),
            None => "--max-tiles".into(),
        };
        println!(
            "infer-tiled: stopped with {}/{n} tiles finished ({why}); run the same command again to resume",
            store.count_done(n)
        );
        exit_if_stopped();
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
