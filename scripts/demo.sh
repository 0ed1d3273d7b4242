#!/usr/bin/env bash
# The README's first command: install what is missing, build the `ffn` binary, run the demo on
# built-in default data. Extra arguments are passed to `ffn demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release -p ffn-cli --bin ffn
./target/release/ffn demo "$@"
