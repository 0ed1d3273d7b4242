#!/usr/bin/env bash
# Makes runs/eval/full.h5 (datasets image and labels: the whole FIB-25 training_sample2 volume and
# its ground truth, 250^3, from data/fib25/) once, for scoring boxes of it with `ffn bench learn`;
# used by fib25-select.sh and fib25-tune.sh. FFN names the binary (default target/release/ffn).
set -euo pipefail
cd "$(dirname "$0")/.."
ffn=${FFN:-target/release/ffn}
[ -x "$ffn" ] || cargo build --release -p ffn-cli
full=runs/eval/full.h5
if [ ! -f "$full.done" ]; then
  mkdir -p runs/eval
  rm -f "$full"
  "$ffn" import stack data/fib25/grayscale_maps --output "$full:image"
  "$ffn" import labels data/fib25/groundtruth.h5.gz --output "$full:labels"
  touch "$full.done"
fi
