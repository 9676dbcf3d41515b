#!/usr/bin/env bash
# mindspore_check.sh TOOL SCRIPT: MindIR interop with MindSpore (SCRIPT = mindir_check.py with
# TOOL = loom_mindir_interop: both ways; mindspore_ops_check.py with TOOL = loom: MindSpore 2.x
# op forms) in the cached MindSpore virtual environment of
# tests/mindspore_venv.sh (SKIPPED, exit 77, when it cannot be made; FAILED, exit 1, then under
# LOOM_REQUIRE_INTEROP=1).
set -u
tool=$1
script=$2
source "$(dirname "$0")/../mindspore_venv.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" "$script" "$tool" "$tmp"
rc=$?
# 77 tells ctest "skipped": only a missing environment may say it.
[ "$rc" -ne 77 ] || { echo "FAILED: $script exited with 77"; rc=1; }
exit "$rc"
