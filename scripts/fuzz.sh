#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ for SECONDS each (default 20), failing on the first crash, OOM
# or timeout (libFuzzer saves the input in fuzz/artifacts/TARGET/). Installs cargo-fuzz when it is
# missing; needs a nightly toolchain (`cargo +nightly`). Builds once with no sanitizer (safe Rust;
# build time matters on small machines). Each target starts from its seeds in fuzz/corpus/TARGET/
# and writes what it finds to fuzz/target/corpus-run/TARGET/, so the committed seeds stay as they
# are. `-malloc_limit_mb` needs a sanitizer; without one, fuzz/src/lib.rs's allocator refuses any
# single allocation over 1 GiB (an abort, which libFuzzer reports as a crash).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shift || true
start=$(date +%s)

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

echo "== building ${#targets[@]} fuzz targets"
cargo +nightly fuzz build -s none
echo "installed and built in $(($(date +%s) - start)) s"

scratch="fuzz/target/corpus-run"
logs="fuzz/target/fuzz-logs"
mkdir -p "$logs"
for t in "${targets[@]}"; do
  echo "== fuzz $t for ${seconds} s"
  mkdir -p "$scratch/$t" "fuzz/corpus/$t"
  # New inputs go to the first folder (scratch); the seeds are only read.
  set +e
  cargo +nightly fuzz run -s none "$t" "$scratch/$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
    -print_final_stats=1 >"$logs/$t.log" 2>&1
  status=$?
  set -e
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$logs/$t.log" >&2
    echo "error: fuzz target $t failed (exit $status); the input is in fuzz/artifacts/$t/," \
      "the log in $logs/$t.log" >&2
    exit 1
  fi
  grep -E '^#[0-9]+[[:space:]]+DONE' "$logs/$t.log" || true
done
echo "== fuzzing done: ${#targets[@]} targets, ${seconds} s each, in $(($(date +%s) - start)) s"
