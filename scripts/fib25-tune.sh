#!/usr/bin/env bash
# Scores inference settings of one FIB-25 model on the selection boxes of scripts/fib25-boxes.sh
# (six 80^3 boxes, each with 24 voxels of context inside z >= 150; models/ffn-rs-fib25/MODEL_CARD.md),
# never on the held-out box, and prints each
# setting's adapted Rand error per box and their mean: the way to choose the settings that
# `ffn set-inference` records with the model.
#
#   bash scripts/fib25-tune.sh MODEL OUT_DIR "MIN_SIZE SEGMENT_THRESHOLD MOVE_THRESHOLD [COVERAGE MIN_CONTACT]" ...
#   bash scripts/fib25-tune.sh models/ffn-rs-fib25/model.safetensors runs/tune "1000 0.6 0.9" "100 0.5 0.9"
#   bash scripts/fib25-tune.sh models/ffn-rs-fib25/model.safetensors runs/tune "100 0.2 0.9 0.7 20"
#
# COVERAGE and MIN_CONTACT, when given, turn on agglomeration (`--agglomerate-coverage`,
# `--agglomerate-min-contact`).
#
# Results are cached in OUT_DIR (a setting already scored is not run again); the full 250^3 volume
# is made once in runs/eval/full.h5.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: fib25-tune.sh MODEL OUT_DIR "MIN_SIZE SEGMENT_THRESHOLD MOVE_THRESHOLD" ...}
out=${2:?usage: fib25-tune.sh MODEL OUT_DIR "MIN_SIZE SEGMENT_THRESHOLD MOVE_THRESHOLD" ...}
shift 2
[ $# -gt 0 ] || { echo "give at least one setting, e.g. \"1000 0.6 0.9\"" >&2; exit 2; }
ffn=${FFN:-target/release/ffn}
bash scripts/fib25-full-volume.sh
full=runs/eval/full.h5
# `ffn bench learn` scores a folder of checkpoints: the model, as its only checkpoint.
# OUT_DIR belongs to one model: its cached scores would not be another's.
ckpt="$out/model/checkpoints/ckpt-0000000000.safetensors"
if [ -f "$ckpt" ] && ! cmp -s "$model" "$ckpt"; then
  echo "$out holds the scores of another model ($ckpt); give a new OUT_DIR" >&2
  exit 2
fi
mkdir -p "$out/model/checkpoints"
cp "$model" "$ckpt"
source scripts/fib25-boxes.sh
echo "min_size segment_threshold move_threshold [coverage min_contact] ${selection_boxes[*]} mean"
for setting in "$@"; do
  read -r size segment move coverage contact <<<"$setting"
  name="ms$size-st$segment-mt$move"
  agglomerate=()
  if [ -n "${coverage:-}" ]; then
    name="$name-ac$coverage-mc${contact:?give COVERAGE and MIN_CONTACT together}"
    agglomerate=(--agglomerate --agglomerate-coverage "$coverage" --agglomerate-min-contact "$contact")
  fi
  scores=()
  for box in "${selection_boxes[@]}"; do
    dir="$out/$name/$box"
    "$ffn" bench learn --run "$out/model" --image "$full:image" --labels "$full:labels" \
      --offset "$box" --size 80,80,80 --heldout-z 150 --context 24 --min-segment-size "$size" \
      --segment-threshold "$segment" --move-threshold "$move" "${agglomerate[@]}" --out "$dir" 2>&1 >/dev/null |
      { grep -v '^bench learn: ' >&2 || true; }
    # learning.csv: model,step,...,adapted_rand_error (10th field).
    scores+=("$(awk -F, '$1 == "ffn-rs" {print $10}' "$dir/learning.csv" | tail -1)")
  done
  echo "$setting ${scores[*]} $(echo "${scores[*]}" | awk '{for (i = 1; i <= NF; i++) t += $i; printf "%.4f", t / NF}')"
done
