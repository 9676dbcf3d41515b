#!/usr/bin/env bash
# `pip install ./python` into a fresh virtual environment, as a user would (scikit-build-core and
# pybind11 from PyPI, loom's CMake build of the loom_python target), then the installed package
# imports, shares memory with NumPy, differentiates, and trains the LeNet quick start on 256
# images. The venv is made anew each run under $1 (the build folder); CMake builds in $1-pip. Where it cannot be made
# (no venv module, PyPI unreachable) the test is skipped (77), or fails under
# LOOM_REQUIRE_INTEROP=1 (CI), as the other tests that need PyPI.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$1/pip-venv
missing() {
  if [ "${LOOM_REQUIRE_INTEROP:-}" = 1 ]; then
    echo "FAILED: $1 (LOOM_REQUIRE_INTEROP=1: tests that need PyPI must run)"
    exit 1
  fi
  echo "SKIPPED: $1"
  exit 77
}
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv" >/dev/null 2>&1 || missing "python3 -m venv failed (python3-venv missing?)"
"$venv/bin/pip" download --disable-pip-version-check -q --no-deps -d "$venv/probe" \
  scikit-build-core >/dev/null 2>&1 || missing "PyPI unreachable (pip download scikit-build-core)"
echo "== pip install $root/python"
# The build folder is a sibling of $1 (build-pip beside build) and the compilers are $1's: with
# ccache's base_dir at the source root (CMakeLists.txt) the libraries' objects are the main
# build's, from the cache (ccache hashes the compiler's name too, and pip's environment would
# name x86_64-linux-gnu-g++).
export CMAKE_BUILD_PARALLEL_LEVEL=2
settings=(--config-settings=build-dir="$(cd "$1" && pwd)-pip")
for lang in C CXX; do
  compiler=$(sed -n "s/^CMAKE_${lang}_COMPILER:[A-Z]*=//p" "$1/CMakeCache.txt")
  [ -z "$compiler" ] || settings+=(--config-settings=cmake.define.CMAKE_${lang}_COMPILER="$compiler")
done
if ! "$venv/bin/pip" install --disable-pip-version-check -q "${settings[@]}" "$root/python" \
     >"$venv.log" 2>&1; then
  tail -30 "$venv.log"
  echo "FAILED: pip install ./python"
  exit 1
fi
cd "$venv" || exit 1  # not the source tree: the installed package must be the one imported
"$venv/bin/python" - "$root" <<'PY' || { echo "FAILED: the installed package"; exit 1; }
import sys
import numpy as np
import loom
from loom import ops
assert loom.__file__.startswith(sys.prefix), loom.__file__
a = np.arange(6, dtype=np.float32)
t = loom.Tensor(a)
assert t.data_ptr() == a.ctypes.data
g = loom.grad(lambda x: ops.ReduceSum(x * x, axis=(), keep_dims=False))(a)
np.testing.assert_array_equal(g.asnumpy(), 2 * a)
sys.path.insert(0, sys.argv[1] + "/python/examples")
import lenet_quickstart
sys.argv = ["lenet_quickstart", "--samples", "256"]
lenet_quickstart.main()
print("installed loom:", loom.__file__)
PY
echo "python_pip: passed"
