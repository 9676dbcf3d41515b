# Sourced by the MindSpore interoperability tests (tests/checkpoint/interop/mindspore_check.sh,
# tests/mindir/mindspore_check.sh): makes sure $venv holds MindSpore, creating it once and caching
# it in ${LOOM_MS_VENV:-$HOME/.cache/loom/venv-ms} (about 2.8 GB). $LOOM_MS_SPEC overrides the pip
# requirement (default mindspore==2.10.0, the version verified; numpy<2 because numpy 2 breaks
# MindSpore 2.10's C extension). One creator at a time (a lock beside the venv), as ctest -j may
# run both tests at once. When the environment cannot be made (no venv module, PyPI unreachable,
# no wheel for this Python) it prints "SKIPPED: why" and exits 77, which the caller's test
# registers as SKIP_RETURN_CODE; with LOOM_REQUIRE_INTEROP=1 (CI: .ci/run) it prints "FAILED: why"
# and exits 1 instead. Being sourced, its exit ends the calling script.
venv=${LOOM_MS_VENV:-${HOME:-/tmp}/.cache/loom/venv-ms}
spec=${LOOM_MS_SPEC:-mindspore==2.10.0}
export GLOG_v=3  # MindSpore's own log: errors only

# ms_env_missing WHY: the environment cannot be made: skipped (77), or failed under
# LOOM_REQUIRE_INTEROP=1.
ms_env_missing() {
  if [ "${LOOM_REQUIRE_INTEROP:-}" = 1 ]; then
    echo "FAILED: $1 (LOOM_REQUIRE_INTEROP=1: interoperability tests must run)"
    exit 1
  fi
  echo "SKIPPED: $1"
  exit 77
}

ms_ready() { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import mindspore, numpy" >/dev/null 2>&1; }

mkdir -p "$(dirname "$venv")" || ms_env_missing "cannot create $(dirname "$venv")"
exec 9>"$venv.lock" || ms_env_missing "cannot create the lock $venv.lock"
flock 9
if ! ms_ready; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    ms_env_missing "python3 -m venv $venv failed (python3-venv missing?)"
  fi
  echo "creating $venv (pip install $spec 'numpy<2', once)"
  "$venv/bin/pip" install --disable-pip-version-check -q --timeout 60 --retries 1 \
      "$spec" 'numpy<2' 2>&1 | tail -5
  if ! ms_ready; then
    rm -rf "$venv"
    ms_env_missing "pip install $spec failed (PyPI unreachable, or no wheel for $(python3 -V 2>&1)?)"
  fi
fi
flock -u 9
