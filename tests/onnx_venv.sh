# Sourced by the ONNX interoperability tests (tests/onnx/onnx_check.sh): makes sure $venv holds
# onnx (its checker) and ONNX Runtime at the versions bench/infer_vs_ort.py pins (the two share
# the cache ${LOOM_ORT_VENV:-$HOME/.cache/loom/venv-ort}), through tests/python_venv.sh (skipped
# with exit 77 when it cannot be made; failed under LOOM_REQUIRE_INTEROP=1).
venv=${LOOM_ORT_VENV:-${HOME:-/tmp}/.cache/loom/venv-ort}
venv_spec=(onnxruntime==1.32.0 numpy==1.26.4 onnx==1.23.2)
venv_check="import onnxruntime, onnx, numpy
assert (onnxruntime.__version__, onnx.__version__, numpy.__version__) == ('1.32.0', '1.23.2', '1.26.4')"
source "$(dirname "${BASH_SOURCE[0]}")/python_venv.sh"
