#!/usr/bin/python3
"""Training-step throughput, loom next to PyTorch, in one run on the same machine.

    /usr/bin/python3 bench/train_vs_torch.py --loom build/bin/loom_bench_train \
        --model lenet --batch 32 256 --steps 200 --repeats 5 --threads 2

For each batch size: loom (build/bin/loom_bench_train, one process) and PyTorch (this process,
Debian's python3-torch) train the same network definition with Momentum (lr 0.01, momentum 0.9)
and softmax cross-entropy on one fixed random batch held in memory, `threads` threads each;
after warm-up steps, `repeats` timed runs of `steps` steps. Prints images/s per run, the median
and spread (max/min) of each, and last the ratio loom / PyTorch of the medians.
"""
import argparse
import json
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LeNet5(nn.Module):
    """MindSpore's model-zoo LeNet-5: convolutions without bias, 1x32x32 input."""

    def __init__(self, num_class=10, num_channel=1):
        super().__init__()
        self.conv1 = nn.Conv2d(num_channel, 6, 5, bias=False)
        self.conv2 = nn.Conv2d(6, 16, 5, bias=False)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_class)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


MODELS = {"lenet": (LeNet5, (1, 32, 32))}


def torch_run(model, batch, steps, warmup, repeats, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    make, sample = MODELS[model]
    net = make()
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, *sample)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        rates.append(batch * steps / (time.perf_counter() - t0))
    return rates


def loom_run(binary, model, batch, steps, warmup, repeats, threads):
    out = subprocess.run(
        [binary, "--model", model, "--batch", str(batch), "--steps", str(steps), "--warmup",
         str(warmup), "--repeats", str(repeats), "--threads", str(threads)],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def median(v):
    return sorted(v)[len(v) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loom", default="build/bin/loom_bench_train")
    ap.add_argument("--model", default="lenet", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    print(f"torch {torch.__version__}, {a.threads} threads, model {a.model}, {a.steps} steps x "
          f"{a.repeats} runs per figure")
    ratios = []
    for batch in a.batch:
        steps = max(10, a.steps * 32 // batch) if batch > 32 else a.steps
        lo = loom_run(a.loom, a.model, batch, steps, a.warmup, a.repeats, a.threads)
        pt = torch_run(a.model, batch, steps, a.warmup, a.repeats, a.threads)
        lm, pm = lo["median"], median(pt)
        print(f"batch {batch:4d}  loom  images/s {', '.join(f'{r:.0f}' for r in lo['images_per_s'])}"
              f"  median {lm:.0f} spread {lo['spread']:.2f}  compile {lo['compile_ms']:.1f} ms"
              f"  peak RSS {lo['peak_rss_mib']:.0f} MiB")
        print(f"batch {batch:4d}  torch images/s {', '.join(f'{r:.0f}' for r in pt)}"
              f"  median {pm:.0f} spread {max(pt) / min(pt):.2f}")
        ratios.append((batch, lm / pm))
    for batch, r in ratios:
        print(f"ratio loom/torch, {a.model} batch {batch}: {r:.2f}")


if __name__ == "__main__":
    sys.exit(main())
