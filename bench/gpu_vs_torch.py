#!/usr/bin/env python3
"""Training throughput, device memory and compile time on one GPU: loom against PyTorch, in one run.

    python3 bench/gpu_vs_torch.py --loom build/bin/loom [--data-dir DIR] [--json out.json]
    python3 bench/gpu_vs_torch.py --loom build/bin/loom --configs lenet:32 resnet50:128:20:2
    python3 bench/gpu_vs_torch.py --loom build/bin/loom --device CPU \
        --configs lenet:32:20 resnet50:2:2:1 resnet50_224:2:1:1     # a dry run without a GPU

Configurations are MODEL:BATCH[:STEPS[:ROUNDS]]; by default LeNet-5 at batch 32 and 256,
ResNet-18 at 256 and ResNet-50 at 128 (both in loom's 32x32 layout), then ResNet-50 at 224x224
batch 128, each while the time budget (--budget) allows. For each, `rounds` rounds, interleaved:
  - loom: `loom train MODEL --device GPU --epochs 1 --batch-size B --train-samples N --json` on
    Fashion-MNIST (resnet50_224: `loom train resnet50 --dataset fake-imagenet`, below): its JSON
    train_images_per_s (training steps only: data waits and compilation excluded),
    N / train_loop_s (the whole step loop, data waits included), compile_ms and
    device_peak_mib (the CUDA memory pool's high-water mark, where the build reports it);
  - PyTorch eager: the same network (bench/train_vs_torch.py's definitions of MindSpore's
    model-zoo LeNet-5 and ResNet, which loom's recipes build) on one synthetic batch resident
    on the GPU, SGD with momentum 0.9 (ResNet: weight decay 1e-4, as loom's recipe), softmax
    cross-entropy; its peak device memory is torch.cuda.max_memory_allocated() over steps after
    the warm-up (reset_peak_memory_stats() before them: cudnn.benchmark's trial workspaces not
    counted; the figure with them is in the JSON as torch_first_peak_mib);
  - PyTorch CUDA graph: forward, backward and the optimizer step captured once
    (torch.cuda.graph, whole-network capture) and replayed; its peak includes the capture.
resnet50_224 is the ImageNet layout (7x7 stride-2 stem and max-pool, 3x224x224, 1000 classes):
loom trains it on fake-imagenet (models/resnet/dataset.h: torchvision's FakeData in ImageNet's
shape, rows generated from Philox streams by the data pipeline's one prefetching worker, copied
to the GPU every step), PyTorch on its one resident synthetic batch; the PyTorch network is
torchvision.models.resnet50(num_classes=1000) when torchvision is importable, else
bench/train_vs_torch.py's ImageNet-layout ResNet-50. Both have the 25,557,032 trainable values
of loom's network (tests/models/fake_imagenet_test.cc counts the recipe's); the script checks
PyTorch's count against that figure and reports a mismatch as an error. They differ where
MindSpore's network differs from torchvision's (stride-2 3x3 convolutions padded "same",
BatchNorm eps 1e-4), not in size. The other ResNets are the zoo's small-image layout (3x3
stride-1 stem, no max-pool) on Fashion-MNIST (1x32x32, 10 classes).
FP32 throughout: TF32 off for cuBLAS and cuDNN in PyTorch (loom's CUDA backend uses
CUBLAS_PEDANTIC_MATH), cudnn.benchmark on. Prints the medians in a table with the GPU's name and
the ratios loom / PyTorch, then device memory and compile times; --json writes every run's
figures (after every configuration, and when the run is cut short by SIGTERM / SIGINT).

--amp LEVEL[:DTYPE] (e.g. O2:bfloat16; DTYPE float16 when left out) compares mixed precision
too, as bench/train_vs_torch.py does on the CPU: each round also runs loom's step at that amp
level (`loom_bench_train ... --amp LEVEL:DTYPE`, core/passes/amp.h) and PyTorch's under
torch.autocast(device_type, dtype=DTYPE) around the forward and the loss (its lists: the products
and convolutions in DTYPE, the rest as their inputs or Float32), eager and, for bfloat16, as a CUDA
graph captured under autocast(cache_enabled=False); float16 adds torch.amp.GradScaler, as a user
would, whose step is not capturable, so float16 has no graphed amp column (loom_bench_train sets
no loss scale). A third table prints images/s of loom and PyTorch (eager, graph) in Float32 and
under amp, each one's amp / Float32 ratio and loom / PyTorch under amp, and their device memory
(loom's device_peak_mib and plan_mib, PyTorch's max_memory_allocated()); the JSON has them as
the *_amp keys and "amp". The amp runs count against the same --budget (the estimates of a
configuration's set-up and rounds are raised for them). TF32 stays off for PyTorch's Float32
parts. `loom train` runs in Float32 only. With --device CPU the amp runs are torch.autocast("cpu")
and loom_bench_train --device CPU (torch 1.13's CPU autocast knows bfloat16 only).
"""
import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from train_vs_torch import LeNet5, ResNet  # noqa: E402

TORCH_NET_NOTE = {}  # model -> which PyTorch network was built (for the JSON)


def resnet50_224():
    try:
        import torchvision  # noqa: PLC0415
        TORCH_NET_NOTE["resnet50_224"] = f"torchvision {torchvision.__version__} resnet50"
        return torchvision.models.resnet50(num_classes=1000)
    except ImportError:
        TORCH_NET_NOTE["resnet50_224"] = ("train_vs_torch.ResNet(50, 1000, 3, imagenet=True) "
                                          "(no torchvision)")
        return ResNet(50, 1000, 3, True)


# model: the PyTorch network, its input and classes, weight decay; loom's model name (None:
# PyTorch alone) and the extra arguments of its `loom train` (loom_args; without a --dataset the
# run is on Fashion-MNIST and gets --data-dir); bench: loom_bench_train's arguments for the same
# network; params: loom's network's trainable values, which
# PyTorch's must equal (None: not checked); steps per timed run by batch and otherwise; rounds
# (None: --repeats); warm-up
# steps before each timed PyTorch run; est_s: a guess of one round's seconds on an H100 (loom's
# process, PyTorch eager and graph) and of the set-up (construction, warm-up, graph capture),
# which decides whether a configuration still fits the budget (scaled by how much slower the
# configurations before it ran than their guesses).
MODELS = {
    "lenet": dict(make=LeNet5, sample=(1, 32, 32), classes=10, wd=0.0, loom="lenet",
                  bench=["--model", "lenet"],
                  steps={32: 600, 256: 150}, default_steps=150, rounds=None, warmup=10,
                  est_round_s=5.0, est_setup_s=2.0),
    "resnet18": dict(make=lambda: ResNet(18, 10, 1, False), sample=(1, 32, 32), classes=10,
                     wd=1e-4, loom="resnet18", bench=["--model", "resnet18"], steps={},
                     default_steps=40, rounds=None,
                     warmup=10, est_round_s=8.0, est_setup_s=5.0),
    # loom's recipe: the small-image layout on Fashion-MNIST, as `loom train resnet50` trains it
    "resnet50": dict(make=lambda: ResNet(50, 10, 1, False), sample=(1, 32, 32), classes=10,
                     wd=1e-4, loom="resnet50", bench=["--model", "resnet50"], steps={},
                     default_steps=20, rounds=2, warmup=5,
                     est_round_s=12.0, est_setup_s=8.0),
    # ImageNet layout: loom on fake-imagenet (3x224x224, 1000 classes), the same 25,557,032
    # trainable values as torchvision's resnet50 (tests/models/fake_imagenet_test.cc)
    "resnet50_224": dict(make=resnet50_224, sample=(3, 224, 224), classes=1000, wd=1e-4,
                         loom="resnet50", loom_args=["--dataset", "fake-imagenet"],
                         bench=["--model", "resnet50", "--imagenet"],
                         params=25_557_032, steps={}, default_steps=20, rounds=2, warmup=3,
                         est_round_s=20.0, est_setup_s=12.0),
}
DEFAULT_CONFIGS = ["lenet:32", "lenet:256", "resnet18:256", "resnet50:128", "resnet50_224:128"]
MIB = 1024.0 * 1024.0
AMP_LEVELS = ("O0", "O1", "O2", "O3", "auto")  # core/passes/amp.h's amp_level_from_name
AMP_DTYPES = ("float16", "bfloat16")
# --amp: a round's and a set-up's guessed seconds (est_round_s, est_setup_s) times these (loom's
# step and PyTorch eager and graphed once more, in the low dtype)
AMP_ROUND_FACTOR = 1.7
AMP_SETUP_FACTOR = 2.0


class Stop(Exception):
    """SIGTERM / SIGINT (gpu_check.sh's timeout): stop, print and write what was measured."""


def on_signal(signum, _frame):
    raise Stop(f"signal {signum}")


def loom_run(loom, model, batch, steps, data_dir, timeout, device="GPU", extra=()):
    cmd = [loom, "train", model, "--device", device, "--epochs", "1", "--batch-size", str(batch),
           "--train-samples", str(batch * steps), "--test-samples", str(batch), "--json",
           *extra]
    if data_dir and "--dataset" not in extra:  # Fashion-MNIST's files
        cmd += ["--data-dir", data_dir]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(cmd)}: killed after {timeout:.0f} s (the budget)") from None
    wall = time.perf_counter() - t0
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stdout + p.stderr).strip().splitlines()[-8:]
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n  " + "\n  ".join(tail))
    r = json.loads(lines[-1])
    loop = r.get("train_loop_s") or 0
    return {"images_per_s": r["train_images_per_s"],
            "loop_images_per_s": batch * steps / loop if loop else None,
            "train_loop_s": loop, "compile_ms": r.get("compile_ms"),
            "device_peak_mib": r.get("device_peak_mib"), "peak_rss_mib": r.get("peak_rss_mib"),
            "total_s": r.get("total_s"), "wall_s": wall,
            "data_wait_fraction": r.get("data_wait_fraction")}


def bench_run(bench, args, batch, steps, warmup, timeout, device="GPU", amp=None, plan=False):
    """loom_bench_train on the GPU: the step on one batch resident on the device, as PyTorch's
    (amp: with --amp LEVEL:DTYPE; plan: its plan_mib too)."""
    cmd = [bench, *args, "--device", device, "--batch", str(batch), "--steps", str(steps),
           "--warmup", str(warmup), "--repeats", "1"] + (["--amp", amp] if amp else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(cmd)}: killed after {timeout:.0f} s (the budget)") from None
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stdout + p.stderr).strip().splitlines()[-8:]
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n  " + "\n  ".join(tail))
    r = json.loads(lines[-1])
    out = {"images_per_s": r["median"], "device_peak_mib": r.get("device_peak_mib"),
           "compile_ms": r.get("compile_ms")}
    if plan:
        out["plan_mib"] = r.get("plan_mib")
    return out


def grad_scaler():
    """torch.amp.GradScaler("cuda") (torch 2.3 on), else torch.cuda.amp.GradScaler()."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


class TorchTrainer:
    """One network, optimizer and synthetic batch on the GPU; eager steps or a captured graph.
    amp_dtype (torch.bfloat16 or torch.float16): the forward and the loss under torch.autocast
    to it; float16 on the GPU with a GradScaler (not capturable: graphed is then refused)."""

    def __init__(self, model, batch, graphed, device="cuda", amp_dtype=None):
        m = MODELS[model]
        torch.manual_seed(1)
        self.device = device
        self.amp_dtype = amp_dtype
        self.scaler = (grad_scaler() if amp_dtype == torch.float16 and device == "cuda"
                       else None)
        if graphed and self.scaler is not None:
            raise ValueError("GradScaler's step (float16) is not capturable in a CUDA graph")
        self.net = m["make"]().to(device).train()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9,
                                   weight_decay=m["wd"])
        self.x = torch.randn(batch, *m["sample"], device=device)
        self.y = torch.randint(0, m["classes"], (batch,), device=device)
        self.batch = batch
        self.graph = None
        if graphed:
            # Warm-up on a side stream (the optimizer's momentum buffers are made here), then
            # capture forward + backward + step; replays reuse the captured memory.
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    self.eager_step()
            torch.cuda.current_stream().wait_stream(s)
            self.graph = torch.cuda.CUDAGraph()
            self.opt.zero_grad(set_to_none=True)
            with torch.cuda.graph(self.graph):
                # autocast's cast cache is not allowed in a captured region
                with self.autocast(cache_enabled=False):
                    self.loss = F.cross_entropy(self.net(self.x), self.y)
                self.loss.backward()
                self.opt.step()
        self.sync()

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def autocast(self, cache_enabled=True):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device, dtype=self.amp_dtype,
                              cache_enabled=cache_enabled)

    def eager_step(self):
        self.opt.zero_grad(set_to_none=True)
        with self.autocast():
            loss = F.cross_entropy(self.net(self.x), self.y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt.step()

    def step(self):
        if self.graph is not None:
            self.graph.replay()
        else:
            self.eager_step()

    def images_per_s(self, steps, warmup=10):
        for _ in range(warmup):
            self.step()
        self.sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        self.sync()
        return self.batch * steps / (time.perf_counter() - t0)


def check_params(model, trainer, mem):
    """PyTorch's trainable values into `mem`; ValueError unless they are loom's network's."""
    n = sum(p.numel() for p in trainer.net.parameters() if p.requires_grad)
    mem["torch_params"] = n
    want = MODELS[model].get("params")
    if want is not None and n != want:
        raise ValueError(f"{model}: PyTorch's network has {n:,} trainable values, loom's "
                         f"{want:,}: not the same network size")


def build_torch(model, batch, cuda, mem, amp_dtype=None):
    """The eager and graphed trainers; their peak device memory into `mem` (MiB). amp_dtype:
    the trainers under torch.autocast (their figures torch_amp_*; built after the Float32 ones,
    whose memory is not counted, nor the cuBLAS workspaces that they made and the amp eager
    steps reuse: tens of MiB, most of LeNet's Float32 figure; no graphed one with float16's
    GradScaler). Freeing those workspaces (torch._C._cuda_clearCublasWorkspaces) to count them
    again frees memory that the Float32 graph's replays use: a launch failure on an H200."""
    key = "torch" if amp_dtype is None else "torch_amp"
    if not cuda:
        eager = TorchTrainer(model, batch, graphed=False, device="cpu", amp_dtype=amp_dtype)
        check_params(model, eager, mem)
        return eager, None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    eager = TorchTrainer(model, batch, graphed=False, amp_dtype=amp_dtype)
    check_params(model, eager, mem)
    eager.images_per_s(2, warmup=1)  # cudnn.benchmark's searches, the momentum buffers
    mem[f"{key}_first_peak_mib"] = (torch.cuda.max_memory_allocated() - base) / MIB
    torch.cuda.reset_peak_memory_stats()
    eager.images_per_s(3, warmup=0)
    mem[f"{key}_peak_mib"] = (torch.cuda.max_memory_allocated() - base) / MIB
    if amp_dtype is None:  # the process's, the amp trainers' would include the Float32 ones'
        mem["torch_reserved_peak_mib"] = torch.cuda.max_memory_reserved() / MIB
    if eager.scaler is not None:
        return eager, None
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    graphed = TorchTrainer(model, batch, graphed=True, amp_dtype=amp_dtype)
    graphed.images_per_s(2, warmup=0)
    mem[f"{key}_graph_peak_mib"] = (torch.cuda.max_memory_allocated() - base) / MIB
    return eager, graphed


def median(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def fmt(x, spec="{:10.0f}", width=10):
    return spec.format(x) if x is not None else "{:>{w}}".format("-", w=width)


def ratio(x, y):
    return x / y if x and y else None


def summarize(r):
    runs = [x for x in r["loom"] if x]
    r["median"] = {
        "loom_step": median([x["images_per_s"] for x in r.get("loom_step", []) if x]),
        "loom_step_device_mib": max((x["device_peak_mib"] for x in r.get("loom_step", [])
                                     if x and x.get("device_peak_mib") is not None),
                                    default=None),
        "loom": median([x["images_per_s"] for x in runs]),
        "loom_loop": median([x["loop_images_per_s"] for x in runs]),
        "torch_eager": median(r["torch_eager"]), "torch_graph": median(r["torch_graph"]),
        "loom_compile_ms": median([x["compile_ms"] for x in runs]),
        # the largest of the runs: a high-water mark
        "loom_device_peak_mib": max((x["device_peak_mib"] for x in runs
                                     if x.get("device_peak_mib") is not None), default=None),
    }
    mem = r.get("memory", {})
    r["median"]["loom_over_torch_memory"] = ratio(r["median"]["loom_device_peak_mib"],
                                                  mem.get("torch_peak_mib"))
    if "loom_step_amp" in r:  # --amp
        summarize_amp(r)


def high_water(runs, key):
    """The largest `key` of the runs (a high-water mark), None where none has it."""
    return max((x[key] for x in runs if x and x.get(key) is not None), default=None)


def summarize_amp(r):
    """--amp: the medians under amp and the ratios amp / Float32 and loom / PyTorch."""
    m, mem = r["median"], r.get("memory", {})
    m["loom_step_amp"] = median([x["images_per_s"] for x in r["loom_step_amp"] if x])
    m["loom_step_amp_device_mib"] = high_water(r["loom_step_amp"], "device_peak_mib")
    m["loom_step_plan_mib"] = high_water(r["loom_step"], "plan_mib")
    m["loom_step_amp_plan_mib"] = high_water(r["loom_step_amp"], "plan_mib")
    m["torch_eager_amp"] = median(r["torch_eager_amp"])
    m["torch_graph_amp"] = median(r["torch_graph_amp"])
    m["loom_amp_over_f32"] = ratio(m["loom_step_amp"], m["loom_step"])
    m["torch_amp_over_f32"] = ratio(m["torch_eager_amp"], m["torch_eager"])
    m["torch_graph_amp_over_f32"] = ratio(m["torch_graph_amp"], m["torch_graph"])
    m["loom_amp_over_torch_amp"] = ratio(m["loom_step_amp"], m["torch_eager_amp"])
    m["loom_amp_over_torch_graph_amp"] = ratio(m["loom_step_amp"], m["torch_graph_amp"])
    m["loom_amp_over_f32_memory"] = ratio(m["loom_step_amp_device_mib"],
                                          m["loom_step_device_mib"])
    m["loom_amp_over_f32_plan"] = ratio(m["loom_step_amp_plan_mib"], m["loom_step_plan_mib"])
    m["torch_amp_over_f32_memory"] = ratio(mem.get("torch_amp_peak_mib"),
                                           mem.get("torch_peak_mib"))
    m["loom_amp_over_torch_amp_memory"] = ratio(m["loom_step_amp_device_mib"],
                                                mem.get("torch_amp_peak_mib"))


def print_tables(header, results, amp=None):
    print()
    print(header)
    print(f"{'model':<13} {'batch':>5} {'steps':>5} {'loom step':>10} {'loom train':>10} "
          f"{'loom loop':>10} {'torch':>10} {'torch graph':>11} {'step/torch':>10} "
          f"{'step/graph':>10}   (images/s, medians of the rounds)")
    for r in results:
        name = f"{r['model']:<13} {r['batch']:>5} {r['steps']:>5}"
        if r.get("skipped"):
            print(f"{name} skipped: {r['skipped']}")
            continue
        summarize(r)
        m = r["median"]
        print(f"{name} {fmt(m['loom_step'])} {fmt(m['loom'])} {fmt(m['loom_loop'])} "
              f"{fmt(m['torch_eager'])} {fmt(m['torch_graph'], '{:11.0f}', 11)} "
              f"{fmt(ratio(m['loom_step'], m['torch_eager']), '{:10.2f}')} "
              f"{fmt(ratio(m['loom_step'], m['torch_graph']), '{:10.2f}')}"
              + (f"   ({len(r['torch_eager'])} rounds, {len([x for x in r['loom'] if x])} loom)"
                 if len(r['torch_eager']) != r['rounds'] or any(x is None for x in r['loom'])
                 else ""))
    print("loom step: loom_bench_train --device GPU, the step on one synthetic batch resident "
          "on the GPU, as PyTorch's (the ratios are this column's); loom train: `loom train`'s "
          "train_images_per_s (steps only, the batches from its data pipeline copied every step); "
          "loom loop: images / train_loop_s (data waits and the first step's compile included); "
          "torch: one synthetic batch resident on the GPU (no input copies); "
          "resnet18/resnet50: the 32x32 layout (1x32x32, 10 classes); resnet50_224: the ImageNet "
          "layout, 3x224x224, 1000 classes (loom: --dataset fake-imagenet, generated on the "
          "host and copied every step; both 25,557,032 trainable values)")
    print()
    print(f"{'model':<13} {'batch':>5} {'loom compile':>12} {'loom step':>10} {'loom train':>11} "
          f"{'torch eager':>11} {'torch graph':>11} {'step/torch':>10} {'train/torch':>11}   "
          f"(compile ms; peak device MiB)")
    for r in results:
        if r.get("skipped"):
            continue
        m, mem = r["median"], r.get("memory", {})
        dev = m["loom_device_peak_mib"]
        dev_s = (f"{dev:11.0f}" if dev is not None
                 else f"{'n/a' if any(r['loom']) else '-':>11}")
        print(f"{r['model']:<13} {r['batch']:>5} {fmt(m['loom_compile_ms'], '{:12.0f}', 12)} "
              f"{fmt(m['loom_step_device_mib'])} "
              f"{dev_s} {fmt(mem.get('torch_peak_mib'), '{:11.0f}', 11)} "
              f"{fmt(mem.get('torch_graph_peak_mib'), '{:11.0f}', 11)} "
              f"{fmt(ratio(m['loom_step_device_mib'], mem.get('torch_peak_mib')), '{:10.2f}')} "
              f"{fmt(m['loom_over_torch_memory'], '{:11.2f}', 11)}")
    print("loom step / loom train: device_peak_mib of loom_bench_train (the step alone, as "
          "PyTorch's figure) and of `loom train` (with the evaluation and the batch copies), the "
          "CUDA memory pool's high-water mark, the largest of the rounds (n/a: this build does not "
          "report it); torch: max_memory_allocated() over steps after the warm-up (eager; graph: "
          "construction, capture and replays); ratios against eager")
    for r in results:
        if r["model"] == "resnet50" and not r.get("skipped"):
            c = r["median"]["loom_compile_ms"]
            verdict = "-" if c is None else ("met" if c < 2000 else "NOT met")
            print(f"ResNet-50 (32x32) compile_ms: {fmt(c, '{:.0f}', 1)} ms "
                  f"(the issue's bar: under 2000 ms: {verdict})")
    if amp:
        print_amp_tables(amp, results)


def print_amp_tables(amp, results):
    """--amp: images/s and device memory, Float32 against mixed precision."""
    print()
    print(f"mixed precision: {amp}")
    print(f"{'model':<13} {'batch':>5} {'loom f32':>9} {'loom amp':>9} {'torch f32':>9} "
          f"{'torch amp':>9} {'graph f32':>9} {'graph amp':>9} {'loom a/f':>8} {'torch a/f':>9} "
          f"{'graph a/f':>9} {'amp/torch':>9} {'amp/graph':>9}   (images/s, medians of the rounds)")
    for r in results:
        if r.get("skipped"):
            continue
        m = r["median"]
        print(f"{r['model']:<13} {r['batch']:>5} {fmt(m['loom_step'], '{:9.0f}', 9)} "
              f"{fmt(m['loom_step_amp'], '{:9.0f}', 9)} {fmt(m['torch_eager'], '{:9.0f}', 9)} "
              f"{fmt(m['torch_eager_amp'], '{:9.0f}', 9)} {fmt(m['torch_graph'], '{:9.0f}', 9)} "
              f"{fmt(m['torch_graph_amp'], '{:9.0f}', 9)} "
              f"{fmt(m['loom_amp_over_f32'], '{:8.2f}', 8)} "
              f"{fmt(m['torch_amp_over_f32'], '{:9.2f}', 9)} "
              f"{fmt(m['torch_graph_amp_over_f32'], '{:9.2f}', 9)} "
              f"{fmt(m['loom_amp_over_torch_amp'], '{:9.2f}', 9)} "
              f"{fmt(m['loom_amp_over_torch_graph_amp'], '{:9.2f}', 9)}")
    print("loom: loom_bench_train's step (the loom step column above) in Float32 and with --amp; "
          "torch: eager, graph: CUDA graph, each in Float32 and under torch.autocast; a/f: amp / "
          "Float32 of each; amp/torch, amp/graph: loom amp / PyTorch amp (eager, graph)")
    print()
    print(f"{'model':<13} {'batch':>5} {'loom f32':>9} {'loom amp':>9} {'torch f32':>9} "
          f"{'torch amp':>9} {'graph f32':>9} {'graph amp':>9} {'loom a/f':>8} {'torch a/f':>9} "
          f"{'amp/torch':>9} {'plan f32':>9} {'plan amp':>9}   (peak device MiB; loom's plan MiB)")
    for r in results:
        if r.get("skipped"):
            continue
        m, mem = r["median"], r.get("memory", {})
        print(f"{r['model']:<13} {r['batch']:>5} {fmt(m['loom_step_device_mib'], '{:9.0f}', 9)} "
              f"{fmt(m['loom_step_amp_device_mib'], '{:9.0f}', 9)} "
              f"{fmt(mem.get('torch_peak_mib'), '{:9.0f}', 9)} "
              f"{fmt(mem.get('torch_amp_peak_mib'), '{:9.0f}', 9)} "
              f"{fmt(mem.get('torch_graph_peak_mib'), '{:9.0f}', 9)} "
              f"{fmt(mem.get('torch_amp_graph_peak_mib'), '{:9.0f}', 9)} "
              f"{fmt(m['loom_amp_over_f32_memory'], '{:8.2f}', 8)} "
              f"{fmt(m['torch_amp_over_f32_memory'], '{:9.2f}', 9)} "
              f"{fmt(m['loom_amp_over_torch_amp_memory'], '{:9.2f}', 9)} "
              f"{fmt(m['loom_step_plan_mib'], '{:9.1f}', 9)} "
              f"{fmt(m['loom_step_amp_plan_mib'], '{:9.1f}', 9)}")
    print("loom: loom_bench_train's device_peak_mib (the memory pool's high-water mark over the "
          "timed steps, the largest of the rounds); torch: max_memory_allocated() over eager steps "
          "after the warm-up (graph: construction, capture and replays; torch amp: built after the "
          "Float32 trainers, the cuBLAS workspaces that they made, tens of MiB, not counted again "
          "in its eager figure); a/f: amp / Float32; amp/torch: loom amp / torch amp (eager); "
          "plan: loom's planned step arena (plan_mib)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loom", default=os.environ.get("LOOM", "build/bin/loom"))
    ap.add_argument("--loom-bench", default=None,
                    help="loom_bench_train (default: beside --loom, when it is there)")
    ap.add_argument("--data-dir", default=None, help="Fashion-MNIST (default: where loom finds it)")
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS,
                    help="MODEL:BATCH[:STEPS[:ROUNDS]], in order (later ones are dropped past "
                    "the budget); models: " + ", ".join(MODELS))
    ap.add_argument("--repeats", type=int, default=3,
                    help="rounds of the models without their own (resnet50*: 2)")
    ap.add_argument("--budget", type=float, default=150,
                    help="seconds: a configuration starts only while it is likely to fit, and "
                    "its rounds stop when the next would not")
    ap.add_argument("--json", default=None, help="write every run's figures here")
    ap.add_argument("--device", choices=["GPU", "CPU"], default="GPU",
                    help="CPU: a dry run of this script where there is no GPU (no CUDA graphs, "
                    "no device memory)")
    ap.add_argument("--amp", default=None, metavar="LEVEL[:DTYPE]",
                    help="LEVEL:DTYPE (e.g. O2:bfloat16; DTYPE float16 when left out): compare "
                    "mixed precision (loom_bench_train's amp level, PyTorch's autocast to DTYPE) "
                    "against Float32, in turn")
    a = ap.parse_args()
    amp_dtype = None
    if a.amp:
        level, _, dtype = a.amp.partition(":")
        dtype = dtype or "float16"
        if level not in AMP_LEVELS or dtype not in AMP_DTYPES:
            ap.error(f"--amp {a.amp!r}: expected LEVEL[:DTYPE], LEVEL of {', '.join(AMP_LEVELS)}, "
                     f"DTYPE of {', '.join(AMP_DTYPES)}")
        a.amp = f"{level}:{dtype}"
        amp_dtype = getattr(torch, dtype)
    if a.loom_bench is None:
        beside = os.path.join(os.path.dirname(a.loom), "loom_bench_train")
        a.loom_bench = beside if os.path.exists(beside) else None
    start = time.perf_counter()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    configs = []
    for cfg in a.configs:
        parts = cfg.split(":")
        if len(parts) < 2 or len(parts) > 4 or parts[0] not in MODELS:
            ap.error(f"bad configuration {cfg!r} (MODEL:BATCH[:STEPS[:ROUNDS]], models: "
                     f"{', '.join(MODELS)})")
        m = MODELS[parts[0]]
        batch = int(parts[1])
        steps = int(parts[2]) if len(parts) > 2 else m["steps"].get(batch, m["default_steps"])
        rounds = int(parts[3]) if len(parts) > 3 else (m["rounds"] or a.repeats)
        configs.append((cfg, parts[0], batch, steps, rounds))

    cuda = a.device == "GPU"
    if cuda and not torch.cuda.is_available():
        print("gpu_vs_torch: PyTorch sees no GPU")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    gpu = torch.cuda.get_device_name(0) if cuda else "none (--device CPU dry run)"
    header = (f"GPU: {gpu}; torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
              f"{torch.backends.cudnn.version()}); FP32, TF32 off, cudnn.benchmark on; "
              f"loom: {a.loom}")
    print(header, flush=True)
    amp_note = amp_json = None
    if a.amp:
        dev = "cuda" if cuda else "cpu"
        scaled = amp_dtype == torch.float16 and cuda
        amp_note = (f"loom_bench_train --amp {a.amp} (no loss scale); torch.autocast("
                    f"'{dev}', dtype=torch.{a.amp.split(':')[1]}) around the forward and the loss"
                    + (" + GradScaler (eager only: its step is not capturable)" if scaled else "")
                    + ("; graph: captured under autocast(cache_enabled=False)"
                       if cuda and not scaled else ""))
        print(f"mixed precision: {amp_note}", flush=True)
        amp_json = {"loom": a.amp, "torch_dtype": a.amp.split(":")[1], "grad_scaler": scaled,
                    "torch_graph_amp": cuda and not scaled, "note": amp_note}
    # the guesses of a configuration's set-up and rounds, the amp runs included
    est_setup = {k: v["est_setup_s"] * (AMP_SETUP_FACTOR if a.amp else 1)
                 for k, v in MODELS.items()}
    est_round = {k: v["est_round_s"] * (AMP_ROUND_FACTOR if a.amp else 1)
                 for k, v in MODELS.items()}

    results = []
    slow = 1.0  # how much longer than their guesses the configurations so far took

    def write_json():
        if not a.json:
            return
        with open(a.json, "w") as f:
            out = {"gpu": gpu, "torch": torch.__version__, "torch_nets": TORCH_NET_NOTE}
            if a.amp:
                out["amp"] = amp_json
            out.update({"budget_s": a.budget, "elapsed_s": time.perf_counter() - start,
                        "results": results})
            json.dump(out, f, indent=1)

    stopped = None
    for i, (cfg, model, batch, steps, rounds) in enumerate(configs):
        m = MODELS[model]
        row = {"model": model, "batch": batch, "steps": steps, "rounds": rounds,
               "loom": [], "loom_step": [], "torch_eager": [], "torch_graph": [], "memory": {},
               "errors": []}
        if a.amp:
            row.update({"loom_step_amp": [], "torch_eager_amp": [], "torch_graph_amp": []})
        elapsed = time.perf_counter() - start
        estimate = slow * (est_setup[model] + rounds * est_round[model])
        if stopped or (i > 0 and elapsed + estimate > a.budget):
            row["skipped"] = (stopped or f"{elapsed:.0f} s of the {a.budget:.0f} s budget used, "
                              f"about {estimate:.0f} s needed")
            print(f"{cfg}: skipped ({row['skipped']})", flush=True)
            results.append(row)
            continue
        eager = graphed = eager_amp = graphed_amp = None
        t_cfg = time.perf_counter()
        try:
            try:
                eager, graphed = build_torch(model, batch, cuda, row["memory"])
            except Stop:
                raise
            except Exception as e:  # noqa: BLE001
                row["errors"].append(f"torch: {type(e).__name__}: {e}")
                eager = graphed = None
                if cuda:
                    torch.cuda.empty_cache()
            if a.amp:
                try:
                    eager_amp, graphed_amp = build_torch(model, batch, cuda, row["memory"],
                                                         amp_dtype)
                except Stop:
                    raise
                except Exception as e:  # noqa: BLE001
                    row["errors"].append(f"torch amp: {type(e).__name__}: {e}")
                    eager_amp = graphed_amp = None
                    if cuda:
                        torch.cuda.empty_cache()
            row["setup_s"] = time.perf_counter() - t_cfg
            for rep in range(rounds):
                t_round = time.perf_counter()
                left = a.budget - (t_round - start)
                if rep > 0 and left < row["round_s"]:
                    print(f"{cfg}: {rounds - rep} round(s) dropped ({left:.0f} s of the budget "
                          "left)")
                    break
                lo = None
                if a.amp and cuda:
                    # PyTorch's cached blocks back to the device for loom's processes (its four
                    # trainers' would crowd them; the graphs' pools stay, the warm-ups reallocate)
                    torch.cuda.empty_cache()
                if m["loom"]:
                    try:
                        lo = loom_run(a.loom, m["loom"], batch, steps, a.data_dir,
                                      timeout=max(15.0, left + 5), device=a.device,
                                      extra=m.get("loom_args", ()))
                    except Stop:
                        raise
                    except Exception as e:  # noqa: BLE001
                        row["errors"].append(f"loom: {e}")
                    row["loom"].append(lo)
                ls = lsa = None
                if m.get("bench") and a.loom_bench and (a.device == "GPU" or a.amp):
                    try:
                        ls = bench_run(a.loom_bench, m["bench"], batch, steps, m["warmup"],
                                       timeout=max(15.0, a.budget - (time.perf_counter() - start)
                                                   + 5), device=a.device, plan=bool(a.amp))
                    except Stop:
                        raise
                    except Exception as e:  # noqa: BLE001
                        row["errors"].append(f"loom_bench_train: {e}")
                    row["loom_step"].append(ls)
                    if a.amp:
                        try:
                            lsa = bench_run(a.loom_bench, m["bench"], batch, steps, m["warmup"],
                                            timeout=max(15.0, a.budget
                                                        - (time.perf_counter() - start) + 5),
                                            device=a.device, amp=a.amp, plan=True)
                        except Stop:
                            raise
                        except Exception as e:  # noqa: BLE001
                            row["errors"].append(f"loom_bench_train --amp: {e}")
                        row["loom_step_amp"].append(lsa)
                if eager is not None:
                    try:
                        te = eager.images_per_s(steps, warmup=m["warmup"])
                        tg = graphed.images_per_s(steps, warmup=m["warmup"]) if graphed else None
                        row["torch_eager"].append(te)
                        row["torch_graph"].append(tg)
                    except Stop:
                        raise
                    except Exception as e:  # noqa: BLE001
                        row["errors"].append(f"torch: {type(e).__name__}: {e}")
                        eager = graphed = None
                if eager_amp is not None:
                    try:
                        te = eager_amp.images_per_s(steps, warmup=m["warmup"])
                        tg = (graphed_amp.images_per_s(steps, warmup=m["warmup"]) if graphed_amp
                              else None)
                        row["torch_eager_amp"].append(te)
                        row["torch_graph_amp"].append(tg)
                    except Stop:
                        raise
                    except Exception as e:  # noqa: BLE001
                        row["errors"].append(f"torch amp: {type(e).__name__}: {e}")
                        eager_amp = graphed_amp = None
                row["round_s"] = time.perf_counter() - t_round
                msg = f"{cfg} round {rep + 1}: "
                if ls:
                    msg += (f"loom step {ls['images_per_s']:.0f} img/s (device "
                            f"{fmt(ls['device_peak_mib'], '{:.0f} MiB', 1)}), ")
                if lsa:
                    msg += (f"loom step amp {lsa['images_per_s']:.0f} img/s (device "
                            f"{fmt(lsa['device_peak_mib'], '{:.0f} MiB', 1)}, plan "
                            f"{fmt(lsa['plan_mib'], '{:.1f} MiB', 1)}), ")
                if lo:
                    msg += (f"loom {lo['images_per_s']:.0f} img/s (loop "
                            f"{lo['loop_images_per_s'] or 0:.0f}, data wait "
                            f"{100 * (lo['data_wait_fraction'] or 0):.1f}%, "
                            f"compile {lo['compile_ms']} ms, "
                            f"device {fmt(lo['device_peak_mib'], '{:.0f} MiB', 1)}"
                            .replace("device -", "device n/a") + f", wall {lo['wall_s']:.1f} s)")
                else:
                    msg += "loom failed" if m["loom"] else "loom -"
                if row["torch_eager"] and len(row["torch_eager"]) == rep + 1:
                    msg += (f", torch eager {row['torch_eager'][-1]:.0f}, "
                            f"graph {fmt(row['torch_graph'][-1], '{:.0f}', 1)} img/s")
                if a.amp and len(row["torch_eager_amp"]) == rep + 1:
                    msg += (f", torch amp eager {row['torch_eager_amp'][-1]:.0f}, "
                            f"graph {fmt(row['torch_graph_amp'][-1], '{:.0f}', 1)} img/s")
                print(f"{msg} ({row['round_s']:.1f} s)", flush=True)
        except Stop as e:
            stopped = f"stopped by {e}"
            row["errors"].append(stopped)
        finally:
            row["config_s"] = time.perf_counter() - t_cfg
            if "round_s" in row:
                done = max(1, len(row["torch_eager"]), len(row["loom"]))
                slow = max(slow, row["config_s"] / (est_setup[model] + done * est_round[model]))
            del eager, graphed, eager_amp, graphed_amp
            if cuda:
                torch.cuda.empty_cache()
        mem = row["memory"]
        if "torch_params" in mem:
            want = m.get("params")
            print(f"{cfg}: PyTorch's network: {mem['torch_params']:,} trainable values"
                  + (f" (loom's: {want:,})" if want else ""), flush=True)
        if "torch_peak_mib" in mem:
            print(f"{cfg}: torch peak device memory {mem.get('torch_peak_mib', 0):.0f} MiB eager "
                  f"({mem.get('torch_first_peak_mib', 0):.0f} with cudnn.benchmark's searches), "
                  f"{mem.get('torch_graph_peak_mib', 0):.0f} MiB graphed", flush=True)
        if "torch_amp_peak_mib" in mem:
            print(f"{cfg}: torch amp peak device memory {mem['torch_amp_peak_mib']:.0f} MiB eager "
                  f"({mem.get('torch_amp_first_peak_mib', 0):.0f} with cudnn.benchmark's "
                  f"searches), {fmt(mem.get('torch_amp_graph_peak_mib'), '{:.0f} MiB', 1)} "
                  "graphed", flush=True)
        for err in dict.fromkeys(row["errors"]):
            print(f"{cfg}: {err}", flush=True)
        results.append(row)
        write_json()  # after every configuration: a run cut short keeps what it measured

    try:
        print_tables(header, results, amp_note)
    except Stop:
        pass
    write_json()
    print(f"gpu_vs_torch: {time.perf_counter() - start:.0f} s", flush=True)
    failed = stopped or any(r["errors"] for r in results)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
