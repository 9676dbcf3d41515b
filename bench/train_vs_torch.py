#!/usr/bin/python3
"""Training-step throughput, loom next to PyTorch, in one run on the same machine.

    /usr/bin/python3 bench/train_vs_torch.py --loom build/bin/loom_bench_train \
        --model lenet --batch 32 256 --steps 200 --repeats 5 --threads 2
    /usr/bin/python3 bench/train_vs_torch.py --loom build/bin/loom_bench_train \
        --model resnet18 --batch 32          # small-image layout, 1x32x32, 10 classes
    /usr/bin/python3 bench/train_vs_torch.py --loom build/bin/loom_bench_train \
        --model resnet50 --batch 8           # ImageNet layout, 3x224x224, 1000 classes

For each batch size: loom (build/bin/loom_bench_train, one process) and PyTorch (Debian's
python3-torch) train the same network definition with Momentum (lr 0.01, momentum 0.9) and
softmax cross-entropy on one fixed random batch held in memory, `threads` threads each; after
warm-up steps, `repeats` timed runs of `steps` steps. The runs are interleaved (loom, PyTorch,
loom, PyTorch, ...), each in a fresh process, so drifts of the machine hit both alike and each peak
RSS is that of one framework training one model at one batch size. Prints images/s per run, the
median and spread (max/min) of each, the peak RSS, and last the ratios loom / PyTorch of the
medians and of the peak RSS.

PyTorch is configured as a user who tunes it would: its OpenBLAS on the kernel that loom's own
OpenBLAS uses on this processor (OPENBLAS_CORETYPE, read from `loom info`: Debian's OpenBLAS
misdetects some AVX-512 processors and falls back to SSE3 kernels) and OPENBLAS_NUM_THREADS=1
(PyTorch's intra-op threads do the parallel work: torch.set_num_threads(threads)). The worker
reports the kernel its OpenBLAS really runs, and the header prints the processor and every
framework's configuration once.

MindSpore 2.10 (the venv tests/mindspore_venv.sh makes; --mindspore off to leave it out) is a third
column for LeNet and ResNet-18: bench/ms_worker.py, graph mode on the CPU with its default
settings and runtime_num_threads=threads. Its ResNet-18 step takes about a minute on 2 cores, so
it gets one run of --ms-steps steps (default 2 after 1 warm-up) within --ms-budget seconds.

--amp LEVEL:DTYPE (e.g. auto:bfloat16) compares mixed precision instead: four columns in turn,
loom and PyTorch in Float32, loom at that amp level (core/passes/amp.h) and PyTorch under
torch.autocast("cpu", dtype=DTYPE) (its lists: the products and convolutions in DTYPE, the
rest as their inputs or Float32, as loom's "auto"), with each framework's amp / Float32 ratio,
loom's planned step memory (plan_mib: the activations) in both, and loom / PyTorch under amp.

The ResNets are models/resnet/resnet.cc's (MindSpore's model zoo): the same blocks, channel
counts and BatchNorm eps / momentum (MindSpore's momentum m is PyTorch's 1 - m), and
MindSpore's padding: ResNet-18 pads its 3x3 convolutions by 1 (pad_mode "pad"), ResNet-50 uses
pad_mode "same" (a stride-2 3x3 on an even size pads 0 before and 1 after, the 7x7 stem 2 and 3;
the stem's 3x3 stride-2 max-pool is "same" too, padding with -inf). Their optimizer is the
recipe's: Momentum 0.9 with weight decay 1e-4 (LeNet: none).
"""
import argparse
import ctypes
import json
import math
import os
import resource
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


def same_pad(size, k, s):
    """MindSpore's pad_mode "same": (before, after) padding of one spatial axis."""
    out = math.ceil(size / s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


class SameConv2d(nn.Conv2d):
    """Conv2d with MindSpore's pad_mode "same" (asymmetric when the total padding is odd)."""

    def forward(self, x):
        k, s = self.kernel_size[0], self.stride[0]
        top, bottom = same_pad(x.shape[2], k, s)
        left, right = same_pad(x.shape[3], k, s)
        if top or bottom or left or right:
            x = F.pad(x, (left, right, top, bottom))
        return F.conv2d(x, self.weight, None, self.stride)


def conv(cin, cout, k, stride, res_base):
    if res_base:  # pad_mode "pad", padding k // 2
        return nn.Conv2d(cin, cout, k, stride, padding=k // 2, bias=False)
    return SameConv2d(cin, cout, k, stride, bias=False)


def bn(channels, res_base=False):
    # resnet.py's _bn: MindSpore momentum 0.9 (eps 1e-4), or 0.1 (eps 1e-5) for res_base's stem
    # and down-sample BatchNorms; PyTorch's momentum is 1 - MindSpore's.
    return nn.BatchNorm2d(channels, eps=1e-5, momentum=0.9) if res_base else \
        nn.BatchNorm2d(channels, eps=1e-4, momentum=0.1)


class BasicBlock(nn.Module):
    """MindSpore's ResidualBlockBase (ResNet-18/34)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1d = conv(cin, cout, 3, stride, True), bn(cout)
        self.conv2, self.bn2d = conv(cout, cout, 3, 1, True), bn(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(conv(cin, cout, 1, stride, True), bn(cout, True))

    def forward(self, x):
        out = F.relu(self.bn1d(self.conv1(x)))
        out = self.bn2d(self.conv2(out))
        return F.relu(out + (self.down(x) if self.down is not None else x))


class Bottleneck(nn.Module):
    """MindSpore's ResidualBlock (ResNet-50/101), expansion 4, stride on the 3x3."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        ch = cout // 4
        self.conv1, self.bn1 = conv(cin, ch, 1, 1, False), bn(ch)
        self.conv2, self.bn2 = conv(ch, ch, 3, stride, False), bn(ch)
        self.conv3, self.bn3 = conv(ch, cout, 1, 1, False), bn(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(conv(cin, cout, 1, stride, False), bn(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.down(x) if self.down is not None else x))


ARCH = {18: (False, (2, 2, 2, 2)), 34: (False, (3, 4, 6, 3)), 50: (True, (3, 4, 6, 3)),
        101: (True, (3, 4, 23, 3))}


class ResNet(nn.Module):
    def __init__(self, depth, num_class, in_channel, imagenet):
        super().__init__()
        bottleneck, nums = ARCH[depth]
        res_base = not bottleneck
        ins = (64, 256, 512, 1024) if bottleneck else (64, 64, 128, 256)
        outs = (256, 512, 1024, 2048) if bottleneck else (64, 128, 256, 512)
        self.imagenet, self.res_base = imagenet, res_base
        self.conv1 = conv(in_channel, 64, 7 if imagenet else 3, 2 if imagenet else 1, res_base)
        self.bn1 = bn(64, res_base)
        block = Bottleneck if bottleneck else BasicBlock
        layers = []
        for s in range(4):
            layers.append(nn.Sequential(*[
                block(ins[s] if b == 0 else outs[s], outs[s], (1, 2, 2, 2)[s] if b == 0 else 1)
                for b in range(nums[s])]))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.end_point = nn.Linear(outs[3], num_class)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if self.imagenet:
            if self.res_base:  # nn.Pad by 1 with zeros, then max-pool "valid"
                x = F.max_pool2d(F.pad(x, (1, 1, 1, 1)), 3, 2)
            else:  # max-pool "same": pad with -inf
                top, bottom = same_pad(x.shape[2], 3, 2)
                left, right = same_pad(x.shape[3], 3, 2)
                x = F.max_pool2d(F.pad(x, (left, right, top, bottom), value=-math.inf), 3, 2)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(x.mean((2, 3), keepdim=True), 1)
        return self.end_point(x)


# name: (constructor, sample shape, classes, weight decay, loom_bench_train flags,
#        default steps and warm-up steps)
MODELS = {
    "lenet": (LeNet5, (1, 32, 32), 10, 0.0, [], 200, 5),
    # the zoo's small-image layout as the resnet18 recipe trains it (Fashion-MNIST: 1x32x32)
    "resnet18": (lambda: ResNet(18, 10, 1, False), (1, 32, 32), 10, 1e-4, [], 20, 2),
    # ImageNet layout: 3x224x224, 1000 classes
    "resnet50": (lambda: ResNet(50, 1000, 3, True), (3, 224, 224), 1000, 1e-4, ["--imagenet"],
                 3, 1),
}


def peak_rss_mib():
    """VmHWM of this process (ru_maxrss survives exec on Linux and would report the parent's)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def torch_run(model, batch, steps, warmup, repeats, threads, amp_dtype=None):
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    make, sample, classes, wd = MODELS[model][:4]
    net = make()
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=wd)
    x = torch.randn(batch, *sample)
    y = torch.randint(0, classes, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        if amp_dtype:
            with torch.autocast("cpu", dtype=getattr(torch, amp_dtype)):
                loss = F.cross_entropy(net(x), y)
        else:
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
    return {"framework": "torch", "images_per_s": rates, "peak_rss_mib": peak_rss_mib(),
            "blas_core": blas_core_in_process(), "threads": torch.get_num_threads()}


def blas_core_in_process():
    """The kernel of the OpenBLAS that this process has loaded (PyTorch's BLAS), or why none."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "blas" in line and line.split()[-1].startswith("/")}
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return "no OpenBLAS loaded (" + ", ".join(sorted(paths)) + ")"


def torch_in_child(model, batch, steps, warmup, repeats, threads, env, amp_dtype=None):
    """torch_run in a fresh process (its own peak RSS) with the environment `env`."""
    out = subprocess.run(
        [sys.executable, __file__, "--worker", "--model", model, "--batch", str(batch), "--steps",
         str(steps), "--warmup", str(warmup), "--repeats", str(repeats), "--threads",
         str(threads)] + (["--amp", "x:" + amp_dtype] if amp_dtype else []),
        check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def ms_in_child(python, model, batch, steps, warmup, threads, budget):
    """bench/ms_worker.py with the MindSpore venv's Python; None when it fails (printed)."""
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ms_worker.py")
    p = subprocess.run(
        [python, worker, "--model", model, "--batch", str(batch), "--steps", str(steps),
         "--warmup", str(warmup), "--threads", str(threads), "--budget", str(budget)],
        capture_output=True, text=True, env=dict(os.environ, GLOG_v="3"))
    if p.returncode != 0:
        print(f"mindspore run failed (exit {p.returncode}): {p.stderr.strip().splitlines()[-3:]}")
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def mindspore_python(mode):
    """The MindSpore venv's python (made by tests/mindspore_venv.sh if missing), or None."""
    if mode == "off":
        return None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run(["bash", "-c", '. "$1/tests/mindspore_venv.sh" >&2 && echo "$venv"', "-",
                        root], capture_output=True, text=True)
    if p.returncode != 0:
        msg = (p.stdout + p.stderr).strip().splitlines()
        print(f"mindspore: no venv ({msg[-1] if msg else p.returncode})")
        if mode == "on":
            sys.exit(1)
        return None
    return os.path.join(p.stdout.strip().splitlines()[-1], "bin", "python")


def processor_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown processor"


def loom_info(bench_binary):
    """`loom info` of the build that made bench_binary, as a dict of its "key: value" lines."""
    loom = os.path.join(os.path.dirname(os.path.abspath(bench_binary)), "loom")
    out = subprocess.run([loom, "info"], check=True, capture_output=True, text=True).stdout
    info = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    info["version"] = out.splitlines()[0].split()[-1]  # "loom 0.2.0"
    return info


def loom_run(binary, model, batch, steps, warmup, repeats, threads, amp=None):
    out = subprocess.run(
        [binary, "--model", model, "--batch", str(batch), "--steps", str(steps), "--warmup",
         str(warmup), "--repeats", str(repeats), "--threads", str(threads)] + MODELS[model][4]
        + (["--amp", amp] if amp else []),
        check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def median(v):
    return sorted(v)[len(v) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loom", default="build/bin/loom_bench_train")
    ap.add_argument("--loom-before", default=None,
                    help="a second loom_bench_train (an earlier build) run in turn with --loom: "
                         "prints both and the ratio after / before")
    ap.add_argument("--model", default="lenet", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, nargs="+", default=None,
                    help="batch sizes (default: 32 256 for lenet, 32 for resnet18, 8 for resnet50)")
    ap.add_argument("--steps", type=int, default=None, help="steps per timed run (per-model default)")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mindspore", default="auto", choices=["auto", "on", "off"],
                    help="MindSpore 2.10 as a third column for lenet and resnet18 (auto: when its "
                         "venv can be made)")
    ap.add_argument("--ms-steps", type=int, default=2, help="MindSpore ResNet-18: steps timed")
    ap.add_argument("--ms-budget", type=float, default=240.0,
                    help="MindSpore: seconds of timed steps at most per run")
    ap.add_argument("--amp", default=None,
                    help="LEVEL:DTYPE: compare mixed precision (loom's amp level, PyTorch's "
                         "autocast to DTYPE) against Float32, in turn")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    default_steps, default_warmup = MODELS[a.model][5], MODELS[a.model][6]
    steps0 = a.steps if a.steps is not None else default_steps
    warmup = a.warmup if a.warmup is not None else default_warmup
    amp_dtype = a.amp.split(":")[1] if a.amp and ":" in a.amp else ("float16" if a.amp else None)
    if a.worker:
        print(json.dumps(torch_run(a.model, a.batch[0], steps0, warmup, a.repeats, a.threads,
                                   amp_dtype)))
        return 0
    batches = a.batch or {"lenet": [32, 256], "resnet18": [32], "resnet50": [8]}[a.model]
    info = loom_info(a.loom)
    core = info.get("BLAS kernel", "")
    torch_env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    if core:
        torch_env["OPENBLAS_CORETYPE"] = core
    ms_python = mindspore_python(a.mindspore) if a.model in ("lenet", "resnet18") else None
    print(f"processor: {processor_name()}, {os.cpu_count()} hardware threads")
    print(f"loom {info['version']}: {a.threads} threads, BLAS {info.get('BLAS', '?')} "
          f"kernel {core or '?'}; convolutions: {info.get('convolutions', '?')}")
    print(f"torch {torch.__version__}: torch.set_num_threads({a.threads}), "
          f"OPENBLAS_CORETYPE={torch_env.get('OPENBLAS_CORETYPE', '(unset)')} "
          f"OPENBLAS_NUM_THREADS=1, oneDNN {'on' if torch.backends.mkldnn.is_available() else 'off'}")
    if ms_python:
        print(f"mindspore (venv {os.path.dirname(os.path.dirname(ms_python))}): graph mode, CPU, "
              f"runtime_num_threads={a.threads}")
    print(f"model {a.model}, {steps0} steps x {a.repeats} runs per figure, interleaved")
    if a.amp:
        return amp_compare(a, batches, steps0, warmup, torch_env, amp_dtype)
    ratios = []
    for batch in batches:
        # LeNet's larger batches: half the steps per 4x the images (a run of loom at batch 256
        # lasts about 0.7 s, long enough to average over this machine's bursts of noise);
        # MindSpore, 60x slower, as many images as one run at batch 32.
        big = batch > 32 and a.model == "lenet"
        steps = max(10, steps0 * 128 // batch) if big else steps0
        ms_lenet_steps = max(10, steps0 * 32 // batch) if big else steps
        if a.loom_before:
            # before, after, before, after ...: one run each in turn, so drifts hit both alike.
            b_runs, l_runs = [], []
            for _ in range(a.repeats):
                b_runs.append(loom_run(a.loom_before, a.model, batch, steps, warmup, 1, a.threads))
                l_runs.append(loom_run(a.loom, a.model, batch, steps, warmup, 1, a.threads))
            bi = [r["images_per_s"][0] for r in b_runs]
            li = [r["images_per_s"][0] for r in l_runs]
            print(f"batch {batch:4d}  before images/s {', '.join(f'{r:.1f}' for r in bi)}"
                  f"  median {median(bi):.1f}  peak RSS {b_runs[-1]['peak_rss_mib']:.0f} MiB")
            print(f"batch {batch:4d}  after  images/s {', '.join(f'{r:.1f}' for r in li)}"
                  f"  median {median(li):.1f}  peak RSS {l_runs[-1]['peak_rss_mib']:.0f} MiB")
            print(f"ratio after/before, {a.model} batch {batch}: images/s "
                  f"{median(li) / median(bi):.3f}")
        lo_runs, pt_runs, ms_runs = [], [], []
        for r in range(a.repeats):
            lo_runs.append(loom_run(a.loom, a.model, batch, steps, warmup, 1, a.threads))
            pt_runs.append(torch_in_child(a.model, batch, steps, warmup, 1, a.threads, torch_env))
            if ms_python and (a.model == "lenet" or r == 0):
                ms_steps = ms_lenet_steps if a.model == "lenet" else a.ms_steps
                ms_warm = warmup if a.model == "lenet" else 1
                got = ms_in_child(ms_python, a.model, batch, ms_steps, ms_warm, a.threads,
                                  a.ms_budget)
                if got:
                    ms_runs.append(got)
        li = [r["images_per_s"][0] for r in lo_runs]
        pr = [r["images_per_s"][0] for r in pt_runs]
        lm, pm = median(li), median(pr)
        lo_rss = max(r["peak_rss_mib"] for r in lo_runs)
        pt_rss = max(r["peak_rss_mib"] for r in pt_runs)
        print(f"batch {batch:4d}  loom  images/s {', '.join(f'{r:.1f}' for r in li)}"
              f"  median {lm:.1f} spread {max(li) / min(li):.2f}"
              f"  compile {lo_runs[0]['compile_ms']:.1f} ms  peak RSS {lo_rss:.0f} MiB")
        print(f"batch {batch:4d}  torch images/s {', '.join(f'{r:.1f}' for r in pr)}"
              f"  median {pm:.1f} spread {max(pr) / min(pr):.2f}"
              f"  peak RSS {pt_rss:.0f} MiB  (its OpenBLAS kernel: {pt_runs[0]['blas_core']},"
              f" {pt_runs[0]['threads']} threads)")
        mm = None
        if ms_runs:
            mi = [r["images_per_s"][0] for r in ms_runs]
            mm = median(mi)
            print(f"batch {batch:4d}  mindspore {ms_runs[0]['version']} images/s "
                  f"{', '.join(f'{r:.2f}' for r in mi)}  median {mm:.2f}"
                  f"  ({ms_runs[0]['steps_timed']} steps timed per run, first compile and warm-up "
                  f"{ms_runs[0]['warmup_s']:.1f} s)  peak RSS "
                  f"{max(r['peak_rss_mib'] for r in ms_runs):.0f} MiB")
        ratios.append((batch, lm / pm, lo_rss / pt_rss, lm / mm if mm else None))
    for batch, r, m, rm in ratios:
        line = f"ratio loom/torch, {a.model} batch {batch}: images/s {r:.2f}, peak RSS {m:.2f}"
        if rm is not None:
            line += f"; loom/mindspore images/s {rm:.1f}"
        print(line)
    return 0


def amp_compare(a, batches, steps, warmup, torch_env, amp_dtype):
    """--amp: loom and PyTorch in Float32 and in mixed precision, in turn."""
    print(f"mixed precision: loom --amp {a.amp}; torch.autocast('cpu', dtype=torch.{amp_dtype})")
    for batch in batches:
        runs = {"loom f32": [], "torch f32": [], "loom amp": [], "torch amp": []}
        for _ in range(a.repeats):
            runs["loom f32"].append(loom_run(a.loom, a.model, batch, steps, warmup, 1, a.threads))
            runs["torch f32"].append(torch_in_child(a.model, batch, steps, warmup, 1, a.threads,
                                                    torch_env))
            runs["loom amp"].append(loom_run(a.loom, a.model, batch, steps, warmup, 1, a.threads,
                                             a.amp))
            runs["torch amp"].append(torch_in_child(a.model, batch, steps, warmup, 1, a.threads,
                                                    torch_env, amp_dtype))
        med = {}
        for name, rs in runs.items():
            v = [r["images_per_s"][0] for r in rs]
            med[name] = median(v)
            plan = f"  plan {rs[0]['plan_mib']:.1f} MiB" if "plan_mib" in rs[0] else ""
            print(f"batch {batch:4d}  {name:9s} images/s {', '.join(f'{x:.1f}' for x in v)}"
                  f"  median {med[name]:.1f}  peak RSS {max(r['peak_rss_mib'] for r in rs):.0f} MiB"
                  f"{plan}")
        print(f"ratio amp/f32, {a.model} batch {batch}: loom {med['loom amp'] / med['loom f32']:.2f},"
              f" torch {med['torch amp'] / med['torch f32']:.2f}; plan memory loom amp/f32 "
              f"{runs['loom amp'][0]['plan_mib'] / runs['loom f32'][0]['plan_mib']:.2f}")
        print(f"ratio loom/torch, {a.model} batch {batch}: f32 "
              f"{med['loom f32'] / med['torch f32']:.2f}, amp {med['loom amp'] / med['torch amp']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
