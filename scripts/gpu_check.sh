#!/usr/bin/env bash
# loom's GPU checks on a GPU machine, from the bundle scripts/gpu_bundle.sh made (.gpu_bundle/,
# carried with the working tree). Run from the repository root:
#
#   bash scripts/gpu_check.sh            # everything to $OUT/gpu_check.log (and the terminal)
#
# Steps, each under its own timeout and all inside LOOM_GPU_CHECK_BUDGET seconds (default 360):
# a failing step does not stop the next ones, and a summary ends the log.
#   1. unpack the bundle to $LOOM_GPU_WORK (default /tmp/loom_gpu): binaries, libraries,
#      Fashion-MNIST (also linked at /usr/share/datasets/fashion-mnist when that is free);
#   2. find cuBLAS / cuDNN (/usr/local/cuda*, the Python packages nvidia-* of python3 and
#      /opt/torch/.venv, torch/lib, ldconfig) and check they export what loom imports; loom runs
#      through a wrapper that sets its LD_LIBRARY_PATH (python3 keeps the machine's own);
#   3. the machine: CPU and its vector extensions against the build's, nvidia-smi, `loom info`;
#   4. loom_gpu_tests: the CUDA kernels against the CPU kernels, coverage, determinism;
#   5. tests/gpu/train_gpu_test.sh: LeNet-5 one epoch on the GPU against the CPU;
#   6. bench/gpu_vs_torch.py: training images/s of LeNet-5 (batch 32, 256), ResNet-18 (256) and
#      ResNet-50 (128; both 32x32), then ResNet-50 at 224x224 (loom on fake-imagenet), loom
#      against PyTorch;
#      peak device memory of both, loom's compile time (at most 150 s, less when the budget
#      is short: 100 s are kept for the steps after it);
#   7. cuda_graphs: `loom train lenet --device GPU --epochs 1` with LOOM_CUDA_GRAPHS=0 and
#      without, train_images_per_s of both (what replaying the step as a CUDA graph gains);
#      recompute: ResNet-18 with and without the recompute pass (the same weights), and the
#      step of ResNet-18 b256 and ResNet-50 224x224 b128 with and without it (speed, memory);
#      combine: LeNet with and without the combine_updates pass (the same weights; the step's
#      images/s at batch 32 and 256);
#   8. profile_r18: ResNet-18 batch 256, steps 3-5 profiled (--profile), `loom profile show`;
#   9. profiles: LeNet-5 batch 256 and ResNet-50 224x224 batch 128 profiled with the memory plan;
#  10. kernels_lenet (run after the benchmark): the kernels of LeNet's step at batch 256 and 32,
#      loom's and PyTorch's CUDA graph, each kernel's time per step: Nsight Systems where it is
#      installed, else CUPTI (bench/cupti_kernels.cc, compiled there; skipped, 77, with neither);
#      gemm_search: LeNet's step with cuBLASLt's candidates timed (the default) and with its
#      heuristic's first (LOOM_CUBLASLT_SEARCH=0);
#  11. modes: LeNet in PyNative on the GPU and the CPU, and two ranks sharing the GPU (mpirun);
#  12. amp: mixed precision, LeNet-5 and ResNet-18 trained LOOM_GPU_AMP_EPOCHS epochs (default 3)
#      in Float32 and at O2 bfloat16, test accuracies side by side (the bar: within 0.5%), then
#      ResNet-18's step at batch 256 in Float32, at O2 bfloat16 with the 16-bit kernels and
#      with LOOM_CUDA_HALF_KERNELS=0 (the Float32 fallback), in turn, and the Float32 and O2
#      steps profiled (the top ops);
#  13. amp_bench: bench/gpu_vs_torch.py --amp O2:bfloat16 (loom and PyTorch's torch.autocast,
#      each against its Float32 step; LOOM_GPU_CHECK_AMP_BENCH gives the configurations, default
#      resnet18:256 resnet50_224:128).
# LOOM_GPU_CHECK_STEPS="kernel_check profile_r18" runs only the steps named there (after the
# unpacking, library and machine steps, which always run); LOOM_GPU_CHECK_BENCH="lenet:256
# resnet50_224:128" gives the benchmark its configurations (bench/gpu_vs_torch.py --configs) and
# LOOM_GPU_CHECK_BENCH_BUDGET its time (at most 150 s by default).
# Files under $OUT: gpu_check.log, kernel_check.xml, bench.json, cuda_graphs_{0,1}.out,
# prof_r18/, prof_lenet256/, prof_r50_224/ (the profiles).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLE=${LOOM_GPU_BUNDLE:-$ROOT/.gpu_bundle}
WORK=${LOOM_GPU_WORK:-/tmp/loom_gpu}
OUT=${OUT:-/tmp/loom_gpu_out}
BUDGET=${LOOM_GPU_CHECK_BUDGET:-360}
mkdir -p "$OUT"

SUMMARY=()
failed=0
note() { SUMMARY+=("$1"); }

# step NAME TIMEOUT COMMAND...: runs COMMAND under `timeout` (cut to what the budget has left),
# records passed / skipped (77) / FAILED / TIMED OUT and the seconds it took.
step() {
  local name=$1 limit=$2
  shift 2
  case "$name" in
    unpack | libraries | machine | loom_info) ;;
    *)
      if [[ -n "${LOOM_GPU_CHECK_STEPS:-}" && " $LOOM_GPU_CHECK_STEPS " != *" $name "* ]]; then
        note "$(printf '%-16s %-20s' "$name" "not asked for")"
        return
      fi
      ;;
  esac
  local left=$((BUDGET - SECONDS - 5))
  if ((left < 20)); then
    note "$(printf '%-16s %-20s' "$name" "NOT RUN (budget)")"
    echo "==== [$name] not run: ${left}s left of the ${BUDGET}s budget"
    failed=1
    return
  fi
  ((limit > left)) && limit=$left
  echo
  echo "==== [$name] $(date -u +%T) timeout ${limit}s: $*"
  local t0=$SECONDS rc status
  if declare -F "$1" >/dev/null; then
    timeout -k 10 "$limit" bash -c "$*"  # a function of this script (exported below)
  else
    timeout -k 10 "$limit" "$@"
  fi
  rc=$?
  case $rc in
    0) status=passed ;;
    77) status=skipped ;;
    124|137) status="TIMED OUT"; failed=1 ;;
    *) status="FAILED (rc $rc)"; failed=1 ;;
  esac
  note "$(printf '%-16s %-20s %4ds' "$name" "$status" $((SECONDS - t0)))"
  echo "==== [$name] $status after $((SECONDS - t0))s"
}

# dexz SRC DST: xz, else Python's lzma (a minimal image may lack xz-utils).
dexz() {
  if command -v xz >/dev/null 2>&1; then
    xz -dc "$1" >"$2"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"), 1 << 20)' "$1" "$2"
  fi
}

unpack() {
  echo "== unpacking $BUNDLE to $WORK"
  [[ -d $BUNDLE ]] || { echo "no bundle at $BUNDLE (carry .gpu_bundle)"; return 1; }
  rm -rf "$WORK"
  mkdir -p "$WORK/bin" "$WORK/lib" "$WORK/fashion-mnist"
  local f
  for f in "$BUNDLE"/bin/*.xz; do
    dexz "$f" "$WORK/bin/$(basename "$f" .xz)" && chmod +x "$WORK/bin/$(basename "$f" .xz)" ||
      return 1
  done
  for f in "$BUNDLE"/lib/*.xz; do dexz "$f" "$WORK/lib/$(basename "$f" .xz)" || return 1; done
  for f in "$BUNDLE"/data/fashion-mnist/*.xz; do
    dexz "$f" "$WORK/fashion-mnist/$(basename "$f" .xz)" || return 1
  done
  cat "$BUNDLE/MANIFEST.txt" 2>/dev/null | head -6
  # loom's default data directory, when nothing holds it yet (root on the GPU machine).
  local std=/usr/share/datasets/fashion-mnist
  if [[ ! -e $std ]] && mkdir -p /usr/share/datasets 2>/dev/null; then
    ln -s "$WORK/fashion-mnist" "$std" && echo "linked $std -> $WORK/fashion-mnist"
  fi
  ls -la "$WORK/bin" "$WORK/fashion-mnist"
}

# Directories that may hold cuBLAS / cuDNN, most likely first.
cuda_lib_dirs() {
  local d py
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/local/cuda-*/lib64 /usr/local/cuda-*/targets/x86_64-linux/lib; do
    [[ -d $d ]] && echo "$d"
  done
  for py in python3 /opt/torch/.venv/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || [[ -x $py ]] || continue
    "$py" - <<'EOF' 2>/dev/null
import glob, os, site
roots = set()
try:
    import nvidia
    roots.update(nvidia.__path__)
except Exception:
    pass
for p in site.getsitepackages():
    roots.add(os.path.join(p, "nvidia"))
for r in sorted(roots):
    for d in sorted(glob.glob(os.path.join(r, "*", "lib")) + glob.glob(os.path.join(r, "*", "lib64"))):
        print(d)
try:
    import torch
    print(os.path.join(os.path.dirname(torch.__file__), "lib"))
except Exception:
    pass
EOF
  done
  for d in /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib; do [[ -d $d ]] && echo "$d"; done
  ldconfig -p 2>/dev/null | awk '/libcu(blas|dnn)/ {print $NF}' | xargs -r -n1 dirname
}

# Writes the wrappers $WORK/loom, $WORK/loom_gpu_tests and $WORK/loom_bench_train, which run the binaries with the
# bundle's libraries and CUDA's on LD_LIBRARY_PATH.
find_cuda() {
  local CUDA_LD=""
  local want=(libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnvrtc.so.13 libnvJitLink.so.13)
  local dirs soname d found
  mapfile -t dirs < <(cuda_lib_dirs | while read -r d; do readlink -f "$d"; done | awk '!seen[$0]++')
  echo "== candidate library directories:"
  printf '  %s\n' "${dirs[@]}"
  for soname in "${want[@]}"; do
    found=""
    for d in "${dirs[@]}"; do
      if [[ -e $d/$soname ]]; then found=$d; break; fi
    done
    if [[ -n $found ]]; then
      echo "  $soname: $found"
      [[ ":$CUDA_LD:" == *":$found:"* ]] || CUDA_LD=${CUDA_LD:+$CUDA_LD:}$found
    else
      echo "  $soname: NOT FOUND"
    fi
    # every copy, for the record
    for d in "${dirs[@]}"; do
      [[ -e $d/$soname && $d != "$found" ]] && echo "    (also $d/$soname)"
    done
  done
  # The driver's libcuda.so.1 (CUDA's runtime, linked statically, opens it): where the loader
  # does not know it, its directory goes last.
  if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    found=""
    for d in ${LD_LIBRARY_PATH//:/ } /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib64 \
             /usr/lib/x86_64-linux-gnu; do
      if [[ -e $d/libcuda.so.1 ]]; then found=$d; break; fi
    done
    echo "  libcuda.so.1: not in the loader's cache; ${found:-NOT FOUND}"
    [[ -n $found ]] && CUDA_LD=${CUDA_LD:+$CUDA_LD:}$found
  else
    echo "  libcuda.so.1: $(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')"
  fi
  echo "loom's LD_LIBRARY_PATH: $WORK/lib:$CUDA_LD"
  # loom runs through this wrapper; python3 and the rest keep the machine's own libraries.
  local b
  for b in loom loom_gpu_tests loom_bench_train; do
    [[ -x $WORK/bin/$b ]] || continue
    cat >"$WORK/$b" <<EOF
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$WORK/lib:$CUDA_LD\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$WORK/bin/$b" "\$@"
EOF
    chmod +x "$WORK/$b"
  done
  echo "== unresolved libraries:"
  LD_LIBRARY_PATH="$WORK/lib:$CUDA_LD" ldd "$WORK/bin/loom" "$WORK/bin/loom_gpu_tests" |
    grep -E 'not found|^/' || true
  # The functions loom imports from cuBLAS / cuDNN (it was built against newer headers than a
  # pip cuDNN may be): a missing one fails at its first call.
  echo "== cuBLAS / cuDNN versions and imported functions:"
  python3 - "$BUNDLE/cuda_symbols.txt" "$WORK/lib:$CUDA_LD" <<'EOF'
import ctypes, os, sys
syms = [s.strip() for s in open(sys.argv[1]) if s.strip()]
dirs = [d for d in sys.argv[2].split(":") if d]
libs = {}
for soname in ("libcublasLt.so.13", "libcublas.so.13", "libcudnn.so.9"):
    for d in dirs:
        p = os.path.join(d, soname)
        if os.path.exists(p):
            try:
                libs[soname] = ctypes.CDLL(p)
                print(f"  loaded {p}")
            except OSError as e:
                print(f"  could not load {p}: {e}")
            break
if "libcudnn.so.9" in libs:
    print("  cuDNN version", libs["libcudnn.so.9"].cudnnGetVersion())
if "libcublasLt.so.13" in libs:
    print("  cuBLASLt version", libs["libcublasLt.so.13"].cublasLtGetVersion())
missing = [s for s in syms if not any(hasattr(l, s) for l in libs.values())]
print(f"  {len(syms) - len(missing)} of {len(syms)} imported functions found" +
      (": MISSING " + " ".join(missing) if missing else ""))
sys.exit(1 if missing or len(libs) < 3 else 0)
EOF
}

machine() {
  echo "== machine"
  uname -a
  grep -m1 'model name' /proc/cpuinfo
  echo "cores: $(nproc)"
  local flags missing="" optional="" f
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  while read -r f; do
    [[ -z $f ]] && continue
    if [[ $f == \?* ]]; then
      [[ $flags == *" ${f#?} "* ]] || optional+=" ${f#?}"
    else
      [[ $flags == *" $f "* ]] || missing+=" $f"
    fi
  done <"$BUNDLE/required_cpu_flags.txt"
  if [[ -n $missing ]]; then
    echo "WARNING: this CPU lacks$missing, which the bundle's binaries were compiled for:" \
         "expect SIGILL (rebuild the bundle without --native)"
  else
    echo "CPU extensions the build needs: present${optional:+ (not:$optional, maybe unused)}"
  fi
  nvidia-smi || echo "nvidia-smi failed"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv 2>/dev/null || true
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN",
torch.backends.cudnn.version(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' ||
    true
}

# train_images_per_s of LeNet one epoch with the step launched kernel by kernel
# (LOOM_CUDA_GRAPHS=0) and replayed as a CUDA graph (the default).
cuda_graphs() {
  local mode
  for mode in 0 1; do
    if [[ $mode == 0 ]]; then
      echo "== LOOM_CUDA_GRAPHS=0 loom train lenet --device GPU --epochs 1 --json"
      LOOM_CUDA_GRAPHS=0 "$WORK/loom" train lenet --device GPU --epochs 1 --json \
        --data-dir "$WORK/fashion-mnist" >"$OUT/cuda_graphs_$mode.out" 2>&1
    else
      echo "== loom train lenet --device GPU --epochs 1 --json (CUDA graphs)"
      env -u LOOM_CUDA_GRAPHS "$WORK/loom" train lenet --device GPU --epochs 1 --json \
        --data-dir "$WORK/fashion-mnist" >"$OUT/cuda_graphs_$mode.out" 2>&1
    fi
    echo "exit status $?; last lines:"
    tail -n 3 "$OUT/cuda_graphs_$mode.out"
  done
  python3 - "$OUT/cuda_graphs_0.out" "$OUT/cuda_graphs_1.out" <<'EOF'
import json, sys
rates = []
for path, name in zip(sys.argv[1:], ("LOOM_CUDA_GRAPHS=0 (launch by launch)",
                                     "CUDA graphs (default)")):
    lines = [l for l in open(path, errors="replace") if l.startswith("{")]
    try:
        r = json.loads(lines[-1])
        rates.append(r["train_images_per_s"])
        loop = 60000 / r["train_loop_s"] if r.get("train_loop_s") else 0
        print(f"  {name:<38} train_images_per_s {r['train_images_per_s']:>9.0f}, "
              f"loop {loop:>7.0f} img/s, test accuracy {r.get('test_accuracy')}")
    except Exception as e:  # noqa: BLE001 (a failed run has no JSON line)
        print(f"  {name:<38} no result ({type(e).__name__}: {e})")
        rates.append(None)
if all(rates):
    print(f"  the CUDA graphs' gain: {rates[1] / rates[0]:.2f}x train_images_per_s")
sys.exit(0 if all(rates) else 1)
EOF
}

# The recompute pass on the GPU: ResNet-18 (batch 256, 2,048 images, deterministic) trains to
# the same weights with and without it; then the step alone (loom_bench_train, the batch resident
# on the GPU) of ResNet-18 b256 and ResNet-50 224x224 b128 with and without it, in turn: images/s
# and the device's high-water mark.
# same_weights PASS WITHOUT ARGS...: `loom train ARGS --json` with the default pipeline and with
# --passes WITHOUT (the pipeline less PASS); fails unless both give the same weights_sha256.
same_weights() {
  local pass=$1 without=$2 r a b
  shift 2
  r=$("$WORK/loom" train "$@" --json 2>&1 | tail -n 1) || { echo "$r"; return 1; }
  echo "  with $pass:    $r"
  a=$(sed -n 's/.*"weights_sha256":"\([0-9a-f]*\)".*/\1/p' <<<"$r")
  r=$("$WORK/loom" train "$@" --json --passes "$without" 2>&1 | tail -n 1) || {
    echo "$r"; return 1; }
  echo "  without $pass: $r"
  b=$(sed -n 's/.*"weights_sha256":"\([0-9a-f]*\)".*/\1/p' <<<"$r")
  if [[ -z $a || $a != "$b" ]]; then
    echo "  FAIL: the weights differ with and without $pass"
    return 1
  fi
  echo "  the same weights with and without $pass: $a"
}

recompute() {
  local without='inline,repeat(simplify,cse,dce),fuse,combine_updates,dce' r status=0
  same_weights recompute "$without" resnet18 --device GPU --deterministic --epochs 1 \
    --train-samples 2048 --test-samples 256 --batch-size 256 --data-dir "$WORK/fashion-mnist" ||
    status=1
  local round cfg
  for round in 1 2; do
    for cfg in "resnet18 --batch 256 --steps 40" "resnet50 --imagenet --batch 128 --steps 20"; do
      # shellcheck disable=SC2086  # cfg is a list of options
      r=$("$WORK/loom_bench_train" --model $cfg --device GPU --repeats 1 --warmup 3 2>&1 |
          tail -n 1)
      echo "  round $round, $cfg, with recompute:    $r"
      # shellcheck disable=SC2086
      r=$("$WORK/loom_bench_train" --model $cfg --device GPU --repeats 1 --warmup 3 \
          --passes "$without" 2>&1 | tail -n 1)
      echo "  round $round, $cfg, without recompute: $r"
    done
  done
  return $status
}

# The combine_updates pass on the GPU: LeNet-5 (deterministic, one epoch) trains to the same
# weights with and without it; then LeNet's step alone at batch 32 and 256 with and without it,
# in turn, two rounds (images/s).
combine() {
  local without='inline,repeat(simplify,cse,dce),recompute,fuse,dce' r status=0
  same_weights combine_updates "$without" lenet --device GPU --deterministic --epochs 1 \
    --data-dir "$WORK/fashion-mnist" || status=1
  local round batch
  for round in 1 2; do
    for batch in 32 256; do
      r=$("$WORK/loom_bench_train" --model lenet --batch $batch --steps 2000 --device GPU \
          --repeats 1 --warmup 50 2>&1 | tail -n 1)
      echo "  round $round, lenet $batch, with combine_updates:    $r"
      r=$("$WORK/loom_bench_train" --model lenet --batch $batch --steps 2000 --device GPU \
          --repeats 1 --warmup 50 --passes "$without" 2>&1 | tail -n 1)
      echo "  round $round, lenet $batch, without combine_updates: $r"
    done
  done
  return $status
}

# ResNet-18 at batch 256: 6 steps, steps 3-5 profiled, the tables into the log.
profile_r18() {
  rm -rf "$OUT/prof_r18"
  "$WORK/loom" train resnet18 --device GPU --profile "$OUT/prof_r18" --profile-start-step 3 \
    --profile-stop-step 5 --train-samples 1536 --test-samples 256 --batch-size 256 --epochs 1 \
    --data-dir "$WORK/fashion-mnist" || return 1
  echo "== loom profile show $OUT/prof_r18 --top 15"
  "$WORK/loom" profile show "$OUT/prof_r18" --top 15
}

# LeNet-5 at batch 256 (steps 20-40) and ResNet-50 at 224x224 on fake-imagenet, batch 128 (steps
# 3-5), profiled with the memory plan; the tables into the log (the kernels timed by CUDA events).
profiles() {
  rm -rf "$OUT/prof_lenet256" "$OUT/prof_r50_224"
  "$WORK/loom" train lenet --device GPU --profile "$OUT/prof_lenet256" --profile-memory \
    --profile-start-step 20 --profile-stop-step 40 --train-samples 12800 --test-samples 256 \
    --batch-size 256 --epochs 1 --data-dir "$WORK/fashion-mnist" || return 1
  echo "== loom profile show $OUT/prof_lenet256 --top 25"
  "$WORK/loom" profile show "$OUT/prof_lenet256" --top 25
  "$WORK/loom" train resnet50 --dataset fake-imagenet --device GPU --profile "$OUT/prof_r50_224" \
    --profile-memory --profile-start-step 3 --profile-stop-step 5 --train-samples 768 \
    --test-samples 128 --batch-size 128 --epochs 1 || return 1
  echo "== loom profile show $OUT/prof_r50_224 --top 25"
  "$WORK/loom" profile show "$OUT/prof_r50_224" --top 25
}

# cuBLASLt's candidates timed at prepare (the default) against its heuristic's first
# (LOOM_CUBLASLT_SEARCH=0): LeNet's step at batch 32 and 256, two rounds in turn.
gemm_search() {
  local round batch mode r
  for round in 1 2; do
    for batch in 32 256; do
      for mode in "" 0; do
        r=$(LOOM_CUBLASLT_SEARCH=$mode "$WORK/loom_bench_train" --model lenet --batch $batch \
            --steps 2000 --device GPU --repeats 1 --warmup 50 2>&1 | tail -n 1) || return 1
        echo "  round $round, lenet $batch, LOOM_CUBLASLT_SEARCH=${mode:-(unset)}: $r"
      done
    done
  done
}

# The kernels of LeNet-5's step at batch 256 and 32 (loom_bench_train, the batch resident on the
# GPU) and of PyTorch's CUDA-graph step, each kernel's time per step: through Nsight Systems
# where it is installed (cuda_gpu_kern_sum, graph nodes traced one by one), else through CUPTI
# (bench/cupti_kernels.cc, compiled here against the machine's CUPTI and loaded into each
# program by CUDA_INJECTION64_PATH: the replays' span, the kernels' busy time, each kernel).
torch_lenet='
import sys; sys.path.insert(0, sys.argv[1])
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
from gpu_vs_torch import TorchTrainer
print(TorchTrainer("lenet", int(sys.argv[2]), graphed=True).images_per_s(200, warmup=10))'

# Where CUPTI's header, its library and CUDA's driver header are (the toolkit's extras, the
# toolkit's include, the Python packages nvidia-*), one per line: "include lib cuda_include".
find_cupti() {
  local roots=(/usr/local/cuda /usr/local/cuda-*)
  local py
  py=$(python3 -c 'import nvidia, sys; print(" ".join(nvidia.__path__))' 2>/dev/null) &&
    roots+=($py)
  local h lib cuda_h
  h=$(find -H "${roots[@]}" -maxdepth 5 -name cupti_activity.h 2>/dev/null | head -1)
  lib=$(find -H "${roots[@]}" -maxdepth 5 -name 'libcupti.so*' 2>/dev/null | sort | head -1)
  cuda_h=$(find -H "${roots[@]}" -maxdepth 4 -name cuda.h -path '*include*' 2>/dev/null | head -1)
  [[ -n $h && -n $lib && -n $cuda_h ]] || return 1
  echo "$(dirname "$h") $lib $(dirname "$cuda_h")"
}

kernels_lenet() {
  local nsys
  nsys=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys \
         2>/dev/null | head -1)
  local t=/tmp/loom_kernels
  mkdir -p $t
  local b
  if [[ -n $nsys ]]; then
    echo "== $nsys"
    for b in 256 32; do
      "$nsys" profile -t cuda --cuda-graph-trace=node --force-overwrite true -o $t/loom$b \
        "$WORK/loom_bench_train" --model lenet --batch $b --device GPU --steps 200 --repeats 1 \
        --warmup 5 >/dev/null || return 1
      echo "== loom, LeNet-5 batch $b"
      "$nsys" stats --report cuda_gpu_kern_sum --format table $t/loom$b.nsys-rep | cut -c1-200 |
        head -45
      "$nsys" profile -t cuda --cuda-graph-trace=node --force-overwrite true -o $t/torch$b \
        python3 -c "$torch_lenet" "$ROOT/bench" $b >/dev/null || return 1
      echo "== PyTorch (CUDA graph), LeNet-5 batch $b"
      "$nsys" stats --report cuda_gpu_kern_sum --format table $t/torch$b.nsys-rep | cut -c1-200 |
        head -45
    done
    return 0
  fi
  local found inc lib cuda_inc record
  found=$(find_cupti) || { echo "no Nsight Systems and no CUPTI on this machine"; return 77; }
  read -r inc lib cuda_inc <<<"$found"
  record=$(grep -o 'CUpti_ActivityKernel[0-9]*;' "$inc/cupti_activity.h" | tr -d ';' | sort -V |
           tail -1)
  echo "== CUPTI: $inc, $lib ($record); CUDA's header: $cuda_inc"
  g++ -O2 -shared -fPIC -I"$cuda_inc" -I"$inc" "$ROOT/bench/cupti_kernels.cc" \
    -DLOOM_CUPTI_KERNEL_RECORD="$record" "$lib" -Wl,-rpath,"$(dirname "$lib")" \
    -o $t/libcupti_kernels.so || return 1
  for b in 256 32; do
    echo "== loom, LeNet-5 batch $b (loom_bench_train --device GPU, CUDA graph)"
    CUDA_INJECTION64_PATH=$t/libcupti_kernels.so LOOM_CUPTI_TOP=25 "$WORK/loom_bench_train" \
      --model lenet --batch $b --device GPU --steps 200 --repeats 1 --warmup 5 2>&1 |
      grep -v '^ *$' | tail -n 32 || return 1
    echo "== PyTorch (CUDA graph), LeNet-5 batch $b"
    CUDA_INJECTION64_PATH=$t/libcupti_kernels.so LOOM_CUPTI_TOP=25 \
      python3 -c "$torch_lenet" "$ROOT/bench" $b 2>&1 | grep -v '^ *$' | tail -n 32 || return 1
  done
}

# PyNative on the GPU against the CPU (the same seed: the same weights up to the kernels'
# rounding), and two ranks sharing the GPU (the host-staged all-reduce) against one process.
modes() {
  local small=(lenet --epochs 1 --train-samples 1280 --test-samples 320 --json
               --data-dir "$WORK/fashion-mnist")
  local r
  echo "== loom train lenet --mode pynative --device GPU / CPU"
  for d in GPU CPU; do
    r=$("$WORK/loom" train "${small[@]}" --mode pynative --device $d 2>&1 | tail -n 1) || {
      echo "$r"; return 1; }
    echo "  pynative $d: $r"
  done
  local mpirun
  mpirun=$(command -v mpirun) || { echo "no mpirun on this machine: two ranks not run"; return 0; }
  echo "== mpirun -np 2 loom train lenet --device GPU (one GPU shared: host-staged all-reduce)"
  r=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$mpirun" -np 2 --oversubscribe \
        --bind-to none "$WORK/loom" train "${small[@]}" --device GPU 2>&1 | tail -n 3) || {
    echo "$r"; return 1; }
  echo "  2 ranks GPU: $r"
  r=$("$WORK/loom" train "${small[@]}" --device GPU 2>&1 | tail -n 1)
  echo "  1 rank GPU: $r"
}

# Mixed precision (step 12 above).
amp() {
  local epochs=${LOOM_GPU_AMP_EPOCHS:-3} model level r status=0 t=/tmp/loom_amp
  mkdir -p $t
  for model in lenet resnet18; do
    for level in O0 O2; do
      echo "== loom train $model --device GPU --epochs $epochs --amp-level $level --amp-dtype bfloat16"
      "$WORK/loom" train $model --device GPU --epochs "$epochs" --amp-level $level \
        --amp-dtype bfloat16 --json --data-dir "$WORK/fashion-mnist" >$t/$model.$level.out 2>&1
      echo "exit status $?"
      grep -v '^{' $t/$model.$level.out | tail -n 4
      tail -n 1 $t/$model.$level.out
    done
  done
  python3 - $t <<'EOF2' || status=1
import json, sys
t, ok = sys.argv[1], True
def result(model, level):
    lines = [l for l in open(f"{t}/{model}.{level}.out", errors="replace") if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None
for model in ("lenet", "resnet18"):
    f32, o2 = result(model, "O0"), result(model, "O2")
    if not f32 or not o2:
        print(f"  {model}: a run gave no result"); ok = False; continue
    d = o2["test_accuracy"] - f32["test_accuracy"]
    print(f"  {model}: test accuracy Float32 {f32['test_accuracy']:.4f}, O2 bfloat16 "
          f"{o2['test_accuracy']:.4f} ({d:+.4f}); train loss {f32['train_loss']:.4f} / "
          f"{o2['train_loss']:.4f}; images/s {f32['train_images_per_s']:.0f} / "
          f"{o2['train_images_per_s']:.0f}; Float32 fallbacks at O2: "
          f"{', '.join(o2.get('float32_fallbacks', [])) or 'none'}")
    if d < -0.005:
        print(f"  {model}: O2 bfloat16 is more than 0.5% below Float32"); ok = False
sys.exit(0 if ok else 1)
EOF2
  # The step alone, ResNet-18 batch 256 (one run each, in turn), then both profiled.
  local variant
  local -a env_of amp_of
  for variant in Float32 O2 fallback; do
    env_of=()
    amp_of=()
    [[ $variant != Float32 ]] && amp_of=(--amp O2:bfloat16)
    [[ $variant == fallback ]] && env_of=(LOOM_CUDA_HALF_KERNELS=0)
    r=$(env "${env_of[@]}" "$WORK/loom_bench_train" --model resnet18 --batch 256 --steps 40 \
        --device GPU --repeats 1 --warmup 3 "${amp_of[@]}" 2>&1 | tail -n 1)
    echo "  resnet18 256, $variant: $r"
  done
  for variant in Float32 O2; do
    amp_of=()
    [[ $variant == O2 ]] && amp_of=(--amp O2:bfloat16)
    rm -rf $t/prof_$variant
    "$WORK/loom_bench_train" --model resnet18 --batch 256 --steps 3 --device GPU --repeats 1 \
      --warmup 2 "${amp_of[@]}" --profile-dir $t/prof_$variant >/dev/null 2>&1
    echo "== profile, resnet18 256, $variant"
    "$WORK/loom" profile show $t/prof_$variant --top 14 2>&1 | cut -c1-160
  done
  return $status
}

export ROOT BUNDLE WORK OUT torch_lenet
export -f dexz unpack cuda_lib_dirs find_cuda machine cuda_graphs same_weights recompute combine \
  profile_r18 profiles find_cupti kernels_lenet gemm_search modes amp

main() {
  echo "loom GPU check, $(date -u +%FT%TZ), $(uname -n), repository $ROOT"
  step unpack 120 unpack || true
  if [[ ! -x $WORK/bin/loom ]]; then
    echo "nothing to run: the bundle did not unpack"
    note "(stopped: no binaries)"
  else
    step libraries 60 find_cuda
    step machine 60 machine
    step loom_info 60 "$WORK/loom" info
    local none
    none=$(timeout 60 "$WORK/loom" info 2>&1 | grep '^CUDA: none')
    if [[ -n $none ]]; then
      echo "WARNING: loom finds no GPU here ($none): the GPU steps will skip"
      note "WARNING: loom finds no GPU: $none"
      failed=1
    fi
    step kernel_check 150 "$WORK/loom_gpu_tests" --gtest_output="xml:$OUT/kernel_check.xml"
    step train_lenet 150 env LOOM_FASHION_MNIST_DIR="$WORK/fashion-mnist" \
      bash "$ROOT/tests/gpu/train_gpu_test.sh" "$WORK/loom"
    # The benchmark's own budget: what is left, less 100 s for the two steps after it and the
    # summary, at most 150 s; its step's timeout adds 30 s for a last round's overrun (on
    # SIGTERM it still prints its tables and writes bench.json with what it measured).
    local bench_budget=$((BUDGET - SECONDS - 100))
    local cap=${LOOM_GPU_CHECK_BENCH_BUDGET:-150}
    ((bench_budget > cap)) && bench_budget=$cap
    ((bench_budget < 30)) && bench_budget=30
    step bench $((bench_budget + 30)) env PYTHONUNBUFFERED=1 python3 \
      "$ROOT/bench/gpu_vs_torch.py" --loom "$WORK/loom" --data-dir "$WORK/fashion-mnist" \
      --json "$OUT/bench.json" --budget "$bench_budget" \
      ${LOOM_GPU_CHECK_BENCH:+--configs $LOOM_GPU_CHECK_BENCH}
    step kernels_lenet 150 kernels_lenet
    step gemm_search 90 gemm_search
    step cuda_graphs 60 cuda_graphs
    step recompute 120 recompute
    step combine 90 combine
    step profile_r18 60 profile_r18
    step profiles 90 profiles
    step modes 90 modes
    step amp 240 amp
    step amp_bench 200 env PYTHONUNBUFFERED=1 python3 "$ROOT/bench/gpu_vs_torch.py" \
      --loom "$WORK/loom" --data-dir "$WORK/fashion-mnist" --amp O2:bfloat16 \
      --budget "${LOOM_GPU_CHECK_AMP_BENCH_BUDGET:-150}" \
      --configs ${LOOM_GPU_CHECK_AMP_BENCH:-resnet18:256 resnet50_224:128}
  fi
  echo
  echo "==================== summary ($SECONDS s) ===================="
  printf '%s\n' "${SUMMARY[@]}"
  if ((failed)); then echo "gpu_check: SOME STEPS FAILED"; else echo "gpu_check: all steps passed"; fi
  return $failed
}

main "$@" 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
