#!/usr/bin/env bash
# examples/finetune_mindir runs as a user runs it: it exports loom's untrained LeNet-5, loads the
# file as a trainable Cell, trains one epoch on 6,000 images and saves a checkpoint. The test
# accuracy must rise from about 0.1 to above 0.6 (measured 0.0711 -> 0.6951 with seed 1), and
# the checkpoint must hold the file's eight parameters under their names.
# Usage: finetune_mindir_test.sh EXAMPLE
set -euo pipefail
example=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$tmp/out" >&2; exit 1; }

"$example" --samples 6000 --out "$tmp" > "$tmp/out" || fail "the example exited with $?"
grep -q "^loaded $tmp/lenet.mindir (loom): 8 parameters$" "$tmp/out" || fail "no 'loaded' line"
before=$(sed -n 's/^test accuracy before: \([0-9.]*\)$/\1/p' "$tmp/out")
after=$(sed -n 's/^test accuracy after one epoch on 6000 images: \([0-9.]*\)$/\1/p' "$tmp/out")
[ -n "$before" ] && [ -n "$after" ] || fail "no accuracy lines"
awk -v b="$before" -v a="$after" 'BEGIN { exit !(b < 0.2 && a > 0.6) }' ||
  fail "test accuracy $before -> $after"
names="conv1.weight, conv2.weight, fc1.weight, fc1.bias, fc2.weight, fc2.bias, fc3.weight, fc3.bias"
grep -qxF "checkpoint: $tmp/finetuned.ckpt ($names)" "$tmp/out" ||
  fail "no checkpoint line with the parameter names"
[ -s "$tmp/finetuned.ckpt" ] || fail "no finetuned.ckpt"
echo "ok: test accuracy $before -> $after"
