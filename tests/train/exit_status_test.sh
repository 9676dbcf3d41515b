#!/usr/bin/env bash
# The loom command's exit statuses: 2 for a usage error (no command, an unknown command, an
# argument `info` or `ops` does not take, an unknown option or a bad value of a command), 1 for a
# run-time error (a file that is missing or not what it should be), 0 otherwise; each error is
# one line on stderr naming what is wrong.
# Usage: exit_status_test.sh path/to/loom
set -uo pipefail
loom=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect STATUS TEXT ARGS...: loom ARGS exits STATUS and its stderr's first line contains TEXT.
expect() {
  local want=$1 text=$2
  shift 2
  "$loom" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [[ $got != "$want" ]] || { [[ -n $text ]] && ! head -n 1 "$tmp/err" | grep -qF -- "$text"; }
  then
    echo "FAIL: loom $*: exit $got (want $want), stderr: $(head -n 1 "$tmp/err")"
    failed=1
  fi
}

expect 2 "usage: loom <command>"
expect 2 "loom: expected a command (info, ops," nosuchcmd
expect 2 "loom info: expected no arguments, got '--x'" info --x
expect 2 "loom ops: expected no arguments, got 'extra'" ops extra
expect 2 "loom train: unknown option '--bogus'" train lenet --bogus
expect 2 "loom train: --epochs: expected an integer in [1, 100000], got 'abc'" train lenet --epochs abc
expect 2 "loom export: expected --output FILE.mindir" export lenet
expect 1 "load_checkpoint: cannot open '$tmp/none.ckpt'" eval lenet --ckpt "$tmp/none.ckpt"
expect 1 "MindIR $tmp/none.mindir: expected a readable file, got none" mindir show "$tmp/none.mindir"
expect 0 "" info
((failed == 0)) && echo "exit statuses: ok"
exit "$failed"
