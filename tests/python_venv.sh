# Sourced by the interoperability tests that need Python packages from PyPI (through
# tests/mindspore_venv.sh and tests/onnx_venv.sh, and by tests/summary/tensorboard_check.sh): makes sure the virtual environment $venv holds
# `pip install ${venv_spec[@]}` and passes `$venv/bin/python -c "$venv_check"`, creating it once
# and caching it. The sourcing script sets venv, venv_spec (an array) and venv_check. One creator
# at a time (a lock beside the venv), as ctest -j may run two such tests at once. When the
# environment cannot be made (no venv module, PyPI unreachable, no wheel for this Python) it
# prints "SKIPPED: why" and exits 77, which the caller's test registers as SKIP_RETURN_CODE; with
# LOOM_REQUIRE_INTEROP=1 (CI: .ci/run) it prints "FAILED: why" and exits 1 instead. Being
# sourced, its exit ends the calling script.

# venv_env_missing WHY: the environment cannot be made: skipped (77), or failed under
# LOOM_REQUIRE_INTEROP=1.
venv_env_missing() {
  if [ "${LOOM_REQUIRE_INTEROP:-}" = 1 ]; then
    echo "FAILED: $1 (LOOM_REQUIRE_INTEROP=1: interoperability tests must run)"
    exit 1
  fi
  echo "SKIPPED: $1"
  exit 77
}

venv_ready() { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$venv_check" >/dev/null 2>&1; }

mkdir -p "$(dirname "$venv")" || venv_env_missing "cannot create $(dirname "$venv")"
exec 9>"$venv.lock" || venv_env_missing "cannot create the lock $venv.lock"
flock 9
if ! venv_ready; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    venv_env_missing "python3 -m venv $venv failed (python3-venv missing?)"
  fi
  echo "creating $venv (pip install ${venv_spec[*]}, once)"
  "$venv/bin/pip" install --disable-pip-version-check -q --timeout 60 --retries 1 \
      "${venv_spec[@]}" 2>&1 | tail -5
  if ! venv_ready; then
    rm -rf "$venv"
    venv_env_missing "pip install ${venv_spec[*]} failed (PyPI unreachable, or no wheel for $(python3 -V 2>&1)?)"
  fi
fi
flock -u 9
