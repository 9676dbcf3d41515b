#!/usr/bin/env bash
# `mpirun -np 2 loom train lenet` end to end on a small subset of Fashion-MNIST (640 training
# images = 20 global batches of 32 per epoch, 64 test images), --deterministic, 1 thread per rank:
#  - one JSON line (rank 0's) with ranks 2 and rank_weights_sha256 = [weights_sha256] x 2 (every
#    rank ends with the same weights); one header and one done line;
#  - its final checkpoint equals a 1-process run with the same global batch (--batch-size 32:
#    2 ranks x 16 vs 1 x 32) to 1e-5 in every weight and optimizer state, and so does the test
#    accuracy (the test set split over the ranks, metrics summed);
#  - only rank 0 writes checkpoints; summaries in --summary-dir/rank_0 and rank_1;
#  - 1 + 1 epochs through --ckpt-dir / --resume auto under mpirun == 2 epochs straight (hash);
#  - errors: --batch-size not a multiple of the ranks; a rank failing alone (MPMD: rank 1 gets a
#    missing --data-dir) ends the job with its message, naming rank 1;
#  - rank 1 killed with SIGKILL mid-training: the job ends within 30 s, naming rank 1.
# Usage: train_mpi_test.sh path/to/loom path/to/mpiexec path/to/ckpt_allclose
# (the environment: OMPI_MCA_btl=self,vader, OMPI_MCA_mpi_yield_when_idle=1: tests/models/CMakeLists.txt)
set -euo pipefail
loom=$1
mpiexec=$2
allclose=$3
tmp=$(mktemp -d)
pid=
trap '[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
mpi=("$mpiexec" --oversubscribe --bind-to none)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
small=(--train-samples 640 --test-samples 64 --batch-size 32 --deterministic --json)

fail() { echo "FAIL: $*" >&2; exit 1; }

# run NAME CMD...: stdout in $tmp/NAME.out, stderr in $tmp/NAME.err, the last line in NAME.json.
run() {
  local name=$1
  shift
  "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { cat "$tmp/$name.out" "$tmp/$name.err" >&2; fail "$* exited non-zero"; }
  tail -n 1 "$tmp/$name.out" >"$tmp/$name.json"
}
key() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(" ".join(v) if isinstance(v, list) else v)' \
          "$tmp/$1.json" "$2"; }
close() { python3 -c 'import sys; a,b,t=map(float,sys.argv[1:]); sys.exit(abs(a-b)>t)' "$@"; }

# --- 1 process x 32 vs 2 ranks x 16.
run one "$loom" train lenet "${small[@]}" --epochs 1 --threads 2 --ckpt-dir "$tmp/one"
run two "${mpi[@]}" -np 2 "$loom" train lenet "${small[@]}" --epochs 1 --threads 1 \
  --ckpt-dir "$tmp/two" --summary-dir "$tmp/sum" --summary-freq 5
[[ $(grep -c '^{' "$tmp/two.out") == 1 ]] || { cat "$tmp/two.out" >&2; fail "expected one JSON line"; }
[[ $(grep -c '^loom train lenet:' "$tmp/two.out") == 1 ]] || fail "expected one header line"
[[ $(grep -c '^done:' "$tmp/two.out") == 1 ]] || fail "expected one done line"
grep -qF 'batches of 32 (2 ranks x 16)' "$tmp/two.out" || fail "header: no '2 ranks x 16'"
[[ $(key two ranks) == 2 && $(key one ranks) == 1 ]] || fail "ranks key"
sha=$(key two weights_sha256)
[[ $(key two rank_weights_sha256) == "$sha $sha" ]] ||
  fail "ranks' weights differ: $(key two rank_weights_sha256)"
"$allclose" "$tmp/one/lenet-1_20.ckpt" "$tmp/two/lenet-1_20.ckpt" 1e-5 ||
  fail "2 ranks x 16 != 1 x 32 (final checkpoints)"
close "$(key one test_accuracy)" "$(key two test_accuracy)" 1e-9 || fail "test accuracy"
close "$(key one test_loss)" "$(key two test_loss)" 1e-4 || fail "test loss"
close "$(key one train_loss)" "$(key two train_loss)" 1e-4 || fail "train loss"
[[ $(ls "$tmp/two") == "lenet-1_20.ckpt" ]] || { ls -l "$tmp/two" >&2; fail "checkpoints"; }
for r in 0 1; do
  ls "$tmp/sum/rank_$r" | grep -q 'events.out.tfevents' || fail "no event file in rank_$r"
  "$loom" summary show "$tmp/sum/rank_$r" >/dev/null || fail "summary show rank_$r"
done
echo "2 ranks x 16 == 1 x 32: ok ($sha)"

# --- resume under mpirun: 1 epoch (above, in $tmp/two) + 1 == 2 straight.
run straight "${mpi[@]}" -np 2 "$loom" train lenet "${small[@]}" --epochs 2 --threads 1
run resumed "${mpi[@]}" -np 2 "$loom" train lenet "${small[@]}" --epochs 2 --threads 1 \
  --ckpt-dir "$tmp/two" --resume auto
grep -qF "resumed from $tmp/two/lenet-1_20.ckpt: epoch 2, step 20" "$tmp/resumed.out" ||
  { cat "$tmp/resumed.out" >&2; fail "no 'resumed from' line"; }
want=$(key straight weights_sha256)
[[ $(key resumed weights_sha256) == "$want" ]] ||
  fail "resumed $(key resumed weights_sha256) != straight $want"
[[ $(key resumed rank_weights_sha256) == "$want $want" ]] || fail "resumed ranks differ"
echo "resume under mpirun: ok ($want)"

# --- errors.
if "${mpi[@]}" -np 2 "$loom" train lenet "${small[@]}" --batch-size 31 --threads 1 \
    >"$tmp/odd.out" 2>&1; then fail "--batch-size 31 on 2 ranks succeeded"; fi
grep -q 'global batch, expected a multiple of the 2 ranks' "$tmp/odd.out" ||
  { cat "$tmp/odd.out" >&2; fail "--batch-size 31: message"; }
start=$SECONDS
if timeout 60 "${mpi[@]}" -np 1 "$loom" train lenet "${small[@]}" --threads 1 : \
    -np 1 "$loom" train lenet "${small[@]}" --threads 1 --data-dir "$tmp/missing" \
    >"$tmp/one_fails.out" 2>&1; then fail "a job with a failing rank succeeded"; fi
grep -q "loom.parallel: rank 1: loom train: .*$tmp/missing" "$tmp/one_fails.out" ||
  { cat "$tmp/one_fails.out" >&2; fail "rank 1's error: message"; }
((SECONDS - start < 30)) || fail "a failing rank: the job took $((SECONDS - start)) s to end"
echo "errors: ok"

# --- kill -9 of rank 1 mid-training: the job ends within 30 s, naming rank 1.
"${mpi[@]}" -np 2 "$loom" train lenet "${small[@]}" --epochs 20 --threads 1 \
  --step-delay-ms 20 >"$tmp/killed.out" 2>&1 &
pid=$!
rank1=
for _ in $(seq 1 300); do  # up to 30 s for the ranks to start training
  if grep -q '^loom train lenet:' "$tmp/killed.out" 2>/dev/null; then
    for p in $(pgrep -P "$pid") $(for c in $(pgrep -P "$pid"); do pgrep -P "$c"; done); do
      if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
        rank1=$p
      fi
    done
    [[ -n "$rank1" ]] && break
  fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n "$rank1" ]] || { cat "$tmp/killed.out" >&2; fail "rank 1's process not found"; }
sleep 1
kill -9 "$rank1"
start=$SECONDS
status=0
for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the job still runs 30 s after rank 1 was killed"
wait "$pid" || status=$?
pid=
((status != 0)) || fail "the job exited 0 after rank 1 was killed"
grep -q '^done:' "$tmp/killed.out" && fail "the job finished before rank 1 was killed"
grep -Eq "rank 1 \(pid $rank1\) has exited|process rank 1 .*exited on signal 9" "$tmp/killed.out" ||
  { cat "$tmp/killed.out" >&2; fail "no message naming rank 1"; }
echo "kill -9 rank 1: ok (job ended after $((SECONDS - start)) s, status $status)"
echo PASS
