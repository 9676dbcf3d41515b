#!/usr/bin/env bash
# trace_check.py on Trace Event Format files written here: a well-formed object-form trace (nested
# X events, a pool-worker track, B/E, a counter, metadata, a global instant) passes with its
# summary; a streamed array with no closing "]" passes; a child ending within 1e-3 us past its
# parent passes. Each malformed file fails with exit 1 and exactly the expected message naming
# the first bad event; a missing argument is a usage error (2).
# Usage: trace_check_test.sh TRACE_CHECK_PY
set -euo pipefail
check_py=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect NAME STATUS MESSAGE: runs the checker on NAME.json (written by the caller); STATUS is the
# exit status; MESSAGE, for a failure, the whole of stderr.
expect() {
  local name=$1 want=$2 message=${3:-}
  set +e
  python3 "$check_py" "$name.json" > out.txt 2> err.txt
  local got=$?
  set -e
  if [ "$got" -ne "$want" ]; then
    cat out.txt err.txt >&2
    fail "$name: exit $got, expected $want"
  fi
  if [ "$want" -eq 1 ]; then
    [ "$(cat err.txt)" = "trace_check: $name.json: $message" ] ||
      fail "$name: stderr
  got:      $(cat err.txt)
  expected: trace_check: $name.json: $message"
  fi
}

# --- well-formed -----------------------------------------------------------------------------
cat > good.json <<'EOF'
{"displayTimeUnit": "ms", "otherData": {"model": "lenet"},
 "traceEvents": [
  {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0"}},
  {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "main"}},
  {"ph": "M", "name": "thread_name", "pid": 0, "tid": 2, "args": {"name": "pool worker 0"}},
  {"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": 2, "args": {"sort_index": 2}},
  {"ph": "X", "name": "ReLU-op4", "pid": 0, "tid": 1, "ts": 50, "dur": 5},
  {"ph": "X", "name": "step 1", "pid": 0, "tid": 1, "ts": 0, "dur": 100},
  {"ph": "X", "name": "LeNet5/conv1", "pid": 0, "tid": 1, "ts": 10, "dur": 40},
  {"ph": "X", "name": "Conv2D-op3", "pid": 0, "tid": 1, "ts": 10, "dur": 39.5,
   "cat": "forward", "args": {"op": "Conv2D"}},
  {"ph": "X", "name": "tail", "pid": 0, "tid": 1, "ts": 90, "dur": 10.0005},
  {"ph": "X", "name": "Conv2D-op3 share", "pid": 0, "tid": 2, "ts": 12, "dur": 30},
  {"ph": "B", "name": "data wait", "pid": 0, "tid": 3, "ts": 100},
  {"ph": "E", "pid": 0, "tid": 3, "ts": 120},
  {"ph": "C", "name": "memory", "pid": 0, "ts": 50, "args": {"plan": 1024, "rss": 2048}},
  {"ph": "C", "name": "memory", "pid": 0, "ts": 55, "args": {"plan": 512}},
  {"ph": "i", "name": "global mark", "s": "g", "ts": 60}
 ]}
EOF
expect good 0
[ "$(cat out.txt)" = 'good.json: 15 events (object form, displayTimeUnit ms)
  pid 0 "rank 0" tid 1 "main": 5 X (depth 3)
  pid 0 "rank 0" tid 2 "pool worker 0": 1 X (depth 1)
  pid 0 "rank 0" tid 3: 1 B/E
  pid 0 "rank 0" counter "memory": 2 samples
ok' ] || fail "good: summary
$(cat out.txt)"

# A streaming writer's array: no closing bracket, a trailing comma; string pids (MindSpore's).
printf '%s\n' '[{"ph":"X","name":"a","pid":"11000","tid":1,"ts":0,"dur":5},' \
  '{"ph":"X","name":"b","pid":"11000","tid":1,"ts":5,"dur":5},' > stream.json
expect stream 0
[ "$(sed -n 2p out.txt)" = "  pid 11000 tid 1: 2 X (depth 1)" ] || fail "stream: $(cat out.txt)"

# --- malformed: one line each, the exact message -----------------------------------------------
x='"ph": "X", "pid": 0, "tid": 1'
bad() {  # bad NAME 'EVENTS' MESSAGE
  printf '{"traceEvents": [%s]}\n' "$2" > "$1.json"
  expect "$1" 1 "$3"
}
bad no_ph '{"name": "a", "pid": 0, "tid": 1, "ts": 0}' \
  "event 0 (ph None, name 'a', pid 0, tid 1, ts 0): expected a phase 'ph' of the format, got None"
bad bad_ph '{"ph": "Q", "name": "a", "pid": 0, "tid": 1, "ts": 0}' \
  "event 0 (ph 'Q', name 'a', pid 0, tid 1, ts 0): expected a phase 'ph' of the format, got 'Q'"
bad no_pid '{"ph": "X", "name": "a", "tid": 1, "ts": 0, "dur": 1}' \
  "event 0 (ph 'X', name 'a', tid 1, ts 0): expected a 'pid'"
bad no_tid '{"ph": "X", "name": "a", "pid": 0, "ts": 0, "dur": 1}' \
  "event 0 (ph 'X', name 'a', pid 0, ts 0): expected a 'tid'"
bad no_name "{$x, \"ts\": 0, \"dur\": 1}" \
  "event 0 (ph 'X', pid 0, tid 1, ts 0): expected a string 'name', got None"
bad string_ts "{$x, \"name\": \"a\", \"ts\": \"12.5\", \"dur\": 1}" \
  "event 0 (ph 'X', name 'a', pid 0, tid 1, ts '12.5'): expected a finite number for 'ts' (microseconds), got '12.5'"
bad no_dur "{$x, \"name\": \"a\", \"ts\": 0}" \
  "event 0 (ph 'X', name 'a', pid 0, tid 1, ts 0): expected a duration 'dur' on an X event"
bad negative_dur "{$x, \"name\": \"a\", \"ts\": 0, \"dur\": -1}" \
  "event 0 (ph 'X', name 'a', pid 0, tid 1, ts 0): expected a non-negative number for 'dur', got -1"
bad unknown_metadata '{"ph": "M", "name": "thread_color", "pid": 0, "tid": 1, "args": {}}' \
  "event 0 (ph 'M', name 'thread_color', pid 0, tid 1): expected a metadata name of the format (process_name, process_labels, process_sort_index, thread_name, thread_sort_index, num_cpus), got 'thread_color'"
bad thread_name_no_arg '{"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"label": "main"}}' \
  "event 0 (ph 'M', name 'thread_name', pid 0, tid 1): expected args.name (a string), got None"
bad counter_no_number '{"ph": "C", "name": "memory", "pid": 0, "ts": 1, "args": {"plan": "1 KiB"}}' \
  "event 0 (ph 'C', name 'memory', pid 0, ts 1): expected at least one numeric value in 'args' of a counter, got {\"plan\": \"1 KiB\"}"
# The first bad event is named, not a later one.
bad first_of_two "{$x, \"name\": \"ok\", \"ts\": 0, \"dur\": 1}, {$x, \"name\": \"b\", \"ts\": 1}, {$x, \"ts\": 2, \"dur\": 1}" \
  "event 1 (ph 'X', name 'b', pid 0, tid 1, ts 1): expected a duration 'dur' on an X event"
# Overlap that is not nesting, reported however the file orders them.
bad overlap "{$x, \"name\": \"b\", \"ts\": 5, \"dur\": 10}, {$x, \"name\": \"a\", \"ts\": 0, \"dur\": 10}" \
  "event 0 (ph 'X', name 'b', pid 0, tid 1, ts 5): overlaps event 1 (ph 'X', name 'a', pid 0, tid 1, ts 0) without nesting: starts at 5 inside it, ends at 15, after its end at 10"
# Past the 1e-3 us tolerance.
bad past_tolerance "{$x, \"name\": \"step\", \"ts\": 0, \"dur\": 100}, {$x, \"name\": \"k\", \"ts\": 90, \"dur\": 10.01}" \
  "event 1 (ph 'X', name 'k', pid 0, tid 1, ts 90): overlaps event 0 (ph 'X', name 'step', pid 0, tid 1, ts 0) without nesting: starts at 90 inside it, ends at 100.01, after its end at 100"
# The same events on two threads do not interact.
printf '{"traceEvents": [%s]}\n' "{$x, \"name\": \"a\", \"ts\": 0, \"dur\": 10}, {\"ph\": \"X\", \"pid\": 0, \"tid\": 2, \"name\": \"b\", \"ts\": 5, \"dur\": 10}" > two_threads.json
expect two_threads 0
bad unclosed_b '{"ph": "B", "name": "a", "pid": 0, "tid": 1, "ts": 0}' \
  "event 0 (ph 'B', name 'a', pid 0, tid 1, ts 0): expected an E event to end it, got none before the end of the trace"
bad lone_e '{"ph": "E", "pid": 0, "tid": 1, "ts": 3}' \
  "event 0 (ph 'E', pid 0, tid 1, ts 3): expected an open B event on the track to end, got none"
bad backward_be '{"ph": "B", "name": "a", "pid": 0, "tid": 1, "ts": 5}, {"ph": "E", "pid": 0, "tid": 1, "ts": 4}' \
  "event 1 (ph 'E', pid 0, tid 1, ts 4): expected B/E timestamps not to move backward on the track, got 4 after 5"
bad e_wrong_name '{"ph": "B", "name": "a", "pid": 0, "tid": 1, "ts": 0}, {"ph": "E", "name": "b", "pid": 0, "tid": 1, "ts": 1}' \
  "event 1 (ph 'E', name 'b', pid 0, tid 1, ts 1): expected the name of the B event it ends, 'a'"

# --- containers --------------------------------------------------------------------------------
echo '{"events": []}' > no_events.json
expect no_events 1 "expected the key 'traceEvents' in the object, got keys ['events']"
echo '{"traceEvents": {}}' > events_object.json
expect events_object 1 "expected an array for 'traceEvents', got dict"
echo '{"traceEvents": [], "displayTimeUnit": "s"}' > bad_unit.json
expect bad_unit 1 "expected displayTimeUnit 'ms' or 'ns', got 's'"
echo '{"traceEvents": [' > truncated_object.json
expect truncated_object 1 "expected JSON, got a parse error: Expecting value: line 2 column 1 (char 18)"
echo '"trace"' > not_container.json
expect not_container 1 "expected a JSON object with traceEvents or an array, got str"
echo '{"traceEvents": [42]}' > not_object.json
expect not_object 1 "event 0: expected an object, got 42"

set +e
python3 "$check_py" > /dev/null 2>&1
[ $? -eq 2 ] || fail "no argument: expected exit 2"
set -e
echo "trace_check_test: all cases as expected"
