#!/usr/bin/env bash
# onnx_check.sh LOOM: `loom export --format onnx` checked by onnx.checker and run by ONNX Runtime,
# in the cached venv of tests/onnx_venv.sh (SKIPPED, exit 77, when it cannot be made; FAILED,
# exit 1, then under LOOM_REQUIRE_INTEROP=1). See onnx_check.py.
set -u
loom=$1
source "$(dirname "$0")/../onnx_venv.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" "$(dirname "$0")/onnx_check.py" "$loom" "$tmp"
rc=$?
# 77 tells ctest "skipped": only a missing environment may say it.
[ "$rc" -ne 77 ] || { echo "FAILED: onnx_check.py exited with 77"; rc=1; }
exit "$rc"
