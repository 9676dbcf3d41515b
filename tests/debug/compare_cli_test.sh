#!/usr/bin/env bash
# `loom compare A B` on dumps written by NumPy (compare_make_dumps.py): exit 0 with every tensor
# passing and the summary line for identical dumps and for a float64 reference; exit 3 naming
# the first failing node in A's execution order for a perturbed tensor, a NaN, a shape mismatch;
# exit 1 with a message naming the file for a missing folder, a truncated .npy, a stray file, a bad
# mapping, no tensor in common; exit 2 for a usage error (every loom command's convention). The --csv file parses with Python's csv module and
# has msprobe's columns.
# Usage: compare_cli_test.sh LOOM MAKE_DUMPS_PY
# Skips (77) when no python3 with NumPy is found.
set -euo pipefail
loom=$1
make_dumps=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

python=""
for p in "${LOOM_PYTHON:-}" /usr/bin/python3 python3; do
  if [ -n "$p" ] && "$p" -c "import numpy" 2>/dev/null; then python=$p; break; fi
done
if [ -z "$python" ]; then echo "SKIP: no python3 with NumPy to write the dumps"; exit 77; fi
"$python" "$make_dumps" "$tmp/d" || fail "compare_make_dumps.py failed"
d=$tmp/d

# expect STATUS ARGS...: runs loom compare, output in $tmp/out, stderr in $tmp/err.
expect() {
  local want=$1
  shift
  set +e
  "$loom" compare "$@" > "$tmp/out" 2> "$tmp/err"
  local got=$?
  set -e
  if [ "$got" -ne "$want" ]; then
    cat "$tmp/out" "$tmp/err" >&2
    fail "compare $*: exit $got, expected $want"
  fi
}
last_line() { tail -n 1 "$tmp/out"; }

# Identical values, other timestamps: every tensor passes.
expect 0 "$d/ref" "$d/same" --csv "$tmp/same.csv"
[ "$(last_line)" = "compared 12 tensors: 12 passed, 0 failed; 0 only in A, 0 only in B" ] ||
  fail "summary: $(last_line)"
! grep -q "first failing node" "$tmp/out" || fail "a failing node in identical dumps"
"$python" - "$tmp/same.csv" <<'EOF' || fail "the CSV of identical dumps"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
msprobe = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape",
           "Bench Tensor Shape", "Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr",
           "One Thousandth Err Ratio", "Five Thousandths Err Ratio", "NPU max", "NPU min",
           "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm",
           "Accuracy Reached or Not", "Err_message"]
loom = ["MeanAbsErr", "RMSE", "RelativeEucDist", "KLDivergence", "Op Type", "Cell", "File",
        "Line", "Role", "Forward"]
header = next(csv.reader(open(sys.argv[1], newline="")))
assert header[:len(msprobe)] == msprobe, header
assert header[len(msprobe):len(msprobe) + len(loom)] == loom, header
assert len(rows) == 12, len(rows)
for r in rows:
    assert r["Accuracy Reached or Not"] == "Yes", r
    assert r["Cosine"] == "1" and r["MaxAbsErr"] == "0" and r["EucDist"] == "0", r
grad = [r for r in rows if r["NPU Name"] == "MatMulGrad-op2.output.0"]
assert len(grad) == 2 and grad[0]["File"] == "net, with a comma.py", grad
assert grad[0]["Role"] == "backward" and grad[0]["Forward"] == "Net/fc/MatMul", grad
assert rows[0]["NPU Name"] == "Parameter.w.output.0" and rows[0]["NPU Tensor Shape"] == "[4, 4]"
EOF

# A float64 reference: within float32 rounding, every tensor passes.
expect 0 "$d/ref" "$d/f64"
[ "$(last_line)" = "compared 12 tensors: 12 passed, 0 failed; 0 only in A, 0 only in B" ] ||
  fail "float64 summary: $(last_line)"
grep -q "dtype Float32 vs Float64" "$tmp/out" || fail "no dtype note"

# One tensor off: exit 3, and the first failing node by A's execution order is ReLU-op1 (the
# flipped MatMulGrad-op2 was written earlier but runs later).
expect 3 "$d/ref" "$d/perturbed" --csv "$tmp/perturbed.csv"
[ "$(last_line)" = "compared 12 tensors: 10 passed, 2 failed; 0 only in A, 0 only in B" ] ||
  fail "perturbed summary: $(last_line)"
first="first failing node (A's execution order): ReLU ReLU-op1, full name Net/relu/ReLU-op1"
grep -q "^$first, net.py:4, forward$" "$tmp/out" || { cat "$tmp/out"; fail "first failing node"; }
grep -q "^  tensor ReLU-op1.output.0 (graph 0, iteration 0): No, Cosine .*, MaxAbsErr 2," \
  "$tmp/out" || fail "the failing tensor's line"
"$python" - "$tmp/perturbed.csv" <<'EOF' || fail "the CSV of the perturbed dump"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
failed = [(r["NPU Name"], r["Iteration"]) for r in rows if r["Accuracy Reached or Not"] == "No"]
assert failed == [("ReLU-op1.output.0", "0"), ("MatMulGrad-op2.output.0", "0")], failed
relu = [r for r in rows if r["NPU Name"] == "ReLU-op1.output.0"][0]
assert float(relu["MaxAbsErr"]) == 2.0, relu
assert relu["Cell"] == "Net/relu/ReLU" and relu["Line"] == "4", relu
EOF

# NaN in B where A has none: N/A, exit 3.
expect 3 "$d/ref" "$d/nan"
grep -q "^first failing node (A's execution order): MatMul MatMul-op0" "$tmp/out" ||
  fail "NaN: first failing node"
grep -q "NaN/Inf at different positions (A: 0 NaN, 0 Inf; B: 1 NaN, 0 Inf)" "$tmp/out" ||
  fail "NaN: message"

# A shape mismatch: exit 3.
expect 3 "$d/ref" "$d/shape"
grep -q "FAIL (Unmatched)  shape (2, 4) vs (8)" "$tmp/out" || { cat "$tmp/out"; fail "shape row"; }

# Foreign names through a mapping.
expect 0 "$d/ref" "$d/foreign" --mapping "$d/mapping.json"
summary="compared 4 tensors: 4 passed, 0 failed; 8 only in A, 0 only in B, 8 of B not mapped"
[ "$(last_line)" = "$summary" ] || fail "mapping summary: $(last_line)"

# --graph / --iteration / --all.
expect 0 "$d/ref" "$d/same" --iteration 1 --all
[ "$(last_line)" = "compared 6 tensors: 6 passed, 0 failed; 0 only in A, 0 only in B" ] ||
  fail "--iteration summary: $(last_line)"

# Bad input: exit 1 and a message naming what is wrong; usage errors: exit 2.
expect 1 "$d/ref" "$tmp/none"
grep -q "^loom compare: open_dump: expected a dump folder, got '$tmp/none' (no such file" \
  "$tmp/err" || { cat "$tmp/err"; fail "missing folder message"; }
mkdir "$tmp/empty"
expect 1 "$tmp/empty" "$d/ref"
grep -q "got an empty folder" "$tmp/err" || fail "empty folder message"
expect 1 "$d/ref" "$d/truncated"
truncated="$d/truncated/rank_0/Net/0/0/ReLU.ReLU-op1.*\.npy"
grep -q "^loom compare: $truncated: expected 32 bytes of data" "$tmp/err" ||
  { cat "$tmp/err"; fail "truncated .npy message"; }
expect 1 "$d/ref" "$d/stray"
grep -q "$d/stray/rank_0/Net/0/1/notes.txt': expected a tensor file named" "$tmp/err" ||
  fail "stray file message"
echo '{"relu.output.0": ' > "$tmp/bad.json"
expect 1 "$d/ref" "$d/foreign" --mapping "$tmp/bad.json"
grep -q "^loom compare: $tmp/bad.json: expected a JSON object" "$tmp/err" || fail "bad mapping"
expect 1 "$d/ref" "$d/same" --graph 3
grep -q "^loom compare: compare: expected tensors in common between A '$d/ref' (no tensors) and B" \
  "$tmp/err" || fail "nothing in common"
expect 2 "$d/ref"
grep -q "expected two dump folders A and B, got 1" "$tmp/err" || fail "usage"
expect 2 "$d/ref" "$d/same" --graph x
grep -q "expected a non-negative integer after --graph, got 'x'" "$tmp/err" || fail "--graph x"
expect 2 "$d/ref" "$d/same" --frobnicate
expect 0 --help
echo "compare_cli: identical, float64, perturbed, NaN, shape, mapping, bad input: as expected"
