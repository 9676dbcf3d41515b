#!/usr/bin/env bash
# Installs every Debian package loom needs to build, test and run its main job.
# Idempotent: when every package is already installed it does nothing (no apt-get update).
set -euo pipefail

packages=(
  # build tools
  build-essential cmake ninja-build pkg-config ccache
  # libraries named by the project
  libeigen3-dev libopenblas-dev libprotobuf-dev protobuf-compiler libabsl-dev
  libopenmpi-dev openmpi-bin libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev
  pybind11-dev python3-dev
  # DLPack's header (the Python package's tensor exchange with PyTorch and JAX); pytest runs the
  # Python package's tests
  libdlpack-dev python3-pytest
  # oneDNN: the Float32 convolutions' fastest path (backends/cpu/conv_dnnl.h)
  libdnnl-dev
  # ONNX's schema (onnx.proto of ONNX 1.12.0, compiled by protoc for ONNX export: onnx/)
  libonnx-dev
  # OpenSSL's libcrypto: SHA-256 of the trained weights (loom train --json); nlohmann-json: the
  # run's result record (train/run.h)
  libssl-dev nlohmann-json3-dev
  # test tools: FileCheck for .ir pass tests, clang + libFuzzer for the sanitizer build that also
  # holds the fuzz targets (libomp-dev: clang's OpenMP, which oneDNN's path there needs), venv for
  # the interoperability tests' Python environments (TensorBoard, MindSpore from PyPI)
  llvm-14-tools clang libclang-rt-14-dev libomp-dev python3-venv
  # iproute2: the several-hosts test's network namespaces and veth links (tests/parallel)
  iproute2
  # Doxygen: the C++ API reference (docs/api)
  doxygen
  # Graphviz: the .dot files of save_graphs rendered in the tests
  graphviz
  # NumPy for the tests that read dumps and .npy files as a user's script would; PyTorch and
  # protobuf's Python runtime for the reference runs that loom compare checks loom against
  # (debug/reference/torch_reference.py)
  python3-numpy python3-torch python3-protobuf
  # data for the main job
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
