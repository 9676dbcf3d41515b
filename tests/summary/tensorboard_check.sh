#!/usr/bin/env bash
# tensorboard_check.sh WRITER SCRIPT: writes an event file with WRITER (loom_summary_tb_writer) and
# reads it with TensorBoard's own EventAccumulator (SCRIPT = tensorboard_check.py), in a virtual
# environment created once and cached in $LOOM_TB_VENV (default ~/.cache/loom/venv-tb).
# When the environment cannot be made (no venv module, PyPI unreachable) it prints SKIPPED and
# exits 0.
set -u
writer=$1
script=$2
venv=${LOOM_TB_VENV:-${HOME:-/tmp}/.cache/loom/venv-tb}
mkdir -p "$(dirname "$venv")"

ready() { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import tensorboard" 2>/dev/null; }

# One creator at a time (ctest -j may run this beside another checkout's run).
exec 9>"$venv.lock"
flock 9
if ! ready; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    echo "SKIPPED: python3 -m venv failed (python3-venv missing?)"
    exit 0
  fi
  if ! "$venv/bin/pip" install --disable-pip-version-check -q --timeout 20 --retries 1 \
      'tensorboard>=2.12,<3' 2>&1 | tail -5; then
    :
  fi
  if ! ready; then
    rm -rf "$venv"
    echo "SKIPPED: pip install tensorboard failed (PyPI unreachable?)"
    exit 0
  fi
fi
flock -u 9

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$writer" "$tmp/run" || { echo "FAILED: $writer exited with $?"; exit 1; }
"$venv/bin/python" "$script" "$tmp/run"
