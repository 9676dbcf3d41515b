#!/usr/bin/env bash
# `loom train --amp-level/--amp-dtype` end to end on a small subset of Fashion-MNIST (320
# training images = 10 steps of 32, 64 test images), --deterministic:
#  - O2 bfloat16: the header names the level and MindSpore's O2 loss scale, a note says which
#    products run on Float32 kernels, the JSON has amp_level, amp_dtype and float32_fallbacks,
#    --save-graphs has the amp stage (the first conv reads a BFloat16 cast of the Float32 weight,
#    the loss a Float32 cast) and the float32_kernels stage; it trains other weights than Float32,
#    to a loss within 2% of it;
#  - O0 is bitwise the run without the flag; O2 with --loss-scale none has no loss scale;
#  - a resume at O2 continues bitwise (the loss scale's states are in the checkpoint);
#  - O2 float16 with --check-numerics: MindSpore's initial scale 2**24 overflows Float16 in the
#    loss's gradient; each skipped step names that first non-finite node, and training goes on;
#  - errors (exit 2): a bad level, a bad dtype.
# Usage: train_amp_test.sh path/to/loom
set -euo pipefail
loom=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"  # --check-numerics writes numerics_dump/ here
small=(--train-samples 320 --test-samples 64 --batch-size 32 --deterministic --json --threads 2)
source "$here/train_run_util.sh"  # fail, run, key

run plain train lenet "${small[@]}" --epochs 1
run o0 train lenet "${small[@]}" --epochs 1 --amp-level O0
[ "$(key o0 weights_sha256)" = "$(key plain weights_sha256)" ] || fail "O0 trained other weights"
[ "$(key o0 amp_level)" = None ] || fail "amp_level in the JSON of an O0 run"

run o2 train lenet "${small[@]}" --epochs 1 --amp-level O2 --amp-dtype bfloat16 \
  --save-graphs "$tmp/graphs"
head -n 1 "$tmp/o2.out" | grep -q ", amp O2 bfloat16, loss scale dynamic (init 16777216, factor 2, window 2000), " ||
  { head -n 1 "$tmp/o2.out"; fail "header without the amp level and O2's loss scale"; }
grep -q "^amp: the CPU backend has no BFloat16 kernels for the products (Conv2D, MatMul...): they compute in Float32 on BFloat16 values" \
  "$tmp/o2.out" || { cat "$tmp/o2.out"; fail "no note on the Float32 kernels"; }
[ "$(key o2 amp_level)" = O2 ] && [ "$(key o2 amp_dtype)" = bfloat16 ] || fail "JSON amp keys"
python3 - "$tmp/o2.json" "$tmp/plain.json" <<'PY' || fail "O2 JSON"
import json, sys
o2, plain = (json.load(open(p)) for p in sys.argv[1:])
for op in ("Conv2D", "Conv2DBackpropFilter", "MatMul", "ReLU"):
    assert op in o2["float32_fallbacks"], (op, o2["float32_fallbacks"])
assert o2["skipped_steps"] == 0, o2["skipped_steps"]
assert o2["weights_sha256"] != plain["weights_sha256"]
assert abs(o2["train_loss"] - plain["train_loss"]) < 0.02 * plain["train_loss"], (o2, plain)
PY
amp=$(ls "$tmp"/graphs/train_step/*_amp.ir)
grep -q 'Cast(%conv1.weight) {dst_type: DType(BFloat16)}' "$amp" || fail "no BFloat16 weight cast in $amp"
grep -q 'scope("WithLossCell/_loss_fn/Cast")' "$amp" || fail "no Float32 cast before the loss"
ls "$tmp"/graphs/train_step/*_float32_kernels.ir >/dev/null || fail "no float32_kernels stage"
ls "$tmp"/graphs/eval/*_amp.ir >/dev/null || fail "the evaluation is not cast"

run none train lenet "${small[@]}" --epochs 1 --amp-level O2 --amp-dtype bfloat16 --loss-scale none
if head -n 1 "$tmp/none.out" | grep -q "loss scale"; then fail "--loss-scale none at O2 scaled"; fi

# Resume at O2 float16: bitwise the straight run.
run straight train lenet "${small[@]}" --epochs 2 --amp-level O2
run first train lenet "${small[@]}" --epochs 1 --amp-level O2 --ckpt-dir "$tmp/ck"
run resumed train lenet "${small[@]}" --epochs 2 --amp-level O2 --ckpt-dir "$tmp/ck" --resume auto
[ "$(key resumed weights_sha256)" = "$(key straight weights_sha256)" ] || fail "resume: other weights"
[ "$(key resumed loss_scale)" = "$(key straight loss_scale)" ] || fail "resume: other loss scale"

# --check-numerics with loss scaling: the overflowing op of each skipped step, no stop.
run numerics train lenet "${small[@]}" --epochs 1 --amp-level O2 --check-numerics
grep -q "^check-numerics: step 1: first non-finite value: Cast-op[0-9]* (0 NaN, [0-9]* Inf of 320), Gradients/WithLossCell/_loss_fn/Cast, the gradient of WithLossCell/_loss_fn/Cast; its tensors in numerics_dump/" \
  "$tmp/numerics.out" || { cat "$tmp/numerics.out"; fail "no first non-finite node at step 1"; }
grep -q "^step 1: an Inf or NaN gradient, update skipped; loss scale 8.38861e+06" "$tmp/numerics.out" ||
  fail "step 1 not skipped"
[ "$(key numerics skipped_steps)" -gt 0 ] || fail "no skipped steps"
ls numerics_dump/rank_0/lenet/0/0/*.npy >/dev/null || fail "no tensors of the overflowing node"

# Errors.
set +e
"$loom" train lenet --amp-level O7 >"$tmp/e1.out" 2>&1
rc1=$?
"$loom" train lenet --amp-level O2 --amp-dtype float64 >"$tmp/e2.out" 2>&1
rc2=$?
set -e
[ "$rc1" = 2 ] && grep -q "^loom train: --amp-level: expected O0, O1, O2, O3 or auto, got 'O7'" "$tmp/e1.out" ||
  { cat "$tmp/e1.out"; fail "bad --amp-level: exit $rc1"; }
[ "$rc2" = 2 ] && grep -q "^loom train: --amp-dtype: expected float16 or bfloat16, got 'float64'" "$tmp/e2.out" ||
  { cat "$tmp/e2.out"; fail "bad --amp-dtype: exit $rc2"; }
echo "train_amp: ok"
