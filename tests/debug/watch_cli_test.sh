#!/usr/bin/env bash
# `loom debug DUMP --watch SPEC` on a real dump (`loom train lenet --dump`, 3 steps and an
# evaluation): exit 0 and "0 hits" for conditions a healthy run does not meet; exit 3 and the
# exact hit lines, in the dump's order, for conditions it meets at known iterations; activation
# conditions limited to forward launches; exit 2 with a message for every usage error, 1 for bad
# input (every loom command's convention).
# Usage: watch_cli_test.sh LOOM
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$loom" train lenet --train-samples 96 --test-samples 32 --epochs 1 --deterministic \
  --dump "$tmp/d" > "$tmp/log" 2>&1 || { cat "$tmp/log"; fail "train --dump"; }

# run EXPECTED_STATUS ARGS...: runs `loom debug ARGS`, stdout in $tmp/out, stderr in $tmp/err.
run() {
  local want=$1
  shift
  set +e
  "$loom" debug "$@" > "$tmp/out" 2> "$tmp/err"
  local status=$?
  set -e
  if [ "$status" -ne "$want" ]; then
    cat "$tmp/out" "$tmp/err"
    fail "loom debug $*: exit $status, expected $want"
  fi
}

# Nothing to report on a healthy run: exit 0.
run 0 "$tmp/d" --watch "weight_overflow;gradient_exploding;tensor_overflow"
header="^loom debug: $tmp/d (rank 0): [0-9]* files; graph 0 iterations 0-2 (3); "
header+="graph 1 iterations 0$"
grep -q "$header" "$tmp/out" || fail "header: $(head -n 1 "$tmp/out")"
conditions="conditions: weight_overflow; gradient_exploding; tensor_overflow"
[ "$(sed -n 2p "$tmp/out")" = "$conditions" ] || fail "conditions line: $(sed -n 2p "$tmp/out")"
summary="^0 hits in [0-9]* files read, [0-9]* checks; not checked: 0 with NaN/Inf, "
summary+="0 without a previous iteration$"
tail -n 1 "$tmp/out" | grep -q "$summary" || fail "summary: $(tail -n 1 "$tmp/out")"
[ "$(grep -c '^watch:' "$tmp/out" || true)" -eq 0 ] || fail "hits on a healthy run"

# Every step changes fc3.bias (ratio > 0) and has a conv1.weight gradient (abs_mean > 0): the
# gradient at iterations 0-2, the change at 1 and 2 (iteration 0 has no previous one). The
# parameters are dumped before the step's launches and the gradients after them.
run 3 "$tmp/d" --watch 'weight_change_too_large(abs_mean_update_ratio_gt=0)@^fc3\.bias$' \
  --watch 'gradient_too_large(abs_mean_gt=0)@^conv1\.weight$'
grep '^watch:' "$tmp/out" | sed 's/: [a-z_]* [0-9.e+-]* > 0$//' > "$tmp/hits"
cat > "$tmp/want" <<'EOF'
watch: graph 0 iteration 0: gradient_too_large on conv1.weight
watch: graph 0 iteration 1: weight_change_too_large on fc3.bias
watch: graph 0 iteration 1: gradient_too_large on conv1.weight
watch: graph 0 iteration 2: weight_change_too_large on fc3.bias
watch: graph 0 iteration 2: gradient_too_large on conv1.weight
EOF
diff "$tmp/want" "$tmp/hits" || fail "hit lines"
change='^watch: graph 0 iteration 1: weight_change_too_large on fc3.bias: '
change+='abs_mean_update_ratio [0-9.e+-]* > 0$'
grep -q "$change" "$tmp/out" || fail "the change line's detail"
summary="^5 hits (gradient_too_large 3, weight_change_too_large 2) in 6 files read, 6 checks; "
summary+="not checked: 0 with NaN/Inf, 1 without a previous iteration$"
tail -n 1 "$tmp/out" | grep -q "$summary" || fail "summary: $(tail -n 1 "$tmp/out")"

# activation_range sees conv1's forward launch only (3 training iterations, 1 evaluation);
# tensor_range also its backward launches (Gradients/...).
run 3 "$tmp/d" --watch 'activation_range(max_min_gt=0)@/conv1/'
forward='^watch: .*activation_range on WithLossCell/_backbone/conv1/Conv2D-op[0-9]*:0: max_min'
[ "$(grep -c "$forward" "$tmp/out")" -eq 3 ] || fail "activation_range: $(cat "$tmp/out")"
eval_hit='^watch: graph 1 iteration 0: activation_range on EvalCell/_backbone/conv1/'
[ "$(grep -c "$eval_hit" "$tmp/out")" -eq 1 ] ||
  fail "activation_range in the evaluation: $(cat "$tmp/out")"
[ "$(grep -c '^watch:' "$tmp/out")" -eq 4 ] || fail "activation_range hits: $(cat "$tmp/out")"
run 3 "$tmp/d" --watch 'tensor_range(max_min_gt=0)@/conv1/'
grep -q '^watch: graph 0 iteration 0: tensor_range on Gradients/WithLossCell/_backbone/conv1/' \
  "$tmp/out" || fail "tensor_range on the backward: $(cat "$tmp/out")"

# Usage errors exit 2, bad input 1 (every loom command's convention); one message on stderr.
expect_error() {  # expect_error STATUS MESSAGE_REGEX ARGS...
  local status=$1 pattern=$2
  shift 2
  run "$status" "$@"
  grep -q -- "$pattern" "$tmp/err" || fail "loom debug $*: stderr $(cat "$tmp/err")"
}
expect_error 2 "^loom debug: watch spec 'gradient_vanishing', column 1: expected \
gradient_vanishing with at least one of abs_mean_lt" "$tmp/d" --watch gradient_vanishing
expect_error 2 "column 19: expected a condition (" \
  "$tmp/d" --watch 'weight_overflow;  wieght_overflow'
expect_error 2 "expected ')' closing the parameters of tensor_all_zero" \
  "$tmp/d" --watch 'tensor_all_zero(zero_percentage_ge=5'
expect_error 2 "^loom debug: watch spec '', column 1: expected at least one condition, got an \
empty spec" "$tmp/d" --watch ''
expect_error 1 "^loom debug: open_dump: expected a dump folder, got '$tmp/nothing' (no such \
file or folder)" "$tmp/nothing" --watch weight_overflow
expect_error 1 "^loom debug: open_dump: expected a folder rank_3 in '$tmp/d', got rank_0" \
  "$tmp/d" --rank 3 --watch weight_overflow
expect_error 2 "expected a rank (a non-negative integer) after --rank, got 'x'" \
  "$tmp/d" --rank x --watch weight_overflow
expect_error 2 "^loom debug: expected --watch SPEC" "$tmp/d"
expect_error 2 "^loom debug: expected one dump folder, got 2" "$tmp/d" "$tmp/d" \
  --watch weight_overflow
expect_error 2 "^loom debug: unknown option '--every'" "$tmp/d" --every 2 --watch weight_overflow
expect_error 2 "^loom debug: expected a value after --watch" "$tmp/d" --watch
expect_error 2 "^usage: loom debug DUMP_DIR --watch SPEC"
# A truncated .npy: the file named.
victim=$(find "$tmp/d/rank_0" -name 'Gradient.fc3.bias.*' | head -n 1)
printf 'x' > "$victim"
expect_error 1 "$victim" "$tmp/d" --watch 'gradient_exploding@fc3'

run 0 --help
grep -q "^Exit status (as every loom command): 0 checked, no hit; 3 hits found; 1 bad input" "$tmp/out" ||
  fail "--help"
set +e
"$loom" nonsense > /dev/null 2> "$tmp/err"
set -e
grep -q "ckpt, compare, debug, profile)" "$tmp/err" || fail "loom's command list: $(cat "$tmp/err")"
echo "watch_cli: exit 0 without hits, 3 with the expected hits, 2 on each usage error, 1 on bad input"
