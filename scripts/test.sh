#!/usr/bin/env bash
# The whole test suite: unit tests, cross-crate tests (among them the no_std program's, which builds
# and runs nostd-check/), the multi-process tests (which start their own processes with mpirun,
# `ffn launch` and ZeroMQ ranks; cargo builds the `ffn` binary they run), and the examples, which
# check their own results and exit non-zero when one is wrong. Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# HDF5 file locks are inherited by child processes that tests start; locking is not needed in tests.
export HDF5_USE_FILE_LOCKING=FALSE
cargo test --workspace

echo "== examples"
# Built once for the whole workspace in the test profile: the same features and profile as `cargo
# test --workspace` just used (which builds the examples too), so nothing is compiled again; one
# package alone (`cargo run -p ...`) would unify other features and rebuild its dependencies.
cargo build --workspace --examples --profile test
examples="${CARGO_TARGET_DIR:-target}/debug/examples"
"$examples/flood_fill"
"$examples/train_synthetic"
"$examples/train_and_segment"
"$examples/infer_tiled"
"$examples/volumes"
# The communicator chosen at run time: the shm variant starts its own ranks; with mpirun (CI
# installs it) the mpi one runs under it too.
"$examples/allreduce" shm
if command -v mpirun >/dev/null 2>&1; then
  mpirun -n 2 "$examples/allreduce" mpi
fi
# Data-parallel training with the communicator chosen at run time: threads, then shm processes.
"$examples/train_data_parallel" local 2
"$examples/train_data_parallel" shm 2
