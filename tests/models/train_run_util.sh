# Sourced by the `loom train` end-to-end scripts of this folder (after they set $loom and $tmp):
#   fail MESSAGE...      prints FAIL: MESSAGE to stderr and exits 1
#   run NAME ARGS...     loom ARGS, stdout in $tmp/NAME.out, stderr in $tmp/NAME.err, the last
#                        line (the --json record) in $tmp/NAME.json; a non-zero exit fails
#   key NAME KEY         the value of KEY in run NAME's JSON record (None when absent)
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {
  local name=$1
  shift
  "$loom" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { cat "$tmp/$name.out" "$tmp/$name.err" >&2; fail "loom $* exited non-zero"; }
  tail -n 1 "$tmp/$name.out" >"$tmp/$name.json"
}
key() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' \
          "$tmp/$1.json" "$2"; }
