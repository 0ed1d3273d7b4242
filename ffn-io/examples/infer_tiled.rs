//! `ffn infer-tiled` from Rust: a volume cut into overlapping tiles, each segmented on its own
//! and saved to a resumable tile store by workers that claim tiles (here two, one after the
//! other: the first stops after 3 tiles, the second finishes the rest), then the tiles merged
//! into one volume with global ids.
//!
//! The predictor is `LabelOracle` (the image holds label ids, so flood filling must recover
//! them); a trained `ConvStack3d` plugs in the same way. `cargo run -p ffn-io --example
//! infer_tiled`. Fails unless the merged volume matches the truth (adapted Rand error < 0.01).
use anyhow::{Result, ensure};
use ffn_core::inference::LabelOracle;
use ffn_core::{metrics::MetricOptions, synth::SynthConfig};
use ffn_io::tiled::{TiledOptions, Worker, finish, run_tiles};
use ffn_io::{VolumeSpec, evaluation::evaluate_volumes};

fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("synth.h5");
    let shape = [32, 40, 40];
    let truth = ffn_core::synth::generate(&SynthConfig::new(shape, 6))?.labels;
    let (image, labels) = (
        VolumeSpec::new(&file, "ids"),
        VolumeSpec::new(&file, "labels"),
    );
    ffn_io::write_image_f32(&image, &truth.mapv(|l| l as f32))?;
    ffn_io::write_labels(&labels, &truth)?;

    let oracle = LabelOracle { fov: [5; 3] };
    let mut opts = TiledOptions::new(image, shape, dir.path().join("tiles"), oracle.fov);
    (opts.tile_size, opts.segment) = ([16, 24, 24], LabelOracle::exhaustive_options());
    let (plan, store) = (opts.plan()?, opts.open_store()?);
    for (rank, max_tiles) in [(0, Some(3)), (1, None)] {
        let worker = Worker {
            run_id: "example",
            rank,
        };
        opts.max_tiles = max_tiles;
        let mut predictor = oracle;
        let done = run_tiles(
            &opts,
            &plan,
            &store,
            &mut predictor,
            &worker,
            &mut |_, _| {},
        )?;
        println!(
            "worker {rank}: {} tiles computed, {} reused",
            done.computed, done.reused
        );
    }
    let out = VolumeSpec::new(&file, "segmentation");
    let merged = finish(&opts, &plan, &store, "example", &out)?;
    let summary = merged.ok_or_else(|| anyhow::anyhow!("tiles are missing"))?;
    let s = evaluate_volumes(&labels, &out, None, &MetricOptions::default(), 0)?.scores;
    println!(
        "{} tiles, {} tile-local segments merged into {}; adapted Rand error {:.4}",
        plan.len(),
        summary.local_segments,
        summary.segments,
        s.adapted_rand_error
    );
    ensure!(
        s.adapted_rand_error < 0.01,
        "the merge does not match the truth"
    );
    Ok(())
}
