#!/usr/bin/env bash
# FIB-25 training data for a box of training_sample2 (data/fib25/), made once: DIR/NAME.h5 with the
# image, the labels and the partitions (`af`, lom radius R) of the box alone, and DIR/NAME.coords,
# class-balanced coordinates (margin R, 100000 per class, seed 1). R is FOV / 2 + delta of the
# model to train or test. Used by scripts/fib25-train.sh and scripts/fib25-fit.sh.
#
#   bash scripts/fib25-data.sh DIR NAME X,Y,Z SIZE_X,SIZE_Y,SIZE_Z R
#   bash scripts/fib25-data.sh runs/fib25/data train 0,0,0 250,250,150 12
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: fib25-data.sh DIR NAME X,Y,Z SIZE_X,SIZE_Y,SIZE_Z R"
dir=${1:?$usage} name=${2:?$usage} offset=${3:?$usage} size=${4:?$usage} r=${5:?$usage}
ffn=${FFN:-target/release/ffn}
[ -f "$dir/$name.coords" ] && exit 0
mkdir -p "$dir"
data="$dir/$name.h5"
"$ffn" import stack data/fib25/grayscale_maps --output "$data:image" --offset "$offset" --size "$size"
"$ffn" import labels data/fib25/groundtruth.h5.gz --output "$data:labels" --offset "$offset" --size "$size"
"$ffn" partitions --labels "$data:labels" --out "$data:af" --lom-radius "$r,$r,$r"
"$ffn" coordinates --partitions "fib25:$data:af" --out "$dir/$name.coords.tmp" \
  --margin "$r,$r,$r" --max-per-class 100000 --seed 1
mv "$dir/$name.coords.tmp" "$dir/$name.coords"
