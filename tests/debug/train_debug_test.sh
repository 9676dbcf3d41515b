#!/usr/bin/env bash
# `loom train` with the debugging flags, as a user runs them:
#  - --check-numerics stops a LeNet run diverging at lr 10 at the first Inf, naming the node with
#    its Cell path, its line in models/lenet/lenet.cc and its role, exit 1, and writes the node's
#    inputs and outputs where the message says;
#  - --dump-config with MindSpore's keys dumps one ResNet-18 step (outputs only, iteration 0)
#    that NumPy reads file by file, with MindSpore's file names, and a statistic.csv that
#    Python's csv module reads with MindSpore's columns;
#  - --watch logs MindInsight's weight_change_too_large at lr 10, --watch-stop ends the run at
#    the first hit with a checkpoint of that step;
#  - bad debugging flags and configurations stop with exit 2 and one message naming them.
# Usage: train_debug_test.sh LOOM
set -euo pipefail
loom=$1
py=/usr/bin/python3
if ! "$py" -c "import numpy" 2>/dev/null; then
  # scripts/setup.sh installs python3-numpy: in CI (LOOM_REQUIRE_INTEROP=1) its absence fails.
  if [ "${LOOM_REQUIRE_INTEROP:-}" = 1 ]; then echo "FAILED: $py has no numpy"; exit 1; fi
  echo "SKIPPED: $py has no numpy"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

# --check-numerics on a diverging run.
set +e
"$loom" train lenet --lr 10 --seed 2 --epochs 1 --test-samples 32 --deterministic \
    --check-numerics > numerics.out 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] || { cat numerics.out; fail "--check-numerics: exit $rc, expected 1"; }
grep -Eq '^loom train: check-numerics: step [0-9]+: [A-Za-z0-9]+-op[0-9]+ produced [0-9]+ NaN and [0-9]+ Inf of [0-9]+ values in output 0$' numerics.out \
  || { cat numerics.out; fail "no check-numerics line"; }
grep -Eq '^  Cell:  WithLossCell/_backbone/[a-z0-9_]+/[A-Za-z0-9]+  models/lenet/lenet\.cc:[0-9]+$' numerics.out \
  || { cat numerics.out; fail "the message does not name the Cell and the line in lenet.cc"; }
grep -Eq '^  role:  (forward|backward, the gradient of WithLossCell/.*|optimizer)$' numerics.out \
  || { cat numerics.out; fail "no role line"; }
grep -Eq '^  input 0: Float32 \(' numerics.out || fail "no input statistics"
where=$(sed -n 's/^  the node.s inputs and outputs: \(.*\)\/\([^/]*\)\.\*$/\1/p' numerics.out)
[ -n "$where" ] && [ -d "$where" ] || { cat numerics.out; fail "no dump folder named"; }
"$py" - "$where" <<'PY' || fail "the failing node's files"
import glob, sys, numpy as np
files = sorted(glob.glob(sys.argv[1] + "/*.npy"))
assert any(".input.0." in f for f in files) and any(".output.0." in f for f in files), files
out = [np.load(f) for f in files if ".output.0." in f][0]
assert not np.isfinite(out).all()
PY

# One ResNet-18 step dumped with MindSpore's configuration keys.
cat > dump.json <<JSON
{"common_dump_settings": {"op_debug_mode": 0, "dump_mode": 0, "path": "$tmp/ms_dump",
  "net_name": "ResNet18", "iteration": "0", "saved_data": "full", "input_output": 2,
  "kernels": [], "support_device": [0], "statistic_category": ["max", "min", "avg", "l2norm"]},
 "e2e_dump_settings": {"enable": true, "trans_flag": true}}
JSON
"$loom" train resnet18 --train-samples 2 --test-samples 2 --batch-size 2 --epochs 1 \
    --dump-config dump.json > dump.out 2>&1 || { cat dump.out; fail "loom train resnet18 --dump-config"; }
"$py" - "$tmp/ms_dump" <<'PY' || fail "the ResNet-18 dump"
import csv, glob, os, re, sys, numpy as np
root = sys.argv[1] + "/rank_0"
it = root + "/ResNet18/0/0"
files = sorted(glob.glob(it + "/*.npy"))
assert len(files) > 100, len(files)
pat = re.compile(r"^([A-Za-z0-9]+)\.(.+)\.0\.0\.(\d{16})\.(input|output)\.(\d+)\.DefaultFormat\.npy$")
stamps = []
for f in files:
    m = pat.match(os.path.basename(f))
    assert m, f
    assert m.group(4) == "output", f  # input_output 2
    a = np.load(f)
    assert a.dtype in (np.float32, np.int32, np.int64, np.float64), (f, a.dtype)
    stamps.append(int(m.group(3)))
assert len(set(stamps)) == len(stamps), "timestamps repeat"
names = {os.path.basename(f).split(".")[0] for f in files}
assert {"Conv2D", "BatchNorm", "Parameter", "Gradient"} <= names, names
rows = list(csv.DictReader(open(it + "/statistic.csv")))
assert len(rows) == len(files), (len(rows), len(files))
want = ["Op Type", "Op Name", "Task ID", "Stream ID", "Timestamp", "IO", "Slot", "Data Size",
        "Data Type", "Shape", "Max Value", "Min Value", "Avg Value", "L2Norm Value"]
assert list(rows[0].keys()) == want, list(rows[0].keys())
for r in rows[:50]:
    float(r["Max Value"]); float(r["L2Norm Value"]); int(r["Data Size"])
assert not os.path.exists(root + "/ResNet18/0/1")
assert os.path.exists(root + "/graphs/ms_output_trace_code_graph_0.ir")
order = list(csv.DictReader(open(root + "/execution_order/ms_execution_order_graph_0.csv")))
assert order[0]["scope"].startswith("WithLossCell/_backbone/"), order[0]
PY

# Watchpoints: lr 10 moves every weight by far more than MindInsight's default ratio 0.1 in the
# first step; --watch-stop ends the run there with a checkpoint, and the JSON says so.
"$loom" train lenet --epochs 1 --train-samples 640 --test-samples 64 --lr 10 --seed 2 \
    --watch 'weight_change_too_large@^conv' --watch-stop --json > watch.out 2>&1 \
  || { cat watch.out; fail "loom train --watch --watch-stop"; }
grep -Eq '^watch: step 1: weight_change_too_large on conv1\.weight: abs_mean_update_ratio [0-9.e+-]+ > 0\.1$' watch.out \
  || { cat watch.out; fail "no hit line for conv1.weight at step 1"; }
grep -q '^watch: stopped at step 1; checkpoint: lenet-watch_1.ckpt$' watch.out \
  || { cat watch.out; fail "no stop line"; }
[ -f lenet-watch_1.ckpt ] || fail "no checkpoint at the hit"
"$loom" ckpt show lenet-watch_1.ckpt | grep -Eq '^  global_step +1$' || fail "the checkpoint is not step 1's"
tail -1 watch.out | "$py" -c 'import json, sys; j = json.loads(sys.stdin.read()); assert j["watch_stopped"] is True and j["watch_hits"] == 2, j' \
  || fail "the JSON record"

# Bad flags and configurations: exit 2, one message naming them.
expect_usage() {
  local want=$1; shift
  set +e
  "$loom" train lenet --train-samples 64 --test-samples 32 --epochs 1 "$@" > bad.out 2>&1
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || { cat bad.out; fail "$*: exit $rc, expected 2"; }
  grep -q -- "$want" bad.out || { cat bad.out; fail "$*: no '$want' in the message"; }
}
expect_usage "--dump-max-bytes: expected a positive byte count" --dump d --dump-max-bytes 10X
expect_usage "--dump-config: nope.json: cannot open" --dump-config nope.json
echo '{"common_dump_settings": {"dump_mode": 0, "path": "d", "net_name": "n",
      "input_output": 0, "iteration": "1-x"}}' > bad_iter.json
expect_usage "bad_iter.json: common_dump_settings.iteration" --dump-config bad_iter.json
echo '{"common_dump_settings": ' > truncated.json
expect_usage "truncated.json: expected a JSON dump configuration, got invalid JSON" \
    --dump-config truncated.json
expect_usage "--check-numerics: takes no value" --check-numerics=1
expect_usage "--watch-stop: needs --watch" --watch-stop
expect_usage "--watch: watch spec 'no_such_condition', column 1" --watch no_such_condition
echo "ok"
