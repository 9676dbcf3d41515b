#!/usr/bin/env bash
# `loom compare` on real dumps: two deterministic `loom train lenet --dump` runs compare bitwise
# (exit 0, every tensor of A compared, Cosine 1 or N/A for one element, MaxAbsErr and EucDist 0),
# and graph mode against PyNative mode passes msprobe's rule (exit 0, nothing failed).
# Usage: compare_train_test.sh LOOM
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
python=""
for p in "${LOOM_PYTHON:-}" /usr/bin/python3 python3; do
  if [ -n "$p" ] && "$p" -c "import csv" 2>/dev/null; then python=$p; break; fi
done
if [ -z "$python" ]; then echo "SKIP: no python3 to read the CSV"; exit 77; fi

train=(train lenet --train-samples 64 --test-samples 32 --epochs 1 --deterministic)
"$loom" "${train[@]}" --dump "$tmp/a" > "$tmp/log" 2>&1 || { cat "$tmp/log"; fail "train A"; }
"$loom" "${train[@]}" --dump "$tmp/b" > "$tmp/log" 2>&1 || { cat "$tmp/log"; fail "train B"; }
"$loom" "${train[@]}" --mode pynative --dump "$tmp/p" > "$tmp/log" 2>&1 ||
  { cat "$tmp/log"; fail "train PyNative"; }

n=$(find "$tmp/a" -name '*.npy' | wc -l)
[ "$n" -gt 100 ] || fail "dump A holds only $n tensors"
set +e
"$loom" compare "$tmp/a" "$tmp/b" --csv "$tmp/ab.csv" > "$tmp/out" 2>&1
status=$?
set -e
[ "$status" -eq 0 ] || { cat "$tmp/out"; fail "compare A B: exit $status"; }
summary="compared $n tensors: $n passed, 0 failed; 0 only in A, 0 only in B"
[ "$(tail -n 1 "$tmp/out")" = "$summary" ] || fail "compare A B summary: $(tail -n 1 "$tmp/out")"
"$python" - "$tmp/ab.csv" "$n" <<'EOF' || fail "A and B are not bitwise equal"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
assert len(rows) == int(sys.argv[2]), len(rows)
for r in rows:
    assert r["Accuracy Reached or Not"] == "Yes", r
    assert r["MaxAbsErr"] == "0" and r["EucDist"] == "0" and r["MaxRelativeErr"] == "0", r
    one = r["NPU Tensor Shape"] in ("[]", "[1]")
    assert r["Cosine"] == ("N/A" if one else "1"), r
ops = {r["Op Type"] for r in rows}
assert {"Conv2D", "Parameter", "Gradient"} <= ops, ops
roles = {r["Role"] for r in rows}
assert {"forward", "backward", "optimizer"} <= roles, roles
EOF

set +e
"$loom" compare "$tmp/a" "$tmp/p" > "$tmp/out" 2>&1
status=$?
set -e
[ "$status" -eq 0 ] || { cat "$tmp/out"; fail "compare graph PyNative: exit $status"; }
tail -n 1 "$tmp/out" | grep -q "^compared [0-9]* tensors: [0-9]* passed, 0 failed; " ||
  fail "compare graph PyNative summary: $(tail -n 1 "$tmp/out")"
echo "compare_train: two runs bitwise equal ($n tensors); graph vs PyNative passes"
