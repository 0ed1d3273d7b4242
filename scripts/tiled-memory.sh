#!/usr/bin/env bash
# Peak resident memory of `ffn infer-tiled` (oracle predictor) against volume size, tile size and
# ranks, on synthetic Zarr volumes: the table in the README's tiled-inference section.
#
#   [FFN=target/release/ffn] bash scripts/tiled-memory.sh [WORK_DIR]
set -euo pipefail
F=$(realpath -m "${FFN:-target/release/ffn}")
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt install time)" >&2; exit 1; }
[ -x "$F" ] || { echo "build it first: cargo build --release -p ffn-cli" >&2; exit 1; }
mkdir -p "${1:-runs/tiled-memory}" && cd "${1:-runs/tiled-memory}"
for n in 128 256 384; do
  [ -d s$n.zarr ] || $F synth --out s$n.zarr --shape $n,$n,$n --neurites $((n/4)) --seed 3 >/dev/null
done
for n in 128 256 384; do
  for t in 64 128; do
    for r in 1 2; do
      rm -rf st out.zarr
      args="infer-tiled --image s$n.zarr/labels --out out.zarr/seg --tile-size $t --tile-store st --oracle --fov 9,9,9 --deltas 4,4,4 --seed-policy grid --grid-step 4 --min-segment-size 1 --min-boundary-dist 0"
      if [ $r = 1 ]; then
        /usr/bin/time -f "%M %e" -o tm $F $args > log 2>&1
        rss=$(cut -d' ' -f1 tm); wall=$(cut -d' ' -f2 tm)
      else
        /usr/bin/time -f "%M %e" -o tm $F launch -n 2 --timeout 1200 -- $args --backend shm > log 2>&1
        wall=$(cut -d' ' -f2 tm)
        rss=$(cut -d" " -f1 tm)
      fi
      echo "volume ${n}^3 tile $t ranks $r: maxrss_kb $rss wall_s $wall $(grep -o 'into [0-9]* segments' log | head -1)"
    done
  done
done
