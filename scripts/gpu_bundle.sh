#!/usr/bin/env bash
# Packs what a GPU machine needs to run loom's GPU checks (scripts/gpu_check.sh) into .gpu_bundle/
# at the repository root (ignored through .git/info/exclude), to be carried with the working tree:
#
#   bin/loom.xz, bin/loom_gpu_tests.xz,    stripped, xz-compressed
#   bin/loom_bench_train.xz
#   lib/<soname>.xz                        the shared libraries the binaries load that an Ubuntu
#                                          24.04 machine without Debian's -dev packages may lack
#                                          (oneDNN, OpenBLAS, protobuf, Open MPI, libgomp...);
#                                          not glibc, libstdc++ / libgcc_s, CUDA, cuBLAS, cuDNN
#   data/fashion-mnist/*.xz                the four Fashion-MNIST files (raw IDX, xz)
#   cuda_symbols.txt                       the cuBLAS / cuDNN functions the binaries load at
#                                          their first call (backends/gpu/libraries.h; checked
#                                          against the machine's libraries there)
#   required_cpu_flags.txt                 the x86 extensions the build's -march assumes
#   MANIFEST.txt                           build, commit, sizes, SHA-256s
#
# The binaries come from build-gpu/, a Release build compiled for x86-64-v3 (AVX2, FMA) instead
# of this machine's -march=native (AVX-512 here: the GPU machine's CPU is unknown, and a binary
# using AVX-512 dies with SIGILL on an AVX2-only host such as an EPYC Milan). The first run
# configures and builds it in full (about 20 minutes on 2 cores), later runs rebuild what
# changed. --native takes build/ (the shared -march=native build, under .build.lock) instead.
#
#   bash scripts/gpu_bundle.sh [--native] [--no-build]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLE=$ROOT/.gpu_bundle
native=0
build=1
for a in "$@"; do
  case $a in
    --native) native=1 ;;
    --no-build) build=0 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
limit_mib=${GPU_BUNDLE_LIMIT_MIB:-55}
targets=(loom_cli loom_gpu_tests loom_bench_train)

# ---- build --------------------------------------------------------------------------------------
if ((native)); then
  BUILD=$ROOT/build
  march="native ($(gcc -march=native -Q --help=target 2>/dev/null | awk '$1=="-march=" {print $2}'))"
  if ((build)); then
    echo "== building ${targets[*]} in $BUILD"
    flock "$ROOT/.build.lock" ninja -C "$BUILD" "${targets[@]}"
  fi
else
  BUILD=$ROOT/build-gpu
  march=x86-64-v3
  if [[ ! -f $BUILD/build.ninja ]]; then
    echo "== configuring $BUILD (Release, -march=$march)"
    cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLOOM_NATIVE=OFF \
      -DCMAKE_CXX_FLAGS=-march=$march -DCMAKE_C_FLAGS=-march=$march >/dev/null
  fi
  # The bundle has no Python package: its libraries need not be position-independent.
  cmake -S "$ROOT" -B "$BUILD" -DLOOM_PYTHON=OFF >/dev/null
  if ((build)); then
    echo "== building ${targets[*]} in $BUILD"
    nice -n 10 ninja -C "$BUILD" "${targets[@]}"
  fi
fi
loom=$BUILD/bin/loom
tests=$BUILD/bin/loom_gpu_tests
bench=$BUILD/bin/loom_bench_train
for f in "$loom" "$tests" "$bench"; do
  [[ -x $f ]] || { echo "gpu_bundle.sh: $f is missing (a build without CUDA?)" >&2; exit 1; }
done
# cuBLAS and cuDNN are loaded at their first call, not linked: the CUDA backend shows in the
# sonames the binary holds.
if ! grep -q 'libcudnn\.so\.' "$loom"; then
  echo "gpu_bundle.sh: $loom has no CUDA backend (no libcudnn.so in it)" >&2
  exit 1
fi

# ---- bundle -------------------------------------------------------------------------------------
exclude=$(git -C "$ROOT" rev-parse --git-path info/exclude)
[[ $exclude = /* ]] || exclude=$ROOT/$exclude
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.gpu_bundle/' "$exclude" 2>/dev/null || echo '/.gpu_bundle/' >>"$exclude"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/data/fashion-mnist"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== binaries"
for f in "$loom" "$tests" "$bench"; do
  name=$(basename "$f")
  strip -o "$tmp/$name" "$f"
  xz -T0 -9 -c "$tmp/$name" >"$BUNDLE/bin/$name.xz"
done

echo "== shared libraries"
# Everything the binaries load except the C runtime, the C++ runtime (the machine's is newer) and
# CUDA's libraries (found on the machine: scripts/gpu_check.sh).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libutil\.so|libresolv|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libcublas|libcublasLt|libcudnn|libnvrtc|libnvJitLink)'
{ ldd "$loom"; ldd "$tests"; ldd "$bench"; } | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
while read -r soname path; do
  if [[ $soname =~ $skip ]]; then continue; fi
  xz -T0 -9 -c "$(readlink -f "$path")" >"$BUNDLE/lib/$soname.xz"
  printf '  %-32s %s\n' "$soname" "$(readlink -f "$path")"
done

echo "== Fashion-MNIST"
data_src=${FASHION_MNIST_DIR:-}
if [[ -z $data_src ]]; then
  data_src=$(dpkg -L dataset-fashion-mnist 2>/dev/null | grep '/train-images-idx3-ubyte.gz$' |
             head -1 | xargs -r dirname)
  [[ -n $data_src ]] || data_src=/usr/share/datasets/fashion-mnist
fi
# Recompressed once (xz -9 of the raw files: 4.5 MB less than the .gz), then from a cache.
cache=$BUILD/gpu_bundle_cache
mkdir -p "$cache"
for name in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
            t10k-labels-idx1-ubyte; do
  if [[ -f $data_src/$name.gz ]]; then
    src=$data_src/$name.gz
  elif [[ -f $data_src/$name ]]; then
    src=$data_src/$name
  else
    echo "gpu_bundle.sh: $data_src/$name(.gz) not found (set FASHION_MNIST_DIR)" >&2
    exit 1
  fi
  key="$(readlink -f "$src") $(stat -L -c %s-%Y "$src")"
  if [[ ! -f $cache/$name.xz || "$(cat "$cache/$name.key" 2>/dev/null)" != "$key" ]]; then
    if [[ $src == *.gz ]]; then gzip -dc "$src"; else cat "$src"; fi |
      xz -T0 -9 -c >"$cache/$name.xz"
    echo "$key" >"$cache/$name.key"
  fi
  cp "$cache/$name.xz" "$BUNDLE/data/fashion-mnist/$name.xz"
done

echo "== CUDA imports, CPU flags, manifest"
# The lists of backends/gpu/libraries.h through the preprocessor (cublasCreate is cublasCreate_v2).
cuda_include=$(sed -n 's/^LOOM_CUDNN_INCLUDE:PATH=//p' "$BUILD/CMakeCache.txt")
printf '#include "backends/gpu/libraries.h"\n#define LOOM_SYM(n) LOOM_SYM n\n%s\n' \
    'LOOM_CUBLAS_FUNCTIONS(LOOM_SYM) LOOM_CUBLASLT_FUNCTIONS(LOOM_SYM) LOOM_CUDNN_FUNCTIONS(LOOM_SYM)' |
  g++ -std=c++20 -E -P -I"$ROOT" -I"${cuda_include:-/usr/local/cuda/include}" -x c++ - |
  tail -1 | tr ' ' '\n' | grep -E '^(cudnn|cublas)' | sort -u >"$BUNDLE/cuda_symbols.txt"
if ((native)); then
  # x86-64-v4 (AVX-512 F/BW/CD/DQ/VL) is required; this machine's other AVX-512 and vector
  # extensions, which -march=native may have used somewhere, are listed with a '?'.
  {
    printf '%s\n' avx avx2 bmi1 bmi2 f16c fma movbe avx512f avx512bw avx512cd avx512dq avx512vl
    grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
      grep -E '^(avx512.*|vaes|vpclmulqdq|gfni)$' |
      grep -vxE 'avx512(f|bw|cd|dq|vl)' | sort -u | sed 's/^/?/'
  } >"$BUNDLE/required_cpu_flags.txt"
else
  printf '%s\n' avx avx2 bmi1 bmi2 f16c fma movbe >"$BUNDLE/required_cpu_flags.txt"
fi
{
  echo "loom GPU bundle, made $(date -u +%FT%TZ) on $(hostname)"
  echo "commit: $(git -C "$ROOT" rev-parse HEAD) (+ uncommitted changes: $(git -C "$ROOT" status --porcelain | wc -l) paths)"
  echo "build: $BUILD, -march=$march"
  echo "cuDNN at build: $(grep -E '#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' /usr/local/cuda/include/cudnn_version.h 2>/dev/null | awk '{printf "%s ", $3}')"
  echo "nvcc: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || true)"
  echo "sha256 (unstripped): $(sha256sum "$loom" | cut -c1-16) loom, $(sha256sum "$tests" | cut -c1-16) loom_gpu_tests"
  echo "files:"
  (cd "$BUNDLE" && find . -type f ! -name MANIFEST.txt -printf '  %-48p %10s\n' | sort)
} >"$BUNDLE/MANIFEST.txt"

# ---- smoke test: the bundled libraries alone (plus CUDA's) resolve every dependency -----------
echo "== smoke test"
mkdir -p "$tmp/unpacked/lib"
for f in "$BUNDLE"/lib/*.xz; do xz -dc "$f" >"$tmp/unpacked/lib/$(basename "$f" .xz)"; done
xz -dc "$BUNDLE/bin/loom.xz" >"$tmp/unpacked/loom" && chmod +x "$tmp/unpacked/loom"
cuda_dirs=$(ldconfig -p | awk '/libcu(blas|dnn)\.so/ {print $NF}' | xargs -r -n1 dirname | sort -u |
            paste -sd:)
if LD_LIBRARY_PATH=$tmp/unpacked/lib:$cuda_dirs ldd "$tmp/unpacked/loom" | grep 'not found'; then
  echo "gpu_bundle.sh: unresolved libraries (above)" >&2
  exit 1
fi
LD_LIBRARY_PATH=$tmp/unpacked/lib:$cuda_dirs "$tmp/unpacked/loom" info | sed 's/^/  /'

total=$(du -sb "$BUNDLE" | cut -f1)
tree=$(git -C "$ROOT" ls-files -co --exclude-standard -z | (cd "$ROOT" && xargs -0 du -cb 2>/dev/null) |
       tail -1 | cut -f1)
echo
cat "$BUNDLE/MANIFEST.txt"
awk -v b="$total" -v t="$tree" 'BEGIN { printf "bundle: %.1f MiB; working tree: %.1f MiB; together %.1f MiB of the 64 MiB a run carries\n", b / 1048576, t / 1048576, (b + t) / 1048576 }'
if ((total > limit_mib * 1048576)); then
  echo "gpu_bundle.sh: the bundle is over $limit_mib MiB" >&2
  exit 1
fi
