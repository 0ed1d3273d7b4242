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
# In the test profile: optimised like the tests, and built on what `cargo test` just built.
cargo run --profile test -p ffn-core --example flood_fill
cargo run --profile test -p ffn-core --example train_synthetic
cargo run --profile test -p ffn-io --example train_and_segment
cargo run --profile test -p ffn-io --example infer_tiled
cargo run --profile test -p ffn-io --example volumes
if command -v mpirun >/dev/null 2>&1; then
  # With MPI (CI installs it): the shm variant starts its own ranks, the mpi one runs under mpirun.
  cargo run --profile test -p ffn-comm --features mpi --example allreduce -- shm
  mpirun -n 2 "${CARGO_TARGET_DIR:-target}/debug/examples/allreduce" mpi
else
  cargo run --profile test -p ffn-comm --example allreduce -- shm
fi
# Data-parallel training with the communicator chosen at run time: threads, then shm processes.
cargo run --profile test -p ffn-comm --example train_data_parallel -- local 2
cargo run --profile test -p ffn-comm --example train_data_parallel -- shm 2
