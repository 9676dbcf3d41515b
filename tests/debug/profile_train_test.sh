#!/usr/bin/env bash
# `loom train --profile` as a user runs it:
#  - LeNet steps 2-8 (batches of 256) profiled with --profile-memory: every file written, the
#    timeline passes the Trace Event Format checker, the per-op totals equal the step trace's
#    launches and add up to the measured step time within 10%,
#    `loom profile show` reads the folder;
#  - with MPI ROOT given (the mpirun tests' launcher): two ranks, rank 1 slowed by
#    --step-delay-ms 20 --step-delay-rank 1, --profile-communication: `loom profile show` names
#    rank 1 the slowest, and rank 0's steps wait in the all-reduce.
# Usage: profile_train_test.sh LOOM TRACE_CHECK_PY [MPIRUN]
set -euo pipefail
loom=$1
check=$2
mpirun=${3:-}
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

# Batches of 256: the kernels then take most of a step even where the host's share grows (in the
# sanitizer build every allocation between launches unwinds its stack: with batches of 32 the
# host took 20% of a step there, against 3% in a release build).
"$loom" train lenet --epochs 1 --batch-size 256 --train-samples 2560 --test-samples 256 \
    --profile prof --profile-start-step 2 --profile-stop-step 8 --profile-memory > train.out 2>&1 \
  || { cat train.out; fail "loom train --profile"; }
grep -q '^profile: prof (7 steps; `loom profile show prof`)$' train.out || { cat train.out; fail "no profile line"; }
for f in profile_info_0.json cpu_op_type_info_0.csv cpu_op_detail_info_0.csv step_trace_0.csv \
         cpu_timeline_display_0.json memory_plan_0.csv; do
  [ -s "prof/$f" ] || fail "no $f"
done
"$py" "$check" prof/cpu_timeline_display_0.json > check.out || { cat check.out; fail "the timeline"; }
"$py" - prof <<'PY' || fail "the tables"
import csv, sys
d = sys.argv[1]
steps = list(csv.DictReader(open(d + "/step_trace_0.csv")))
assert [int(s["step"]) for s in steps] == list(range(2, 9)), [s["step"] for s in steps]
total = sum(float(s["total"]) - float(s["compile"]) for s in steps)
ops = sum(1000 * float(r["op_total_time(ms)"]) for r in csv.DictReader(open(d + "/cpu_op_detail_info_0.csv")))
types = sum(1000 * float(r["total_compute_time"]) for r in csv.DictReader(open(d + "/cpu_op_type_info_0.csv")))
assert abs(ops - types) <= 0.001 * types + 1, (ops, types)
# The per-op table and the step trace account the same launches: the ops' total is the steps'
# time less compile and host overhead, to the rounding of the printed figures.
kernels = sum(float(s["total"]) - float(s["compile"]) - float(s["host_overhead"]) for s in steps)
assert abs(ops - kernels) <= 0.001 * kernels + 10, (ops, kernels)
assert abs(ops - total) <= 0.10 * total, f"per-op total {ops:.0f} us against step time {total:.0f} us"
print(f"per-op total {ops:.0f} us, step time {total:.0f} us ({100 * ops / total:.1f}%)")
PY
"$loom" profile show prof > show.out 2>&1 || { cat show.out; fail "loom profile show"; }
grep -q '^top 10 nodes by time, rank 0' show.out || { cat show.out; fail "no top-10 table"; }

if [ -n "$mpirun" ]; then
  "$mpirun" -np 2 --oversubscribe --bind-to none --allow-run-as-root \
      "$loom" train lenet --epochs 1 --train-samples 640 --test-samples 64 --threads 1 \
      --profile mprof --profile-start-step 3 --profile-stop-step 8 --profile-communication \
      --step-delay-ms 20 --step-delay-rank 1 > mpi.out 2>&1 || { cat mpi.out; fail "mpirun"; }
  "$loom" profile show mprof > mshow.out 2>&1 || { cat mshow.out; fail "loom profile show (2 ranks)"; }
  grep -Eq '^slowest rank overall: rank 1 ' mshow.out || { cat mshow.out; fail "rank 1 not named the slowest"; }
  "$py" - mprof <<'PY' || fail "the waits"
import csv, statistics, sys
# Rank 0 waits in the all-reduce for the 20 ms rank 1 sleeps after each step: more than rank 1
# waits (on a quiet machine about 20 ms a step against 0.1 ms).
w = [statistics.median(float(s["communication_wait"]) for s in
                       csv.DictReader(open(f"{sys.argv[1]}/step_trace_{r}.csv"))) for r in (0, 1)]
assert w[0] > w[1], w
PY
fi
echo ok
