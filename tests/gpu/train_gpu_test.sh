#!/usr/bin/env bash
# LeNet-5 trained for one epoch on the GPU against the same run on the CPU (ctest gpu/train_lenet,
# label gpu):
#   - test accuracy of `loom train lenet --device GPU --epochs 1 --deterministic` within
#     LOOM_GPU_ACC_TOL_PP (default 0.5) percentage points of the CPU run's;
#   - two GPU runs end with the same weights_sha256 (deterministic mode on the GPU);
#   - `loom eval lenet --ckpt <the GPU run's checkpoint>` on the GPU within the same margin of the
#     CPU evaluation of that checkpoint.
# Exits 77 (ctest: skipped) when `loom info` says there is no CUDA backend ("CUDA: none: ...") or
# Fashion-MNIST is not found.
#
#   bash tests/gpu/train_gpu_test.sh build/bin/loom [FASHION_MNIST_DIR]
# FASHION_MNIST_DIR also from $LOOM_FASHION_MNIST_DIR; default: where loom finds it.
set -uo pipefail

loom=${1:?usage: train_gpu_test.sh LOOM [FASHION_MNIST_DIR]}
data_dir=${2:-${LOOM_FASHION_MNIST_DIR:-}}
tol_pp=${LOOM_GPU_ACC_TOL_PP:-0.5}

info=$("$loom" info 2>&1) || { echo "FAIL: '$loom info' failed:"; echo "$info"; exit 1; }
if grep -q '^CUDA: none' <<<"$info"; then
  echo "SKIPPED: $(grep '^CUDA: none' <<<"$info" | head -1)"
  exit 77
fi
echo "$info" | grep -E '^(loom|backends|CUDA)' || true

has_data() {
  local d=$1 f
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
           t10k-labels-idx1-ubyte; do
    [[ -f $d/$f || -f $d/$f.gz ]] || return 1
  done
}
data_args=()
if [[ -n $data_dir ]]; then
  has_data "$data_dir" || { echo "SKIPPED: $data_dir does not hold Fashion-MNIST"; exit 77; }
  data_args=(--data-dir "$data_dir")
else
  pkg_dir=$(dpkg -L dataset-fashion-mnist 2>/dev/null | grep '/train-images-idx3-ubyte.gz$' |
            head -1 | xargs -r dirname)
  if ! { [[ -n $pkg_dir ]] && has_data "$pkg_dir"; } &&
     ! has_data /usr/share/datasets/fashion-mnist; then
    echo "SKIPPED: Fashion-MNIST not found (pass its directory or set LOOM_FASHION_MNIST_DIR)"
    exit 77
  fi
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The value of "key" in a file's last JSON line (numbers and strings without commas).
field() {
  grep '^{' "$1" | tail -1 | grep -o "\"$2\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'
}
# |a - b| * 100 <= tol (a, b fractions; tol in percentage points)
within_pp() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (a - b) * 100; if (d < 0) d = -d;
                                                         exit !(a != "" && b != "" && d <= t) }'; }

# run NAME ARGS...: runs loom, its output in $tmp/NAME.log; false (and the log's tail) on failure.
run() {
  local name=$1; shift
  local t0=$SECONDS
  echo "+ loom $*"
  if ! "$loom" "$@" >"$tmp/$name.log" 2>&1; then
    fail "$name: loom $* exited with an error:"
    tail -20 "$tmp/$name.log"
    return 1
  fi
  echo "  $name: $(grep '^{' "$tmp/$name.log" | tail -1) ($((SECONDS - t0)) s)"
}

train=(train lenet --epochs 1 --deterministic --json "${data_args[@]}")
run gpu1 "${train[@]}" --device GPU --ckpt-dir "$tmp/ckpt_gpu1" && ok_gpu1=1 || ok_gpu1=0
run gpu2 "${train[@]}" --device GPU --ckpt-dir "$tmp/ckpt_gpu2" && ok_gpu2=1 || ok_gpu2=0
run cpu "${train[@]}" --device CPU --ckpt-dir "$tmp/ckpt_cpu" && ok_cpu=1 || ok_cpu=0

if ((ok_gpu1 && ok_cpu)); then
  a_gpu=$(field "$tmp/gpu1.log" test_accuracy)
  a_cpu=$(field "$tmp/cpu.log" test_accuracy)
  echo "test accuracy after 1 epoch: GPU $a_gpu, CPU $a_cpu (tolerance $tol_pp pp)"
  echo "train images/s: GPU $(field "$tmp/gpu1.log" train_images_per_s)," \
       "CPU $(field "$tmp/cpu.log" train_images_per_s)"
  within_pp "$a_gpu" "$a_cpu" "$tol_pp" ||
    fail "GPU test accuracy $a_gpu is not within $tol_pp pp of the CPU's $a_cpu"
fi
if ((ok_gpu1 && ok_gpu2)); then
  s1=$(field "$tmp/gpu1.log" weights_sha256)
  s2=$(field "$tmp/gpu2.log" weights_sha256)
  echo "GPU weights_sha256: run 1 $s1, run 2 $s2"
  [[ -n $s1 && $s1 == "$s2" ]] || fail "two deterministic GPU runs ended with different weights"
fi

if ((ok_gpu1)); then
  ckpt=$(field "$tmp/gpu1.log" checkpoint)
  [[ -f $ckpt ]] || ckpt=$(ls -t "$tmp"/ckpt_gpu1/*.ckpt 2>/dev/null | head -1)
  if [[ -z $ckpt || ! -f $ckpt ]]; then
    fail "the GPU run wrote no checkpoint under $tmp/ckpt_gpu1"
  else
    eval_args=(eval lenet --ckpt "$ckpt" --json "${data_args[@]}")
    run eval_gpu "${eval_args[@]}" --device GPU && ok_eg=1 || ok_eg=0
    run eval_cpu "${eval_args[@]}" --device CPU && ok_ec=1 || ok_ec=0
    if ((ok_eg && ok_ec)); then
      e_gpu=$(field "$tmp/eval_gpu.log" test_accuracy)
      e_cpu=$(field "$tmp/eval_cpu.log" test_accuracy)
      echo "eval of the GPU checkpoint: GPU $e_gpu, CPU $e_cpu (training reported $a_gpu)"
      within_pp "$e_gpu" "$e_cpu" "$tol_pp" ||
        fail "GPU eval accuracy $e_gpu is not within $tol_pp pp of the CPU eval's $e_cpu"
    fi
  fi
fi

if ((failures)); then
  echo "train_gpu_test: $failures failure(s)"
  exit 1
fi
echo "train_gpu_test: passed"
