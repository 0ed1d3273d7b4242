#!/usr/bin/env bash
# Over- or under-fitting of a FIB-25 model: runs the model through the training loop at learning
# rate 0 (`ffn train --init-checkpoint MODEL --learning-rate 0`: the same examples, FOV policy and
# metrics as training, nothing learned) on the training part (z < 150) and on a region of z >= 150
# that does not touch the held-out box (x < 140, all y, z 150-249), and prints the mean loss and F1
# of each. A model that scores much worse on the second region overfits; one that scores about
# the same underfits (it needs capacity or examples, not regularisation).
#
#   bash scripts/fib25-fit.sh MODEL [OUT_DIR] [STEPS]
#   bash scripts/fib25-fit.sh models/ffn-rs-fib25/model.safetensors runs/fit 400
#
# The examples are drawn as for training (batch 4, seed 11, reflections and x/y swaps), with
# partitions and coordinates computed on each part alone at the model's margin (FOV / 2 + delta).
# The training part's data is made once in runs/fit-data (or reused from a run folder given by
# TRAIN_DATA, e.g. TRAIN_DATA=runs/deep8-fov25/data, when its margin is the model's).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: fib25-fit.sh MODEL [OUT_DIR] [STEPS]}
out=${2:-runs/fit}
steps=${3:-400}
ffn=${FFN:-target/release/ffn}
[ -x "$ffn" ] || cargo build --release -p ffn-cli
# depth, features, fov, delta of the model (cubic FOV and equal deltas, as the FIB-25 scripts train them).
read -r depth features fov delta < <("$ffn" inspect --json "$model" | python3 -c \
  'import json, sys; m = json.load(sys.stdin)["model"]; print(m["depth"], m["features"], m["fov"][0], m["deltas"][0])')
r=$((fov / 2 + delta))
prepare() { # NAME OFFSET SIZE -> the data's path without extension (NAME.h5, NAME.coords)
  local dir=runs/fit-data/r$r
  FFN="$ffn" bash scripts/fib25-data.sh "$dir" "$1" "$2" "$3" "$r" >&2
  echo "$dir/$1"
}
if [ -n "${TRAIN_DATA:-}" ]; then
  train="$TRAIN_DATA/train"
else
  train=$(prepare train 0,0,0 250,250,150)
fi
other=$(prepare other 0,0,150 140,250,100)
mkdir -p "$out"
report=$((steps < 100 ? steps : 100)) # metric windows of 100 steps (fewer for a short check)
echo "part steps mean_loss mean_f1 (model $model: depth $depth, FOV $fov, deltas $delta; $steps steps at learning rate 0)"
for part in train other; do
  data=${!part}
  run="$out/$part"
  rm -rf "$run"
  "$ffn" train --image "fib25:$data.h5:image" --labels "fib25:$data.h5:labels" --coords "$data.coords" \
    --out "$run" --image-mean 128 --image-stddev 33 --depth "$depth" --features "$features" \
    --fov "$fov,$fov,$fov" --deltas "$delta,$delta,$delta" --batch-size 4 --optimizer adam \
    --learning-rate 0 --seed 11 --max-steps "$steps" --report-every "$report" --quiet \
    --init-checkpoint "$model" >"$run.log" 2>&1 || { cat "$run.log" >&2; exit 1; }
  awk -F, -v part="$part" -v steps="$steps" \
    'NR > 1 { loss += $2; f1 += $5; n++ } END { printf "%s %d %.3f %.3f\n", part, steps, loss / n, f1 / n }' \
    "$run/train_log.csv"
done
