#!/usr/bin/env bash
# `loom train --loss-scale` end to end on a small subset of Fashion-MNIST (320 training images =
# 10 steps of 32 per epoch, 64 test images), --deterministic:
#  - dynamic:1024:2:3 doubles the scale after every 3 clean steps (1024 → 8192 in 10 steps),
#    skips none, and trains bitwise the weights of a run without loss scaling (a power-of-2
#    scale is exact); the epoch line and the JSON report the scale;
#  - 2 epochs straight vs 1 epoch with --ckpt-dir then --resume auto: the same weights and the
#    same scale (its states are in the checkpoint under MindSpore's names);
#  - errors (exit 2 for usage, 1 at run time): a bad --loss-scale, a resume with loss scaling
#    from a checkpoint written without it.
# Usage: train_loss_scale_test.sh path/to/loom
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small=(--train-samples 320 --test-samples 64 --batch-size 32 --deterministic --json --threads 2)
source "$(dirname "$0")/train_run_util.sh"  # fail, run, key
# scale NAME: the JSON loss_scale of run NAME, as an integer when it is one.
scale() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))["loss_scale"]; print(int(v) if v == int(v) else v)' \
            "$tmp/$1.json"; }

run plain train lenet "${small[@]}" --epochs 1
run scaled train lenet "${small[@]}" --epochs 1 --loss-scale dynamic:1024:2:3
[ "$(scale scaled)" = 8192 ] || fail "loss_scale $(scale scaled), expected 8192"
[ "$(key scaled skipped_steps)" = 0 ] || fail "skipped_steps $(key scaled skipped_steps)"
[ "$(key scaled weights_sha256)" = "$(key plain weights_sha256)" ] ||
  fail "a scaled run without overflow trained other weights than the unscaled run"
grep -q "^epoch 1/1: train loss [0-9.]*, loss scale 8192 (0 steps skipped), test loss" \
  "$tmp/scaled.out" || { cat "$tmp/scaled.out"; fail "no loss scale in the epoch line"; }
if grep -q loss_scale "$tmp/plain.json"; then fail "loss_scale in the JSON of an unscaled run"; fi

# Resume: the scale and its counters come back from the checkpoint.
run straight train lenet "${small[@]}" --epochs 2 --loss-scale dynamic:1024:2:3
run first train lenet "${small[@]}" --epochs 1 --loss-scale dynamic:1024:2:3 --ckpt-dir "$tmp/ck"
run resumed train lenet "${small[@]}" --epochs 2 --loss-scale dynamic:1024:2:3 --ckpt-dir "$tmp/ck" \
  --resume auto
[ "$(key resumed weights_sha256)" = "$(key straight weights_sha256)" ] || fail "resume: other weights"
[ "$(scale resumed)" = "$(scale straight)" ] ||
  fail "resume: loss_scale $(scale resumed), straight $(scale straight)"
[ "$(scale straight)" = 65536 ] || fail "20 steps: loss_scale $(scale straight)"
"$loom" ckpt show "$(ls "$tmp"/ck/*.ckpt | head -1)" >"$tmp/show.out" 2>&1 ||
  { cat "$tmp/show.out"; fail "loom ckpt show"; }
for name in scale_sense current_iterator_step last_overflow_iterator_step loom.skipped_steps; do
  grep -q "$name" "$tmp/show.out" || { cat "$tmp/show.out"; fail "no $name in the checkpoint"; }
done

# Errors.
set +e
"$loom" train lenet --loss-scale dynamic:0 >"$tmp/e1.out" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || fail "--loss-scale dynamic:0 exited $rc, expected 2"
grep -q "^loom train: --loss-scale: expected a positive number, got '0'$" "$tmp/e1.out" ||
  { cat "$tmp/e1.out"; fail "message for --loss-scale dynamic:0"; }
set +e
"$loom" train lenet --loss-scale static >"$tmp/e2.out" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || fail "--loss-scale static exited $rc, expected 2"
grep -q "expected a loss scaling, got 'static' (none, fixed\[:SCALE\[:keep\]\] or dynamic" \
  "$tmp/e2.out" || { cat "$tmp/e2.out"; fail "message for --loss-scale static"; }
run unscaled_ck train lenet "${small[@]}" --epochs 1 --ckpt-dir "$tmp/ck2"
set +e
"$loom" train lenet "${small[@]}" --epochs 2 --ckpt-dir "$tmp/ck2" --resume auto \
  --loss-scale fixed >"$tmp/e3.out" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || fail "resume without the states exited $rc, expected 1"
grep -q "uses loss scaling fixed 128, the checkpoint has no 'scale_sense'" "$tmp/e3.out" ||
  { cat "$tmp/e3.out"; fail "message for a resume without the loss scale states"; }
echo "train_loss_scale: passed"
