#!/usr/bin/env bash
# device_cli_test.sh LOOM: the --device flag of `loom train`, `loom eval` and `loom run`.
#   - A bad device name is a usage error (exit 2) naming the flag.
#   - Without a usable CUDA backend (`loom info` says "CUDA: none: ..."): GPU runs exit 1 saying
#     why ("CUDA: expected a backend for this device, got none (<the reason>)").
#   - With one: `loom run lenet.mindir --device GPU` prints the CPU run's logits (to 1e-3).
# The fake GPU of the tests (tests/fake_device.h) is never in the `loom` binary: the library
# side of training and evaluation on a device is tests/train/device_run_test.cc.
set -uo pipefail
loom=${1:?usage: device_cli_test.sh LOOM}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect STATUS PATTERN ARGS...: loom ARGS exits STATUS and its output matches PATTERN.
expect() {
  local status=$1 pattern=$2; shift 2
  "$loom" "$@" >"$tmp/out" 2>&1
  local rc=$?
  [[ $rc -eq $status ]] || { cat "$tmp/out"; fail "loom $*: exit $rc, expected $status"; }
  grep -Eq -- "$pattern" "$tmp/out" || { cat "$tmp/out"; fail "loom $*: no '$pattern'"; }
}

"$loom" export lenet --output "$tmp/lenet.mindir" --batch 2 >/dev/null || fail "loom export"
# A (2, 1, 32, 32) float32 .npy of 0.25s: version 1.0, header padded to a multiple of 64 bytes.
header="{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 32, 32), }"
hlen=$(( (10 + ${#header} + 1 + 63) / 64 * 64 - 10 ))
pad=$((hlen - ${#header} - 1))
{ printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x "$hlen")\\x00"; printf '%s' "$header";
  printf '%*s' "$pad" ''; printf '\n';
  for ((i = 0; i < 2 * 1024; ++i)); do printf '\x00\x00\x80\x3e'; done; } > "$tmp/x.npy"

expect 2 "--device: expected CPU or GPU, got 'TPU'" train lenet --device TPU
expect 2 "--device: expected CPU or GPU, got 'TPU'" run "$tmp/lenet.mindir" --input "$tmp/x.npy" \
  --device TPU
expect 0 "Float32 \(2, 10\)" run "$tmp/lenet.mindir" --input "$tmp/x.npy" --device CPU
cp "$tmp/out" "$tmp/cpu.out"

info=$("$loom" info 2>&1) || fail "loom info: $info"
if grep -q '^CUDA: none' <<<"$info"; then
  why="CUDA: expected a backend for this device, got none \(.+\)"
  expect 1 "^loom train: $why" train lenet --device GPU --epochs 1 --train-samples 64
  expect 1 "^loom eval: $why" eval lenet --device GPU --test-samples 32
  expect 1 "^loom run: $why" run "$tmp/lenet.mindir" --input "$tmp/x.npy" --device GPU
  echo "device cli ok (no CUDA backend: $(grep '^CUDA: none' <<<"$info" | head -1))"
  exit 0
fi

expect 0 "Float32 \(2, 10\)" run "$tmp/lenet.mindir" --input "$tmp/x.npy" --device GPU
paste -d' ' <(tail -1 "$tmp/cpu.out" | tr ' ' '\n') <(tail -1 "$tmp/out" | tr ' ' '\n') |
  awk '$1 != "..." { d = $1 - $2; if (d < 0) d = -d; if (!(d <= 1e-3)) bad = 1; n++ }
       END { exit bad || n < 10 }' ||
  { cat "$tmp/cpu.out" "$tmp/out"; fail "loom run --device GPU: not the CPU's logits"; }
echo "device cli ok (CUDA backend)"
