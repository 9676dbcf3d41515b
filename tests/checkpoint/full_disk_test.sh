#!/usr/bin/env bash
# full_disk_test.sh LOOM: a checkpoint save that runs out of space. `loom train lenet` saves after
# each of its 2 steps into a 700 KiB tmpfs made by the test (a LeNet checkpoint is 494 KB): the
# second save fails. Expected: exit status 1 and one line naming the file and the system's reason,
# the first checkpoint still there and loadable (`loom eval`), no temporary file left behind.
# Where this process may not mount (no CAP_SYS_ADMIN), the same failure is made with a file-size
# limit instead (ulimit -f: the write fails with EFBIG, "File too large"), and the test says so.
set -u
loom=$1
dir=$(mktemp -d)
mounted=0
cleanup() {
  [ "$mounted" = 1 ] && umount "$dir"
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAILED: $*"; exit 1; }
train=("$loom" train lenet --epochs 1 --train-samples 64 --batch-size 32 --save-steps 1
       --ckpt-dir "$dir")
if mount -t tmpfs -o size=700k tmpfs "$dir" 2>/dev/null; then
  mounted=1
  echo "a 700 KiB tmpfs at $dir"
  "${train[@]}" >"$dir.out" 2>"$dir.err"
  rc=$?
  reason="No space left on device"
  kept=lenet-1_1.ckpt failed=lenet-1_2.ckpt
else
  echo "mount not permitted here: a 400 KiB file-size limit instead (ulimit -f 400)"
  # An epoch's checkpoint (lenet-1_2), then a second epoch resumed from it under the limit.
  "$loom" train lenet --epochs 1 --train-samples 64 --batch-size 32 --ckpt-dir "$dir" \
      >/dev/null 2>&1 || fail "the first run failed"
  (trap '' XFSZ; ulimit -f 400
   exec "$loom" train lenet --epochs 2 --train-samples 64 --batch-size 32 --ckpt-dir "$dir" \
        --resume "$dir/lenet-1_2.ckpt") >"$dir.out" 2>"$dir.err"
  rc=$?
  reason="File too large"
  kept=lenet-1_2.ckpt failed=lenet_1-2_2.ckpt  # MindSpore's name for a second run's files
fi
cat "$dir.err"
[ "$rc" -eq 1 ] || fail "expected exit status 1, got $rc"
last=$(tail -n 1 "$dir.err")
[[ $last =~ ^"loom train: save_checkpoint: cannot write '$dir/$failed."[A-Za-z0-9]+".tmp': $reason"$ ]] ||
  fail "expected one line naming the checkpoint being written and '$reason', got: $last"
ls "$dir"/*.tmp >/dev/null 2>&1 && fail "a temporary file was left: $(ls "$dir")"
[ -s "$dir/$kept" ] || fail "the first checkpoint is gone: $(ls "$dir")"
"$loom" eval lenet --ckpt "$dir/$kept" >/dev/null 2>"$dir.eval" ||
  fail "the first checkpoint does not load: $(cat "$dir.eval")"
rm -f "$dir.out" "$dir.err" "$dir.eval"
echo "PASSED: the failed save named its file, the previous checkpoint loads, nothing left behind"
