#!/usr/bin/env bash
# Scores a FIB-25 training run's checkpoints on the selection boxes of scripts/fib25-boxes.sh (six
# 80^3 boxes, each with 24 voxels of context inside z >= 150; models/ffn-rs-fib25/MODEL_CARD.md),
# never on the held-out box, and prints each checkpoint's adapted Rand error per box and their mean,
# with a line "published" for Google's published segmentation of the volume (data/google-fib25,
# cropped to each box) for reference.
#
#   bash scripts/fib25-select.sh RUN_DIR [extra `ffn bench learn` flags, e.g. --every 4]
#
# Candidates are scored at the inference settings recorded with the shipped model
# (models/ffn-rs-fib25: segment threshold, min segment size), so that their scores compare with
# its own; flags given after RUN_DIR override them (`--segment-threshold 0.6` for google/ffn's).
#
# RUN_DIR is a training run's folder (or any folder with checkpoints/ckpt-STEP.safetensors, e.g. a
# shipped model copied there). Results are cached in RUN_DIR/selection/ (`ffn bench learn` only
# scores checkpoints it has not scored before); the full 250^3 volume is made once in
# runs/eval/full.h5.
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:?usage: fib25-select.sh RUN_DIR [ffn bench learn flags]}
shift
ffn=${FFN:-target/release/ffn}
bash scripts/fib25-full-volume.sh
full=runs/eval/full.h5
source scripts/fib25-boxes.sh
# The shipped model's recorded settings, unless a flag given here sets the same option.
shipped_settings=()
while read -r flag value; do
  [[ " $* " == *" $flag "* ]] || shipped_settings+=("$flag" "$value")
done < <("$ffn" inspect --json models/ffn-rs-fib25/model.safetensors | python3 -c '
import json, sys
tc = json.load(sys.stdin)["metadata"]["training_config"]
tc = json.loads(tc) if isinstance(tc, str) else tc
d = tc.get("inference_defaults") or {}
for key in ("segment_threshold", "min_segment_size", "move_threshold"):
    if key in d:
        print("--" + key.replace("_", "-"), round(d[key], 6))')
echo "scoring at: ${shipped_settings[*]} $*" >&2
for box in "${selection_boxes[@]}"; do
  "$ffn" bench learn --run "$run" --image "$full:image" --labels "$full:labels" --offset "$box" \
    --size 80,80,80 --heldout-z 150 --context 24 --out "$run/selection/$box" \
    --reference-segmentation data/google-fib25/segmentation.h5:segmentation \
    "${shipped_settings[@]}" "$@" >/dev/null
done
# learning.csv per box: model,step,...,adapted_rand_error (10th field); one line per checkpoint and
# one "published" line (Google's segmentation).
echo "step ${selection_boxes[*]} mean"
for box in "${selection_boxes[@]}"; do
  tail -n +2 "$run/selection/$box/learning.csv" |
    awk -F, '$1 == "ffn-rs" {print $2, $10} $1 == "published" {print "published", $10}'
done | awk -v nb=${#selection_boxes[@]} '{s[$1] = s[$1] " " $2; n[$1]++; t[$1] += $2}
  END {for (k in s) if (n[k] == nb) printf "%s%s %.4f\n", k, s[k], t[k] / nb}' | sort -n
