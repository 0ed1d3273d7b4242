#!/usr/bin/env bash
# Trains the ffn-rs FIB-25 model on the ground truth of data/fib25 with z < 150 only (z >= 150 is held
# out for evaluation): resumes the run in RUN_DIR when it has checkpoints, else continues the run
# behind the shipped model (its newest checkpoint, optimiser state included, is in
# models/ffn-rs-fib25-continuation), else (or with FRESH=1) starts from fresh weights.
#
#   [MAX_STEPS=N] [LR=0.0003] [SEED=1] [INIT=glorot-uniform] [SHIPPED=models/ffn-rs-fib25-continuation] \
#       [DEPTH=5] [FOV=17] [DELTA=4] \
#       bash scripts/fib25-train.sh [RUN_DIR] [extra `ffn train` flags, e.g. --max-seconds 3600]
#
# SHIPPED is the checkpoint folder a new RUN_DIR continues; the learning rate and seed of a continued
# or resumed run are read from its checkpoint unless LR or SEED say otherwise (ffn refuses a changed
# configuration, naming the fields). LR and SEED default to the first phase's 0.0003 and 1 for a
# fresh run. The shipped model itself (models/ffn-rs-fib25) is a weight average without optimiser
# state: a model to segment with or to start a new run from (--init-checkpoint), not to resume.
# The configuration is the one of models/ffn-rs-fib25/MODEL_CARD.md. Run it under `nice -n 19`
# beside other work.
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:-runs/fib25}
shift || true
ffn=${FFN:-target/release/ffn}
[ -x "$ffn" ] || cargo build --release -p ffn-cli
depth=${DEPTH:-5} fov=${FOV:-17} delta=${DELTA:-4}
data="$run/data/train.h5"
# The training part: x,y all 250, z 0..149. Partitions and coordinates see nothing of z >= 150;
# lom radius = margin = fov//2 + delta.
FFN="$ffn" bash scripts/fib25-data.sh "$run/data" train 0,0,0 250,250,150 $((fov / 2 + delta))
# A new run folder continues the shipped model's training (its checkpoint holds the optimiser and
# example-generator state too, so the continuation is exact); FRESH=1 starts from fresh weights.
shipped=${SHIPPED:-models/ffn-rs-fib25-continuation}
if ! ls "$run"/checkpoints/*.safetensors >/dev/null 2>&1 && [ -z "${FRESH:-}" ] && [ -f "$shipped/model.safetensors" ]; then
  step=$("$ffn" inspect --json "$shipped/model.safetensors" | grep -o '"step":"[0-9]*"' | grep -o '[0-9]*')
  mkdir -p "$run/checkpoints"
  cp "$shipped/model.safetensors" "$run/checkpoints/$(printf 'ckpt-%010d.safetensors' "$step")"
  cp "$shipped/train_log.csv" "$run/train_log.csv"
  echo "continuing the shipped model's training from step $step"
fi
resume=()
lr=${LR:-0.0003} seed=${SEED:-1}
newest=$(ls "$run"/checkpoints/*.safetensors 2>/dev/null | sort | tail -1 || true)
if [ -n "$newest" ]; then
  resume=(--resume)
  # The learning rate and seed of the run being resumed, from its newest checkpoint's configuration.
  config=$("$ffn" inspect --json "$newest")
  lr=${LR:-$(echo "$config" | grep -o 'learning_rate\\":\\"[^\\]*' | head -1 | sed 's/.*"//')}
  seed=${SEED:-$(echo "$config" | grep -o '\\"seed\\":[0-9]*' | head -1 | sed 's/.*://')}
fi
exec "$ffn" train --image "fib25:$data:image" --labels "fib25:$data:labels" \
  --coords "$run/data/train.coords" --out "$run" "${resume[@]}" \
  --image-mean 128 --image-stddev 33 \
  --depth "$depth" --features 32 --fov "$fov,$fov,$fov" --deltas "$delta,$delta,$delta" --batch-size 4 \
  --optimizer adam --learning-rate "$lr" --init "${INIT:-glorot-uniform}" --seed "$seed" --max-steps "${MAX_STEPS:-1000000}" \
  --report-every 200 --checkpoint-secs 600 --keep-checkpoints 0 --quiet "$@"
