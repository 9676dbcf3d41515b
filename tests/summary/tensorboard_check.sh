#!/usr/bin/env bash
# tensorboard_check.sh WRITER SCRIPT: writes an event file with WRITER (loom_summary_tb_writer) and
# reads it with TensorBoard's own EventAccumulator (SCRIPT = tensorboard_check.py), in a virtual
# environment created once and cached in $LOOM_TB_VENV (default ~/.cache/loom/venv-tb), with
# Pillow for the image's pixel check.
# When the environment cannot be made (no venv module, PyPI unreachable) it prints "SKIPPED: why"
# and exits 77 (the test's SKIP_RETURN_CODE); with LOOM_REQUIRE_INTEROP=1 (CI: .ci/run) it prints
# "FAILED: why" and exits 1 instead.
set -u
writer=$1
script=$2
venv=${LOOM_TB_VENV:-${HOME:-/tmp}/.cache/loom/venv-tb}

# env_missing WHY: the environment cannot be made: skipped (77), or failed under
# LOOM_REQUIRE_INTEROP=1.
env_missing() {
  if [ "${LOOM_REQUIRE_INTEROP:-}" = 1 ]; then
    echo "FAILED: $1 (LOOM_REQUIRE_INTEROP=1: interoperability tests must run)"
    exit 1
  fi
  echo "SKIPPED: $1"
  exit 77
}

ready() { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import tensorboard, PIL" 2>/dev/null; }

# One creator at a time (ctest -j may run this beside another checkout's run).
mkdir -p "$(dirname "$venv")" || env_missing "cannot create $(dirname "$venv")"
exec 9>"$venv.lock" || env_missing "cannot create the lock $venv.lock"
flock 9
if ! ready; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    env_missing "python3 -m venv $venv failed (python3-venv missing?)"
  fi
  "$venv/bin/pip" install --disable-pip-version-check -q --timeout 20 --retries 1 \
      'tensorboard>=2.12,<3' pillow 2>&1 | tail -5
  if ! ready; then
    rm -rf "$venv"
    env_missing "pip install tensorboard pillow failed (PyPI unreachable?)"
  fi
fi
flock -u 9

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$writer" "$tmp/run" || { rc=$?; echo "FAILED: $writer exited with $rc"; exit 1; }
"$venv/bin/python" "$script" "$tmp/run"
rc=$?
# 77 tells ctest "skipped": only a missing environment may say it.
[ "$rc" -ne 77 ] || { echo "FAILED: $script exited with 77"; rc=1; }
exit "$rc"
