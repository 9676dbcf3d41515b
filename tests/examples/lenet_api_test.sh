#!/usr/bin/env bash
# examples/lenet_api.cc, the README's C++ example, runs as shown: two epochs on 2,048 images
# learn (test accuracy above 0.6), and its observer's kernel time (epoch 2, 64 steps) splits
# into the three roles (percentages adding up to 100) and names LeNet's Cells and the optimizer.
# Usage: lenet_api_test.sh EXAMPLE
set -euo pipefail
example=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$tmp/out" >&2; exit 1; }

"$example" 2048 2 > "$tmp/out" || fail "the example exited with $?"
grep -q '^optimizer: Momentum(lr list of 128, momentum 0.9, weight decay 0.0001)$' "$tmp/out" \
  || fail "no optimizer line"
acc=$(sed -n 's/^epoch 2: .*test accuracy \([0-9.]*\),.*/\1/p' "$tmp/out")
[ -n "$acc" ] || fail "no epoch 2 line"
awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }' || fail "test accuracy $acc after 2 epochs"
grep -q '^128 steps, ' "$tmp/out" || fail "expected 128 steps (2 epochs of 64)"
sum=$(awk '/^  (forward|backward|optimizer) / { s += $(NF) + 0 } END { printf "%.1f", s }' "$tmp/out")
awk -v s="$sum" 'BEGIN { exit !(s >= 99.7 && s <= 100.3) }' || fail "roles add up to $sum%"
for cell in conv1 conv2 fc1 fc2 fc3 max_pool2d Momentum; do
  grep -q "^  $cell " "$tmp/out" || fail "no kernel time for $cell"
done
echo "ok: test accuracy $acc, roles $sum%"
