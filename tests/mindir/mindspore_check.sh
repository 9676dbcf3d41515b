#!/usr/bin/env bash
# mindspore_check.sh TOOL SCRIPT: MindIR interop both ways with MindSpore (SCRIPT =
# mindir_check.py, TOOL = loom_mindir_interop), in a virtual environment created once and cached
# in ${LOOM_MS_VENV:-$HOME/.cache/loom/venv-ms}, shared with the checkpoint interop test
# (tests/checkpoint/interop/mindspore_check.sh: the same path, lock and pip line; $LOOM_MS_SPEC
# overrides the requirement, default mindspore==2.10.0, the version verified). When the environment cannot be made (no venv module, PyPI
# unreachable, no MindSpore wheel for this Python) it prints SKIPPED and exits 0.
set -u
tool=$1
script=$2
venv=${LOOM_MS_VENV:-${HOME:-/tmp}/.cache/loom/venv-ms}
spec=${LOOM_MS_SPEC:-mindspore==2.10.0}
mkdir -p "$(dirname "$venv")"

ready() { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import mindspore, numpy" >/dev/null 2>&1; }

# One creator at a time (ctest -j, or the checkpoint interop test, may run beside this one).
exec 9>"$venv.lock"
flock 9
if ! ready; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    echo "SKIPPED: python3 -m venv failed (python3-venv missing?)"
    exit 0
  fi
  echo "creating $venv (pip install $spec 'numpy<2', once)"
  "$venv/bin/pip" install --disable-pip-version-check -q --timeout 60 --retries 1 \
      "$spec" "numpy<2" 2>&1 | tail -5
  if ! ready; then
    rm -rf "$venv"
    echo "SKIPPED: pip install $spec failed (PyPI unreachable, or no wheel for $(python3 -V)?)"
    exit 0
  fi
fi
flock -u 9

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# MindSpore logs warnings (no GPU plugin...) on stderr; keep only errors.
GLOG_v=3 "$venv/bin/python" "$script" "$tool" "$tmp"
