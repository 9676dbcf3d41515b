#!/usr/bin/env bash
# tensorboard_check.sh WRITER SCRIPT: writes an event file with WRITER (loom_summary_tb_writer) and
# reads it with TensorBoard's own EventAccumulator (SCRIPT = tensorboard_check.py), in a virtual
# environment created once and cached in $LOOM_TB_VENV (default ~/.cache/loom/venv-tb), with
# Pillow for the image's pixel check (tests/python_venv.sh: skipped, exit 77, when it cannot be
# made; failed under LOOM_REQUIRE_INTEROP=1).
set -u
writer=$1
script=$2
venv=${LOOM_TB_VENV:-${HOME:-/tmp}/.cache/loom/venv-tb}
venv_spec=('tensorboard>=2.12,<3' pillow)
venv_check="import tensorboard, PIL"
source "$(dirname "$0")/../python_venv.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$writer" "$tmp/run" || { rc=$?; echo "FAILED: $writer exited with $rc"; exit 1; }
"$venv/bin/python" "$script" "$tmp/run"
rc=$?
# 77 tells ctest "skipped": only a missing environment may say it.
[ "$rc" -ne 77 ] || { echo "FAILED: $script exited with 77"; rc=1; }
exit "$rc"
