#!/usr/bin/env bash
# scripts/fuzz_smoke.sh [BUILD_DIR] [SECONDS]: builds the libFuzzer targets (clang 14, ASan +
# UBSan; tests/fuzz/README.md) in the sanitizer build's folder (default build-asan, configured as
# scripts/sanitize.sh does; after it, nothing is left to compile) and runs each
# for SECONDS (default 30) from its committed seeds; a crash, a sanitizer report or a failed check
# fails the script, and the input is left in BUILD_DIR/fuzz-smoke/<target>/. .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-asan}
seconds=${2:-30}
root=$PWD
LOOM_CONFIGURE_ONLY=1 scripts/sanitize.sh "$dir"
targets=(ir_parser_fuzz:ir checkpoint_fuzz:ckpt mindir_fuzz:mindir onnx_fuzz:onnx event_file_fuzz:events
         npy_fuzz:npy json_config_fuzz:json)
cmake --build "$dir" --target "${targets[@]%%:*}"
# UBSan findings must stop the run (libFuzzer then reports them as a crash).
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
for t in "${targets[@]}"; do
  name=${t%%:*}
  seeds=$root/tests/fuzz/corpus/${t##*:}
  work=$dir/fuzz-smoke/$name
  rm -rf "$work" && mkdir -p "$work/corpus"
  echo "== $name: ${seconds} s from $seeds"
  "$dir/bin/$name" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "$seeds" \
      > "$work/log" 2>&1 || { tail -n 60 "$work/log"; echo "FAILED: $name (see $work)"; exit 1; }
  grep -E '^stat::number_of_executed_units' "$work/log"
done
echo "fuzz smoke: ok"
