#!/usr/bin/env bash
# `loom train lenet` learns (label slow): one epoch over the first 8,192 Fashion-MNIST training
# images (256 steps of 32) must bring the epoch's mean training loss below 1.4 (it starts at
# ln 10 ≈ 2.30; seed 1 gives 1.137) and the accuracy on the first 2,000 test images above 0.70
# (seed 1 gives 0.760).
set -euo pipefail
loom="$1"
out=$("$loom" train lenet --train-samples 8192 --test-samples 2000 --epochs 1 --deterministic --json | tail -n 1)
python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
loss, acc = r["train_loss"], r["test_accuracy"]
print(f"train_loss {loss}, test_accuracy {acc}")
assert loss < 1.4, f"expected the mean training loss below 1.4, got {loss}"
assert acc > 0.70, f"expected test accuracy above 0.70, got {acc}"
PY
