#!/usr/bin/env bash
# `loom profile show DIR` on profile folders written here in debug/profiler.cc's layout (the op
# tables in MindSpore's CPU profiler columns — times in ms, proportions a fraction of all ops'
# time — then loom's step_percent and rates; step_trace's interval to the next step's begin,
# empty for the last): on one rank, exit 0 with the header, the per-step rows, the average over
# the steps after the compiling one with each phase's % of the step, the op-type rows (GFLOP/s and
# % of peak where FLOPs are counted, else GB/s) and the top nodes with role, Cell and file:line;
# --top N and --csv; on two ranks where rank 1's steps have much more work than rank 0's, the
# slowest-rank rows and the last line name rank 1. Exit 1 with the file named for a missing
# folder, a rank with a file missing, a malformed CSV, an op table in the earlier layout; exit 2
# on usage errors.
# Usage: profile_show_test.sh LOOM
set -euo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# write_rank DIR RANK RANKS WAIT1 WAIT2 WAIT3: one rank's files; the steps' communication waits
# (µs) are given, the intervals are the same on every rank (the all-reduce synchronizes them).
# The op tables' times are ms; percent / total_proportion fractions of all ops' time (17.6 ms of
# types, 9.8 ms of nodes); step_percent % of the steps' time.
write_rank() {
  local dir=$1 r=$2 n=$3
  mkdir -p "$dir"
  cat > "$dir/profile_info_$r.json" <<EOF
{"version": 1, "rank": $r, "ranks": $n, "model": "lenet", "threads": 4, "start_step": 1,
 "stop_step": 3, "steps": [1, 2, 3], "peak_gflops": 256.0, "cpu": "Test CPU", "memory": true,
 "communication": false}
EOF
  cat > "$dir/cpu_op_type_info_$r.csv" <<'EOF'
op_type,type_occurrences,execution_frequency(per-step),total_compute_time,avg_time(ms),percent,step_percent,flops,gflops_per_s,peak_percent,bytes,gb_per_s
Conv2D,6,2,9.000000,1.500000,0.511364,30.5,2.7e9,300,117.2,1200000,
Conv2DBackpropFilter,6,2,8.000000,1.333333,0.454545,27.1,2.7e9,,,1200000,
ReLU,12,4,0.600000,0.050000,0.034091,2,0,,,4800000,8
EOF
  cat > "$dir/cpu_op_detail_info_$r.csv" <<'EOF'
op_side,op_type,op_name,full_op_name,op_occurrences,op_total_time(ms),op_avg_time(ms),total_proportion,subgraph,pid,step_percent,role,forward,cell,file,line,flops,gflops_per_s,peak_percent,bytes,gb_per_s
Host,ReLU,ReLU-op4,Default/relu-ReLU/ReLU-op4,6,0.300000,0.050000,0.030612,Default,4242,1,forward,,LeNet5/relu,lenet.py,48,0,,,2400000,8
Host,Conv2D,Conv2D-op3,"Default/conv1-Conv2d/Conv2D-op3",3,5.000000,1.666667,0.510204,Default,4242,17,forward,,LeNet5/conv1,lenet.py,41,1.5e9,300,117.2,600000,
Host,Conv2DBackpropFilter,Conv2DBackpropFilter-op20,Gradients/Default/conv1-Conv2d/Conv2DBackpropFilter-op20,3,4.500000,1.500000,0.459184,Default,4242,15.3,backward,Conv2D-op3,"LeNet5/conv1",lenet.py,41,1.5e9,333,130,600000,
EOF
  cat > "$dir/step_trace_$r.csv" <<EOF
step,start,interval,total,data_wait,compile,forward,backward,optimizer,communication,communication_wait,host_overhead,rss_mib,plan_peak_mib
1,0,252000,250000,1200,230000,5000,9000,800,1500,$4,4300,512,3
2,252000,20500,20000,300,0,5000,9000,800,1500,$5,2200,513,3
3,272500,,20200,310,0,5000,9100,800,1500,$6,2200,513,3
EOF
  cat > "$dir/memory_plan_$r.csv" <<'EOF'
buffer,owner,op_type,bytes,offset,first_launch,last_launch
b0,Conv2D-op3,Conv2D,1048576,0,0,3
b1,ReLU-op4,ReLU,524288,1048576,1,2
EOF
}

# show STATUS ARGS...: runs loom profile show, stdout in $tmp/out, stderr in $tmp/err.
show() {
  local want=$1
  shift
  set +e
  "$loom" profile "$@" > "$tmp/out" 2> "$tmp/err"
  local got=$?
  set -e
  if [ "$got" -ne "$want" ]; then
    cat "$tmp/out" "$tmp/err" >&2
    fail "profile $*: exit $got, expected $want"
  fi
}
has() {  # has LINE: $tmp/out holds exactly this line
  grep -qxF -- "$1" "$tmp/out" || { cat "$tmp/out" >&2; fail "no line: $1"; }
}
error_is() {  # error_is MESSAGE: the whole of stderr
  [ "$(cat "$tmp/err")" = "$1" ] || fail "stderr
  got:      $(cat "$tmp/err")
  expected: $1"
}

# --- one rank ------------------------------------------------------------------------------------
one=$tmp/one
write_rank "$one" 0 1 900 3000 3100
show 0 show "$one"
has "profile $one: model lenet, 1 rank, 4 threads"
has "steps profiled: 1-3 (3 steps; window 1-3)"
has "machine: Test CPU, fp32 FMA peak 256.0 GFLOP/s"
has "memory plan: 2 buffers in 1.50 MiB; communication: not recorded (--profile-communication)"
has "  step    total  data wait  compile  forward  backward  optimizer   comm  comm wait  host overhead"
has "     1  250.000      1.200  230.000    5.000     9.000      0.800  1.500      0.900          4.300"
has "     3   20.200      0.310    0.000    5.000     9.100      0.800  1.500      3.100          2.200"
has "average over 2 steps (2-3, after step 1, which compiled)"
has "  total                        20.100      100.0"
has "  backward                      9.050       45.0"
has "  communication wait            3.050       15.2"
has "  op type               calls  total ms  % of step  avg us  GFLOP/s  % peak  GB/s"
has "  Conv2D                    6     9.000       30.5  1500.0    300.0   117.2     -"
# No rate in the file: computed from the totals (2.7e9 FLOP / 8000 us = 337.5 GFLOP/s; of 256).
has "  Conv2DBackpropFilter      6     8.000       27.1  1333.3    337.5   131.8     -"
has "  ReLU                     12     0.600        2.0    50.0        -       -  8.00"
# The top nodes by time, whatever the file's order.
has "top 3 nodes by time, rank 0 (of 3)"
has "  1  Conv2D-op3                 Conv2D                    3     5.000       17.0  1666.7  forward                 LeNet5/conv1  lenet.py:41"
has "  2  Conv2DBackpropFilter-op20  Conv2DBackpropFilter      3     4.500       15.3  1500.0  backward of Conv2D-op3  LeNet5/conv1  lenet.py:41"
has "  3  ReLU-op4                   ReLU                      6     0.300        1.0    50.0  forward                 LeNet5/relu   lenet.py:48"
! grep -q "slowest rank" "$tmp/out" || fail "a slowest-rank section with one rank"

show 0 show "$one" --top 1
has "top 1 nodes by time, rank 0 (of 3)"
! grep -q "ReLU-op4" "$tmp/out" || fail "--top 1 lists more than one node"

show 0 show "$one" --csv --top 0
has "# op types, rank 0 (all profiled steps; GFLOP/s and % of peak where the type counts FLOPs, else GB/s)"
has "op type,calls,total ms,% of step,avg us,GFLOP/s,% peak,GB/s"
has "Conv2D,6,9.000,30.5,1500.0,300.0,117.2,"
has "ReLU,12,0.600,2.0,50.0,,,8.00"
has "1,250.000,1.200,230.000,5.000,9.000,0.800,1.500,0.900,4.300"
! grep -q "nodes by time" "$tmp/out" || fail "--top 0 lists nodes"
if grep -v '^#' "$tmp/out" | grep -q '^ '; then fail "--csv: an aligned line"; fi

# --- two ranks: rank 1 waits little in the all-reduce, so it has the most work --------------------
# Work = interval - communication wait; step 3, the last, has no interval: its data wait plus its
# total (0.310 + 20.200 ms) stand in.
two=$tmp/two
write_rank "$two" 0 2 12000 15000 16000
write_rank "$two" 1 2 100 200 300
show 0 show "$two"
has "profile $two: model lenet, 2 ranks (tables below: rank 0), 4 threads"
has "  step  slowest rank  slowest work ms  fastest rank  fastest work ms  spread ms  spread %"
has "     1             1          251.900             0          240.000     11.900       4.7"
has "     2             1           20.300             0            5.500     14.800      72.9"
has "     3             1           20.210             0            4.510     15.700      77.7"
has "  rank  steps  step ms  work ms  comm ms  comm wait ms  slowest in"
has "     0      2   20.100    5.005    1.500        15.500      0 of 3"
has "     1      2   20.100   20.255    1.500         0.250      3 of 3"
[ "$(tail -n 1 "$tmp/out")" = "slowest rank overall: rank 1 (mean work 20.255 ms; fastest: rank 0, 5.005 ms; spread 75.3%)" ] ||
  fail "last line: $(tail -n 1 "$tmp/out")"

show 0 show "$two" --rank 1
has "profile $two: model lenet, 2 ranks (tables below: rank 1), 4 threads"
has "step breakdown, rank 1 (ms; a step runs from its begin to its end, the data wait before it excluded)"

# --- bad input: exit 1, the file named; usage: exit 2 --------------------------------------------------------
show 1 show "$tmp/none"
error_is "loom profile: profile '$tmp/none': expected a profile folder (loom train --profile DIR writes one), got nothing at that path"
rm "$two/step_trace_1.csv"
show 1 show "$two"
error_is "loom profile: profile '$two/step_trace_1.csv': expected this file of rank 1 beside profile_info_1.json, got no such file"
printf 'step,start\n1,0\n' > "$one/step_trace_0.csv"
show 1 show "$one"
error_is "loom profile: profile '$one/step_trace_0.csv': line 1: expected the column 'interval' in the header (step,start,interval,total,data_wait,compile,forward,backward,optimizer,communication,communication_wait,host_overhead,rss_mib,plan_peak_mib), got 'step,start'"
write_rank "$one" 0 1 900 3000 3100
# An op-type table in the earlier layout (µs, proportion in % of the steps): refused by its header.
printf 'op_type,type_occurrences,total_time,proportion,avg_time,flops,gflops_per_s,peak_percent,bytes,gb_per_s\nReLU,12,600,2,50,0,,,4800000,8\n' > "$one/cpu_op_type_info_0.csv"
show 1 show "$one"
error_is "loom profile: profile '$one/cpu_op_type_info_0.csv': line 1: expected the column 'execution_frequency(per-step)' in the header (op_type,type_occurrences,execution_frequency(per-step),total_compute_time,avg_time(ms),percent,step_percent,flops,gflops_per_s,peak_percent,bytes,gb_per_s), got 'op_type,type_occurrences,total_time,proportion,avg_time,flops,gflops_per_s,peak_percent,bytes,gb_per_s'"
write_rank "$one" 0 1 900 3000 3100
show 1 show "$one" --rank 1
error_is "loom profile: profile '$one': expected a rank from 0 to 0, got 1"

# --- usage -------------------------------------------------------------------------------------
show 2 show
error_is "loom profile: expected one profile folder, got 0
(see \`loom profile --help\`)"
show 2 show "$one" --top x
error_is "loom profile: expected a non-negative integer after --top, got 'x'
(see \`loom profile --help\`)"
show 2 show "$one" --bogus
error_is "loom profile: unknown option '--bogus'
(see \`loom profile --help\`)"
show 2 list "$one"
error_is "loom profile: expected \`loom profile show DIR\`, got 'list'
(see \`loom profile --help\`)"
show 2
show 0 --help
grep -q "^usage: loom profile show DIR \[--rank R\] \[--top N\] \[--csv\]$" "$tmp/out" || fail "--help"
echo "profile_show_test: all cases as expected"
