//! The subcommands of `ffn`, one module each.

mod average;
mod bench;
mod bench_comm;
mod bench_learn;
mod bench_scaling;
mod comm_selftest;
mod consensus;
pub mod coordinates;
mod deepen;
pub mod demo;
mod dist_args;
mod eval;
pub mod export;
mod import;
mod infer;
mod inspect;
mod launch;
pub mod partitions;
mod selfcheck;
mod set_inference;
pub mod synth;
pub mod tiled;
pub mod train;
pub mod view;

use clap::Subcommand;

/// All subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Starts N ranks of an ffn subcommand on this host (shm / zmq / hier backends): `ffn launch -n 2 -- ...`.
    Launch(launch::Args),
    /// Throughput benchmarks: `ffn bench train`, `ffn bench forward` (one JSON line with --json).
    Bench(bench::Args),
    /// Runs the communicator conformance suite inside one rank (used by the multi-process tests).
    #[command(hide = true)]
    CommSelftest(comm_selftest::Args),
    /// Quick self-check of the build: model shapes, parameter counts, RNG, compiled-in backends.
    Selfcheck(selfcheck::Args),
    /// Writes a synthetic labelled volume (branching neurites, dark membranes) to HDF5.
    Synth(synth::Args),
    /// Computes training partitions (local object-mask fraction classes) from a label volume.
    Partitions(partitions::Args),
    /// Builds class-balanced, shuffled training coordinates from partition volumes.
    Coordinates(coordinates::Args),
    /// Trains an FFN on labelled volumes: checkpoints, metrics log, training curve, exact resume.
    Train(train::Args),
    /// The whole pipeline on synthetic (or given) data: prepare, train, segment, evaluate, plot.
    Demo(demo::Args),
    /// Imports PNG slice stacks and (FlyEM) label maps into HDF5 volumes (axes z,y,x).
    Import(import::Args),
    /// Lists the variables (names, dtypes, shapes) of a checkpoint: ffn-rs .safetensors or TF model.ckpt-N.
    Inspect(inspect::Args),
    /// The weight average of checkpoints of one training run: `ffn average A B C --out avg.safetensors`.
    Average(average::Args),
    /// Adds identity residual modules to a trained model, to fine-tune deeper: `ffn deepen M --depth 8 --out deep.safetensors`.
    Deepen(deepen::Args),
    /// Records inference settings with a model for infer, infer-tiled and demo: `ffn set-inference M --segment-threshold 0.5 --out M2.safetensors`.
    SetInference(set_inference::Args),
    /// Segments a volume (or a crop) by flood filling with a trained model; reads google/ffn requests.
    Infer(infer::Args),
    /// Scores a segmentation against ground truth: VI split/merge, adapted Rand error, worst errors.
    Eval(eval::Args),
    /// Flood-fill inference in overlapping tiles on one or many ranks, resumable, with global ids.
    InferTiled(tiled::Args),
    /// Draws one slice of a segmentation over the image as a PNG (`--z 120 --out slice.png`).
    View(view::Args),
    /// Consensus of two segmentations by intersection (google/ffn's split_segmentation_by_intersection).
    Consensus(consensus::Args),
    /// Writes image and segmentation as Neuroglancer "precomputed" volumes (info + chunks).
    Export(export::Args),
}

/// Runs one subcommand.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Launch(args) => launch::run(args),
        Command::Bench(args) => bench::run(args),
        Command::CommSelftest(args) => comm_selftest::run(args),
        Command::Selfcheck(args) => selfcheck::run(args),
        Command::Synth(args) => synth::run(args),
        Command::Partitions(args) => partitions::run(args),
        Command::Coordinates(args) => coordinates::run(args),
        Command::Train(args) => train::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Import(args) => import::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Average(args) => average::run(args),
        Command::Deepen(args) => deepen::run(args),
        Command::SetInference(args) => set_inference::run(args),
        Command::Infer(args) => infer::run(args),
        Command::Eval(args) => eval::run(args),
        Command::InferTiled(args) => tiled::run(args),
        Command::View(args) => view::run(args),
        Command::Consensus(args) => consensus::run(args),
        Command::Export(args) => export::run(args),
    }
}
