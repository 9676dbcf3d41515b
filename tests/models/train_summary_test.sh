#!/usr/bin/env bash
# `loom train --summary-dir` then `loom summary show`: a 1-epoch run on a small subset writes one
# event file with MindSpore's default collection (the loss and learning-rate scalars, histograms of
# the first five parameters, the step graph, an input image, the test accuracy and an hparams
# session ended successfully) and no gradient histograms or norms; `--summary-collect
# +gradients,-graph` adds the gradients and drops the graph; `loom summary show` lists them with
# exit status 0; summaries do not change the trained weights (same weights_sha256 as without); a
# bad collection name is a usage error (exit 2); a missing directory and a corrupt file are
# reported (exit 1).
# Usage: train_summary_test.sh path/to/loom
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small=(--train-samples 640 --test-samples 64 --epochs 1 --deterministic --json --threads 2)
fail() { echo "FAIL: $*" >&2; exit 1; }

"$loom" train lenet "${small[@]}" >"$tmp/plain.out" || fail "plain run"
"$loom" train lenet "${small[@]}" --summary-dir "$tmp/runs" --summary-freq 5 >"$tmp/sum.out" ||
  fail "summary run"
plain=$(tail -n 1 "$tmp/plain.out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["weights_sha256"])')
with=$(tail -n 1 "$tmp/sum.out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["weights_sha256"])')
[[ "$plain" == "$with" ]] || fail "summaries changed the weights: $plain vs $with"

status=0
"$loom" summary show "$tmp/runs" >"$tmp/show.out" 2>&1 || status=$?
cat "$tmp/show.out"
((status == 0)) || fail "loom summary show exited $status"
grep -q 'records, steps 1\.\.20$' "$tmp/show.out" || fail "records / steps line"
for line in 'scalar +loss +step 20 ' 'scalar +learning_rate +step 20 +0\.01$' \
            'histogram +conv1\.weight/auto +step 20 ' 'scalar +accuracy +step 20 ' \
            'scalar +eval_loss +step 20 ' 'image +input_data/auto +step 1 ' \
            'graph +\(graph_def\) +step 1 +[0-9]+ nodes' \
            'hparams +_hparams_/session_start_info .*model="lenet".*optimizer="Momentum"' \
            'hparams +_hparams_/session_end_info .*STATUS_SUCCESS'; do
  grep -Eq "^  $line" "$tmp/show.out" || fail "summary show: no line matching '$line'"
done
! grep -Eq '/grad |gradient_norm' "$tmp/show.out" || fail "default collection has gradients"

"$loom" train lenet "${small[@]}" --summary-dir "$tmp/grads" --summary-freq 5 \
  --summary-collect +gradients,-graph >"$tmp/grads.out" || fail "+gradients run"
with=$(tail -n 1 "$tmp/grads.out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["weights_sha256"])')
[[ "$plain" == "$with" ]] || fail "+gradients changed the weights: $plain vs $with"
"$loom" summary show "$tmp/grads" >"$tmp/grads_show.out" 2>&1 || fail "summary show of +gradients"
for line in 'histogram +conv1\.weight/grad +step 20 ' 'scalar +gradient_norm +step 20 ' \
            'histogram +conv1\.weight/auto +step 20 '; do
  grep -Eq "^  $line" "$tmp/grads_show.out" || { cat "$tmp/grads_show.out"; fail "+gradients: no line matching '$line'"; }
done
! grep -q 'graph_def' "$tmp/grads_show.out" || fail "-graph still wrote the graph"
status=0
"$loom" train lenet "${small[@]}" --summary-dir "$tmp/bad" --summary-collect +gradient \
  >/dev/null 2>"$tmp/err" || status=$?
((status == 2)) && grep -q "summary-collect" "$tmp/err" || { cat "$tmp/err"; fail "bad collection: exit $status"; }
[[ ! -e "$tmp/bad" ]] || fail "a refused run created its summary dir"

status=0
"$loom" summary show "$tmp/nonexistent" >/dev/null 2>"$tmp/err" || status=$?
((status == 1)) && grep -q "^loom summary: " "$tmp/err" || fail "missing dir: exit $status"
f=$(ls "$tmp"/runs/*tfevents*)
printf 'garbage' >>"$f"  # a truncated record at the end
status=0
"$loom" summary show "$tmp/runs" >"$tmp/bad.out" 2>&1 || status=$?
((status == 1)) && grep -q "^error: " "$tmp/bad.out" || { cat "$tmp/bad.out"; fail "corrupt file: exit $status"; }
status=0
"$loom" summary bogus >/dev/null 2>&1 || status=$?
((status == 2)) || fail "loom summary bogus: exit $status, expected 2"
echo "train_summary: ok"
