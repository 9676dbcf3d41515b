#!/usr/bin/env bash
# `loom train --ckpt-dir / --resume` and `loom eval --ckpt` end to end on a small subset of
# Fashion-MNIST (640 training images = 20 steps of 32 per epoch, 64 test images), --deterministic:
#  - 2 epochs straight vs 1 epoch with --ckpt-dir then --epochs 2 --resume auto: the same
#    weights_sha256 (and test accuracy);
#  - a run saving every 3 steps is killed with SIGKILL mid-training (slowed by --step-delay-ms);
#    its newest checkpoint loads (atomic saves) and --resume auto ends with the straight run's hash,
#    after removing the temporary files interrupted saves left (one planted, any the kill left);
#  - a resume in the middle of the last epoch: train_loss covers the steps since the resume and
#    the JSON (train_loss_first_step), the epoch line and the done line say which;
#  - `loom eval lenet --ckpt` of the last checkpoint reports the training run's last test accuracy
#    and loss and its weights_sha256;
#  - errors: --resume of a missing file, --ckpt of a corrupt file, --resume with another seed,
#    --resume with another batch size (message, exit 1); --resume auto in an empty directory
#    starts fresh.
# Usage: train_ckpt_test.sh path/to/loom
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
pid=
trap '[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
small=(--train-samples 640 --test-samples 64 --batch-size 32 --deterministic --json --threads 2)

source "$(dirname "$0")/train_run_util.sh"  # fail, run, key

# --- 2 epochs straight, and 1 + 1 through a checkpoint.
run straight train lenet "${small[@]}" --epochs 2
want=$(key straight weights_sha256)
run first train lenet "${small[@]}" --epochs 1 --ckpt-dir "$tmp/ck"
[[ -f "$tmp/ck/lenet-1_20.ckpt" ]] || { ls -l "$tmp/ck" >&2; fail "no lenet-1_20.ckpt after epoch 1"; }
[[ $(key first checkpoint) == "$tmp/ck/lenet-1_20.ckpt" ]] || fail "json checkpoint key"
run resumed train lenet "${small[@]}" --epochs 2 --ckpt-dir "$tmp/ck" --resume auto
grep -qF "resumed from $tmp/ck/lenet-1_20.ckpt: epoch 2, step 20" "$tmp/resumed.out" ||
  { cat "$tmp/resumed.out" >&2; fail "no 'resumed from' line"; }
[[ $(key resumed weights_sha256) == "$want" ]] ||
  fail "resumed run's weights_sha256 $(key resumed weights_sha256) != straight $want"
[[ $(key resumed test_accuracy) == $(key straight test_accuracy) ]] || fail "resumed accuracy"
[[ $(key resumed initial_step) == 20 ]] || fail "initial_step"
echo "resume after epoch 1: ok ($want)"

# --- kill -9 mid-training, resume from the newest checkpoint.
"$loom" train lenet "${small[@]}" --epochs 2 --ckpt-dir "$tmp/kill" --save-steps 3 \
  --step-delay-ms 100 >"$tmp/killed.out" 2>&1 &
pid=$!
for _ in $(seq 1 300); do  # up to 30 s for 3 checkpoints (steps 3, 6, 9)
  n=$(ls "$tmp/kill" 2>/dev/null | grep -c '^lenet-.*\.ckpt$' || true)
  ((n >= 3)) && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
pid=
grep -q '^done:' "$tmp/killed.out" && fail "the run to kill finished before it was killed"
ls "$tmp/kill" >"$tmp/kill.ls"
(($(grep -c '^lenet-.*\.ckpt$' "$tmp/kill.ls") >= 3)) || { cat "$tmp/kill.ls" >&2; fail "fewer than 3 checkpoints"; }
newest=$(ls -t "$tmp"/kill/lenet-*.ckpt | head -n 1)
run newest eval lenet --ckpt "$newest" --test-samples 64 --json  # the newest file is whole
# A temporary file as a kill in the middle of a save leaves it (about one kill in ten does):
# --resume auto removes it, and every other one left, naming them.
printf 'partial' >"$tmp/kill/lenet-1_99.ckpt.Qx7Zp2.tmp"
run after_kill train lenet "${small[@]}" --epochs 2 --ckpt-dir "$tmp/kill" --resume auto
grep -q "^loom train lenet: removed [0-9]* temporary checkpoint files\? that an interrupted save left in $tmp/kill: .*lenet-1_99.ckpt.Qx7Zp2.tmp" \
  "$tmp/after_kill.out" || { cat "$tmp/after_kill.out" >&2; fail "no 'removed ... temporary' line"; }
ls "$tmp/kill" | grep -q '\.tmp$' && fail "temporary files left after --resume auto: $(ls "$tmp/kill")"
grep -q "^resumed from $tmp/kill/lenet-[12]_[0-9]*\.ckpt: epoch [12], step [0-9]*" \
  "$tmp/after_kill.out" || { cat "$tmp/after_kill.out" >&2; fail "no 'resumed from' line"; }
step=$(key after_kill initial_step)
((step > 0 && step < 40 && step % 3 == 0)) || fail "resumed at step $step"
# train_loss is the last epoch's mean; resumed within that epoch (step > 20), of its steps since
# the resume, which the JSON's train_loss_first_step and the epoch line then name.
first=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("train_loss_first_step", 1))' \
  "$tmp/after_kill.json")
want_first=$((step > 20 ? step - 20 + 1 : 1))
((first == want_first)) || fail "train_loss_first_step $first after a resume at step $step"
if ((step > 20)); then
  grep -q "^epoch 2/2: train loss [0-9.]* (steps $want_first-20, since the resume)" \
    "$tmp/after_kill.out" || { cat "$tmp/after_kill.out" >&2; fail "no 'steps $want_first-20' epoch line"; }
fi
[[ $(key after_kill weights_sha256) == "$want" ]] ||
  fail "killed at step $step and resumed: weights_sha256 differs from the straight run's"
echo "kill -9 at step $step (checkpoints: $(tr '\n' ' ' <"$tmp/kill.ls")), resume: ok"

# --- A resume in the middle of the last epoch: train_loss covers the steps since the resume,
# and the output says so (checkpoints after steps 7 and 14; the end-of-epoch one removed).
run mid_save train lenet "${small[@]}" --epochs 1 --ckpt-dir "$tmp/mid" --save-steps 7
rm "$tmp/mid/lenet-1_20.ckpt"
run mid train lenet "${small[@]}" --epochs 1 --ckpt-dir "$tmp/mid" --resume auto
[[ $(key mid train_loss_first_step) == 15 ]] || fail "train_loss_first_step after a resume at 14"
grep -q "^epoch 1/1: train loss [0-9.]* (steps 15-20, since the resume)" "$tmp/mid.out" ||
  { cat "$tmp/mid.out" >&2; fail "no '(steps 15-20, since the resume)' epoch line"; }
grep -q "^done: .*train loss [0-9.]* (the last epoch's steps from 15, since the resume)" \
  "$tmp/mid.out" || { cat "$tmp/mid.out" >&2; fail "no 'steps from 15' in the done line"; }
echo "resume within the last epoch: train_loss over steps 15-20, named: ok"

# --- eval --ckpt of the last checkpoint: the last epoch's test figures and the final weights.
run eval eval lenet --ckpt "$(key resumed checkpoint)" --test-samples 64 --batch-size 32 --json
grep -q "^loom eval lenet: weights from .*lenet_1-2_20.ckpt (epoch 2, step 40)" "$tmp/eval.out" ||
  { cat "$tmp/eval.out" >&2; fail "eval: no 'weights from' line"; }
for k in test_accuracy test_loss weights_sha256; do
  [[ $(key eval $k) == $(key resumed $k) ]] || fail "eval --ckpt $k $(key eval $k) != $(key resumed $k)"
done
echo "eval --ckpt: ok (accuracy $(key eval test_accuracy))"

# --- errors.
expect_error() {  # EXPECTED_STATUS EXPECTED_TEXT ARGS...
  local status=$1 expected=$2 got=0
  shift 2
  "$loom" "$@" >"$tmp/err.out" 2>"$tmp/err.err" || got=$?
  [[ $got == "$status" ]] || { cat "$tmp/err.err" >&2; fail "loom $*: exit $got, expected $status"; }
  grep -qF -- "$expected" "$tmp/err.err" ||
    { cat "$tmp/err.err" >&2; fail "loom $*: expected '$expected' on stderr"; }
}
expect_error 1 "--resume: no such checkpoint file '$tmp/missing.ckpt'" \
  train lenet "${small[@]}" --resume "$tmp/missing.ckpt"
head -c 4096 /dev/urandom >"$tmp/corrupt.ckpt"
expect_error 1 "loom eval: $tmp/corrupt.ckpt: " eval lenet --ckpt "$tmp/corrupt.ckpt"
head -c 100000 "$tmp/ck/lenet-1_20.ckpt" >"$tmp/truncated.ckpt"
expect_error 1 "loom eval: $tmp/truncated.ckpt: " eval lenet --ckpt "$tmp/truncated.ckpt"
expect_error 1 "seed" train lenet "${small[@]}" --epochs 2 --seed 2 --resume "$tmp/ck/lenet-1_20.ckpt"
expect_error 1 "does not fit 10 batches per epoch" \
  train lenet "${small[@]}" --batch-size 64 --epochs 2 --resume "$tmp/ck/lenet-1_20.ckpt"
run fresh train lenet "${small[@]}" --epochs 1 --ckpt-dir "$tmp/empty" --resume auto
grep -qF "no lenet checkpoint in $tmp/empty; starting fresh" "$tmp/fresh.out" || fail "fresh message"
echo "train_ckpt: ok"
