#!/usr/bin/env bash
# The whole test suite: unit tests, cross-crate tests, and the multi-process tests (which start
# their own processes with mpirun, `ffn launch` and ZeroMQ ranks; cargo builds the `ffn` binary they
# run). Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# HDF5 file locks are inherited by child processes that tests start; locking is not needed in tests.
export HDF5_USE_FILE_LOCKING=FALSE
cargo test --workspace
