#!/usr/bin/env bash
# examples/custom_cell runs as a user runs it: one epoch on 6,000 images, then a test accuracy
# above 0.7 (measured 0.7895 with seed 1, the same in repeated runs; an untrained net scores
# about 0.1), one checkpoint and one .mindir file in the folder given by --out.
# Usage: custom_cell_test.sh EXAMPLE
set -euo pipefail
example=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$tmp/out" >&2; exit 1; }

mkdir "$tmp/files"
"$example" --samples 6000 --out "$tmp/files" > "$tmp/out" || fail "the example exited with $?"
grep -q '^epoch 1/1: 187 steps, mean loss ' "$tmp/out" || fail "no epoch line from the callback"
acc=$(sed -n 's/^test accuracy: \([0-9.]*\)$/\1/p' "$tmp/out")
[ -n "$acc" ] || fail "no test accuracy line"
awk -v a="$acc" 'BEGIN { exit !(a > 0.7) }' || fail "test accuracy $acc after 6000 images"
[ -s "$tmp/files/custom_cell-1_187.ckpt" ] || fail "no checkpoint custom_cell-1_187.ckpt"
[ -s "$tmp/files/custom_cell.mindir" ] || fail "no custom_cell.mindir"
echo "ok: test accuracy $acc"
