#!/usr/bin/env python3
"""What calling loom from Python costs, against the same work from C++, in one run, interleaved.

    PYTHONPATH=build/python python3 bench/python_vs_cpp.py [--rounds 3]

1. One training step called from Python (nn.TrainOneStepCell.__call__ on the zoo's LeNet-5 at
   batch 1, the batch already a loom.Tensor) against loom_bench_train --model lenet --batch 1
   (the same C++ TrainOneStepCell::step in a C++ loop): microseconds per step, the difference is
   what the Python call adds.
2. LeNet-5 on Fashion-MNIST, one epoch: python/examples/lenet_quickstart.py's network, pipeline and
   Model.train from Python against `loom train lenet --epochs 1`: images/s of the training steps
   (the same figure: Model's step time), the ratio Python / C++.
Both sides use the same thread count (the machine's cores, loom's default).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "examples"))

import numpy as np  # noqa: E402

import loom  # noqa: E402
from loom import nn  # noqa: E402
import lenet_quickstart as quickstart  # noqa: E402

BIN = os.path.join(ROOT, "build", "bin")


def python_step_us(steps):
    loom.set_seed(1)
    net = quickstart.LeNet5()
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True)),
                               nn.Momentum(net.trainable_params(), 0.01, 0.9))
    x = loom.Tensor(np.random.default_rng(0).standard_normal((1, 1, 32, 32)).astype(np.float32))
    y = loom.Tensor(np.zeros(1, np.int32))
    for _ in range(20):
        step(x, y)
    t0 = time.perf_counter()
    for _ in range(steps):
        step(x, y)
    return (time.perf_counter() - t0) / steps * 1e6


def cpp_step_us(steps):
    out = subprocess.run([os.path.join(BIN, "loom_bench_train"), "--model", "lenet", "--batch", "1",
                          "--steps", str(steps), "--warmup", "20", "--repeats", "1"],
                         capture_output=True, text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return 1e6 / r["median"]


class StepTime(loom.Callback):
    def __init__(self):
        self.images = 0
        self.t = 0.0

    def on_train_step_begin(self, rc):
        self._t0 = time.perf_counter()

    def on_train_step_end(self, rc):
        self.t += time.perf_counter() - self._t0
        self.images += 32


def python_epoch():
    loom.set_seed(1)
    net = quickstart.LeNet5()
    model = loom.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True),
                       nn.Momentum(net.trainable_params(), 0.01, 0.9), metrics={"accuracy"})
    data = quickstart.create_dataset("train", 32, 0)
    t0 = time.perf_counter()
    model.train(1, data)
    loop = time.perf_counter() - t0
    return 60000 // 32 * 32 / loop


def cpp_epoch():
    out = subprocess.run([os.path.join(BIN, "loom"), "train", "lenet", "--epochs", "1",
                          "--test-samples", "32", "--json"],
                         capture_output=True, text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return 60000 // 32 * 32 / r["train_loop_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3000)
    a = ap.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; loom's default thread count on both sides")
    py_s, cpp_s, py_e, cpp_e = [], [], [], []
    for r in range(a.rounds):
        cpp_s.append(cpp_step_us(a.steps))
        py_s.append(python_step_us(a.steps))
        cpp_e.append(cpp_epoch())
        py_e.append(python_epoch())
        print(f"round {r + 1}: step C++ {cpp_s[-1]:.1f} us, Python {py_s[-1]:.1f} us; epoch loop "
              f"C++ {cpp_e[-1]:.0f} img/s, Python {py_e[-1]:.0f} img/s", flush=True)
    ms, mp = statistics.median(cpp_s), statistics.median(py_s)
    es, ep = statistics.median(cpp_e), statistics.median(py_e)
    print(f"LeNet-5 step at batch 1: C++ {ms:.1f} us, Python {mp:.1f} us: Python adds "
          f"{mp - ms:.1f} us (bar: <= 5)")
    print(f"LeNet-5 epoch (training loop, data pipeline included): C++ {es:.0f} img/s, Python "
          f"{ep:.0f} img/s: {ep / es:.3f} (bar: >= 0.95)")


if __name__ == "__main__":
    main()
