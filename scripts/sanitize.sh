#!/usr/bin/env bash
# scripts/sanitize.sh [BUILD_DIR] [SANITIZERS]: builds loom with sanitizers in a second build
# folder (default build-asan, address,undefined; a CPU-only build without the Python package
# and the benchmarks) and runs the unit tests there, leak checking on. Any sanitizer finding
# aborts its test, which fails. Suppressions: tests/sanitizers/lsan.supp (third-party libraries
# only). .ci/run calls it after the README's test command; docs/testing.md says what it covers.
#
#   scripts/sanitize.sh                      # AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/sanitize.sh build-tsan thread    # ThreadSanitizer, the threaded parts' own tests
#
# The address,undefined tree is built with clang 14 and holds the libFuzzer targets too
# (-DLOOM_FUZZ=ON): scripts/fuzz_smoke.sh runs them from the same folder, so CI compiles one
# sanitized tree, not two.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-asan}
san=${2:-address,undefined}
root=$PWD
if [[ $san == address,undefined ]]; then
  compilers=(-DLOOM_FUZZ=ON -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14)
else
  compilers=()
fi
cmake -S . -B "$dir" -G Ninja -DLOOM_SANITIZE="$san" -DLOOM_CUDA=OFF -DLOOM_PYTHON=OFF \
      -DLOOM_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Release "${compilers[@]}" >/dev/null
if [[ ${LOOM_CONFIGURE_ONLY:-0} == 1 ]]; then exit 0; fi
if [[ $san == thread ]]; then
  cmake --build "$dir" --target loom_ops_tests loom_data_tests loom_summary_tests parallel_driver
else
  cmake --build "$dir"
fi
# fast_unwind_on_malloc=0 and Open MPI's components kept loaded: allocation stacks through the
# uninstrumented Open MPI are complete and named, so the suppressions can match Open MPI's
# MPI_Init_thread and MPI_Finalize frames.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0
export LSAN_OPTIONS=suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0
export OMPI_MCA_mca_base_component_disable_dlclose=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
if [[ $san == thread ]]; then
  # The threaded parts, by their own tests: the thread pool, the reducer's communication thread,
  # the summary writer, the prefetching iterator.
  ctest --test-dir "$dir" --output-on-failure -j2 \
        -R '^ThreadPool\.|^Iterator\.|^SummaryRecord\.|^parallel/(match|overlap|deterministic)'
else
  # The unit tests, MPI ones included; not the slow ones (CI's time budget), nor the Python or
  # interoperability ones (other processes: Python, MindSpore, TensorBoard), nor the end-to-end
  # runs of the `loom` command and the examples: under the sanitizers they took 410 of the 1,335
  # test-seconds (2026-11-27), and the code they run is the unit tests' (the library's training
  # loop, checkpoints, summaries, data parallelism: tests/train, tests/checkpoint, tests/parallel).
  # The fuzz label: each fuzz target once over its committed seeds.
  ctest --test-dir "$dir" --output-on-failure -j2 -L 'unit|mpi|fuzz' -LE 'slow|python|interop' \
        -E '^(models/train_(cli|ckpt|mpi|summary|loss_scale|amp)|examples/|debug/(train_debug|compare_train))'
fi
