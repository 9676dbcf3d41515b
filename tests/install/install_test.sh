#!/usr/bin/env bash
# `cmake --install` into a fresh prefix, then a user's project built out of tree against it
# (find_package(loom) → loom::loom): it compiles with the installed headers only, links the
# installed libraries and their dependencies, and trains (tests/install/consumer). Also the
# installed `loom` tool's version and the pkg-config file. $1: the build folder.
set -euo pipefail
build=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
version=$("$work/prefix/bin/loom" info | head -1)
[ "$version" = "loom 0.2.0" ] || { echo "FAILED: installed loom info says '$version'"; exit 1; }
pc=$(PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig pkg-config --modversion loom)
[ "$pc" = "0.2.0" ] || { echo "FAILED: pkg-config --modversion loom says '$pc'"; exit 1; }
# Every installed header compiles on its own against the installed include folder, and none
# includes a private dependency's headers (oneDNN, OpenBLAS, MPI, OpenMP, CUDA, Eigen).
inc=$work/prefix/include/loom
leaks=$(grep -rlE '#include <(dnnl|oneapi/|cblas|openblas|mpi\.h|omp\.h|cuda|cudnn|cublas|Eigen)' \
          "$inc" || true)
[ -z "$leaks" ] || { echo "FAILED: installed headers include private dependencies: $leaks"; exit 1; }
n=0
while read -r h; do
  printf '#include "%s"\n' "$h" >"$work/one.cc"
  g++ -std=c++20 -fsyntax-only -I"$inc" "$work/one.cc" 2>"$work/one.err" ||
    { head -5 "$work/one.err"; echo "FAILED: $h does not compile on its own"; exit 1; }
  n=$((n + 1))
done < <(cd "$inc" && find . -name '*.h' ! -name '*.pb.h' | sed 's|^\./||' | sort)
echo "$n installed headers compile on their own"
# Only the public headers: none of the kernels', passes' or CLI driver's own.
for private in backends/cpu/gemm.h core/passes/pass.h train/run.h optim/update.h; do
  [ ! -e "$inc/$private" ] || { echo "FAILED: $private is installed"; exit 1; }
done
# The consumer sees the installed headers, not the source tree's.
cp -r "$root/tests/install/consumer" "$work/consumer"
cmake -S "$work/consumer" -B "$work/consumer/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; echo "FAILED: configuring the consumer"; exit 1; }
if grep -q -- "-I$root" "$work/consumer/build/build.ninja"; then
  echo "FAILED: the consumer's include path names the source tree"; exit 1
fi
cmake --build "$work/consumer/build" >"$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log"; echo "FAILED: building the consumer"; exit 1; }
"$work/consumer/build/consumer"
# The same program through pkg-config alone (static libraries: --static for their dependencies).
export PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig
# shellcheck disable=SC2046
g++ -O1 $(pkg-config --cflags loom) "$work/consumer/main.cc" -o "$work/consumer_pc" \
  $(pkg-config --static --libs loom) >"$work/pc.log" 2>&1 ||
  { tail -20 "$work/pc.log"; echo "FAILED: building the consumer with pkg-config"; exit 1; }
"$work/consumer_pc" | sed 's/^consumer:/consumer (pkg-config):/'
# The examples are standalone projects too: each builds against the prefix alone.
for dir in "$root"/examples/*/; do
  [ -f "$dir/CMakeLists.txt" ] || continue
  name=$(basename "$dir")
  cp -r "$dir" "$work/$name"
  if ! cmake -S "$work/$name" -B "$work/$name/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
       -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/$name.log" 2>&1 ||
     ! cmake --build "$work/$name/build" >>"$work/$name.log" 2>&1; then
    tail -30 "$work/$name.log"
    echo "FAILED: building examples/$name against the installed loom"
    exit 1
  fi
  exe=$(find "$work/$name/build" -maxdepth 1 -type f -perm -u+x -name 'loom_example_*' | head -1)
  # Run as built against the installed loom, checked as tests/examples checks the in-tree build.
  case $name in
    custom_cell)
      out=$("$exe" --samples 2000 --out "$work/cc_out") && [ -s "$work/cc_out/custom_cell.mindir" ]
      ;;
    custom_op) out=$("$exe") && grep -q "gradient check" <<<"$out" ;;
    finetune_mindir)
      mkdir -p "$work/ft_out"
      out=$("$exe" --samples 2000 --out "$work/ft_out") && [ -s "$work/ft_out/finetuned.ckpt" ]
      ;;
    grad) out=$("$exe") && grep -q "all gradients match the analytic derivatives" <<<"$out" ;;
    *) out=$("$exe") ;;
  esac || { echo "$out" | tail -20; echo "FAILED: examples/$name run against the installed loom"; exit 1; }
  echo "examples/$name: built and run against the installed loom"
done
# The Debian package of the same install (CPack).
(cd "$build" && cpack -G DEB --config CPackConfig.cmake -B "$work/deb" >"$work/cpack.log" 2>&1) ||
  { tail -20 "$work/cpack.log"; echo "FAILED: cpack -G DEB"; exit 1; }
deb=$(ls "$work"/deb/loom_0.2.0_*.deb)
contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/loom ./usr/bin/ir-opt ./usr/lib/cmake/loom/loomConfig.cmake \
         ./usr/lib/pkgconfig/loom.pc ./usr/include/loom/nn/cell.h ./usr/lib/libloom_nn.a; do
  grep -q " $f\$" <<<"$contents" || { echo "FAILED: $deb lacks $f"; exit 1; }
done
echo "$(basename "$deb"): $(dpkg-deb -f "$deb" Package Version | tr '\n' ' ')"
echo "install: passed"
