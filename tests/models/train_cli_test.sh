#!/usr/bin/env bash
# `loom train lenet` on a small subset of Fashion-MNIST (2048 training images, 512 test images,
# one epoch): the --json line has every key with sane values; two --deterministic runs with the
# same seed give the same weights_sha256 (also with 1 thread instead of 2) and another seed a
# different one; bad flags exit non-zero with a message naming the flag. Then `loom train resnet18
# --dataset fake-imagenet` (the ImageNet layout on synthetic 3x224x224 rows) for two steps of
# batch 2: its JSON has a finite loss; an unknown dataset is a usage error (exit 2) naming the
# ResNets' three datasets.
# Usage: train_cli_test.sh path/to/loom
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small=(--train-samples 2048 --test-samples 512 --epochs 1 --json --deterministic)

fail() { echo "FAIL: $*" >&2; exit 1; }

# run NAME ARGS...: runs loom train lenet, keeps stdout in $tmp/NAME.out and its last line in
# $tmp/NAME.json.
run() {
  local name=$1
  shift
  "$loom" train lenet "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { cat "$tmp/$name.out" "$tmp/$name.err" >&2; fail "loom train lenet $* exited non-zero"; }
  tail -n 1 "$tmp/$name.out" >"$tmp/$name.json"
}

run a "${small[@]}" --seed 1 --threads 2
run b "${small[@]}" --seed 1 --threads 2
run c "${small[@]}" --seed 2 --threads 2
run d "${small[@]}" --seed 1 --threads 1
cat "$tmp/a.out"

python3 - "$tmp" <<'PY'
import json, math, re, sys
tmp = sys.argv[1]
keys = ["model", "epochs", "batch_size", "seed", "train_loss", "test_accuracy",
        "train_images_per_s", "data_wait_fraction", "train_loop_s", "compile_ms", "total_s",
        "peak_rss_mib", "weights_sha256"]
runs = {}
for name in "abcd":
    line = open(f"{tmp}/{name}.json").read()
    try:
        j = json.loads(line)
    except ValueError as e:
        sys.exit(f"FAIL: run {name}: the last line is not JSON ({e}): {line!r}")
    missing = [k for k in keys if k not in j]
    if missing:
        sys.exit(f"FAIL: run {name}: keys {missing} missing from {line!r}")
    runs[name] = j
a = runs["a"]
checks = [
    (a["model"] == "lenet", "model"),
    (a["epochs"] == 1 and a["batch_size"] == 32 and a["seed"] == 1, "epochs/batch_size/seed"),
    (isinstance(a["train_loss"], float) and math.isfinite(a["train_loss"])
     and 0 < a["train_loss"] < 5, "train_loss finite and plausible"),
    (0 <= a["test_accuracy"] <= 1, "test_accuracy in [0, 1]"),
    # 64 steps of Momentum on 2048 images take LeNet well past chance (10%).
    (a["test_accuracy"] > 0.3, "test_accuracy above chance"),
    (a["train_images_per_s"] > 0, "train_images_per_s > 0"),
    (0 <= a["data_wait_fraction"] <= 1, "data_wait_fraction in [0, 1]"),
    (0 < a["train_loop_s"] <= a["total_s"], "0 < train_loop_s <= total_s"),
    (a["compile_ms"] > 0, "compile_ms > 0"),
    (a["total_s"] > 0 and a["peak_rss_mib"] > 0, "total_s, peak_rss_mib > 0"),
    (re.fullmatch(r"[0-9a-f]{64}", a["weights_sha256"]) is not None,
     "weights_sha256 is 64 hex digits"),
    (runs["b"]["weights_sha256"] == a["weights_sha256"],
     "same seed, --deterministic: same weights_sha256"),
    (runs["b"]["train_loss"] == a["train_loss"]
     and runs["b"]["test_accuracy"] == a["test_accuracy"], "same seed: same loss and accuracy"),
    (runs["c"]["weights_sha256"] != a["weights_sha256"], "another seed: other weights_sha256"),
    (runs["d"]["weights_sha256"] == a["weights_sha256"] and runs["d"]["threads"] == 1
     and a["threads"] == 2, "--deterministic: the same weights_sha256 with 1 and 2 threads"),
]
bad = [what for ok, what in checks if not ok]
if bad:
    sys.exit("FAIL: " + "; ".join(bad) + "\n" + json.dumps(runs, indent=1))
print("json: ok")
PY

# The per-epoch line (not a terminal here: plain log lines).
grep -q '^epoch 1/1: train loss [0-9.]*, test loss [0-9.]*, test accuracy [0-9.]*' "$tmp/a.out" ||
  fail "no per-epoch summary line"

# expect_error EXPECTED_TEXT ARGS...: loom ARGS exits non-zero and says EXPECTED_TEXT on stderr.
expect_error() {
  local expected=$1
  shift
  if "$loom" "$@" >"$tmp/err.out" 2>"$tmp/err.err"; then
    fail "loom $* succeeded; expected an error"
  fi
  grep -qF -- "$expected" "$tmp/err.err" ||
    { cat "$tmp/err.err" >&2; fail "loom $*: expected '$expected' on stderr"; }
}
expect_error "unknown option '--bogus'" train lenet --bogus
expect_error "--epochs: expected an integer in [1, " train lenet --epochs zero
expect_error "--epochs: expected an integer in [1, " train lenet --epochs 0
expect_error "--lr: expected a positive number, got '-1'" train lenet --lr -1
expect_error "--mode: expected 'graph' or 'pynative', got 'eager'" train lenet --mode eager
expect_error "--threads: expected an integer in [1, 1024], got '0'" train lenet --threads 0
expect_error "--batch-size: expected a value after it" train lenet --batch-size
expect_error "expected a model in (lenet" train nosuchmodel
expect_error "got 'nosuchmodel'" train nosuchmodel
expect_error "expected a model to train (lenet" train
expect_error "--dataset: expected one of lenet's datasets (fashion-mnist), got 'cifar10'" \
  train lenet --dataset cifar10
expect_error "--momentum: expected a number in [0, 1), got '1.5'" train lenet --momentum 1.5
expect_error "--ckpt: only \`loom eval\` takes it" train lenet --ckpt x.ckpt
expect_error "--resume auto: needs --ckpt-dir" train lenet --resume auto
expect_error "--summary-dir: only \`loom train\` takes it" eval lenet --summary-dir d
expect_error "loom train: fashion_mnist_dir: /nonexistent/fmnist" \
  train lenet --data-dir /nonexistent/fmnist
expect_error "--epochs: only \`loom train\` takes it" eval lenet --epochs 2

# ResNet-18 in the ImageNet layout on fake-imagenet: two steps of batch 2 on the CPU (~5 s).
"$loom" train resnet18 --dataset fake-imagenet --batch-size 2 --train-samples 4 --test-samples 2 \
  --epochs 1 --json >"$tmp/fake.out" 2>"$tmp/fake.err" ||
  { cat "$tmp/fake.out" "$tmp/fake.err" >&2; fail "loom train resnet18 --dataset fake-imagenet"; }
grep -q '^loom train resnet18: fake-imagenet, 2 batches of 2 per epoch, 1 epoch' "$tmp/fake.out" ||
  { cat "$tmp/fake.out" >&2; fail "fake-imagenet: no header line with 2 batches of 2"; }
tail -n 1 "$tmp/fake.out" | python3 -c '
import json, math, sys
j = json.loads(sys.stdin.read())
ok = (j["model"] == "resnet18" and j["batch_size"] == 2 and j["epochs"] == 1
      and math.isfinite(j["train_loss"]) and j["train_loss"] > 0
      and math.isfinite(j["test_loss"]) and 0 <= j["test_accuracy"] <= 1)
sys.exit(0 if ok else f"FAIL: fake-imagenet JSON: {j}")
' || fail "fake-imagenet: JSON"
set +e
"$loom" train resnet50 --dataset imagenet >"$tmp/err.out" 2>"$tmp/err.err"
status=$?
set -e
[[ $status == 2 ]] || { cat "$tmp/err.err" >&2; fail "--dataset imagenet: exit $status, expected 2"; }
[[ $(head -n 1 "$tmp/err.err") == "loom train: --dataset: expected one of resnet50's datasets \
(fashion-mnist, cifar10, fake-imagenet), got 'imagenet'" ]] ||
  { cat "$tmp/err.err" >&2; fail "--dataset imagenet: not the expected message"; }
expect_error "resnet dataset: fake-imagenet is generated, expected no data directory, got '/x'" \
  train resnet18 --dataset fake-imagenet --data-dir /x

grep -q -- "--train-samples N" <<<"$("$loom" train --help)" || fail "train --help: no --train-samples"
grep -q -- "--ckpt" <<<"$("$loom" eval --help)" || fail "eval --help: does not say where --ckpt is"
echo "train_cli: ok"
