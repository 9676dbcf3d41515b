#!/usr/bin/python3
"""Inference latency, loom next to ONNX Runtime, in one run on the same machine.

    /usr/bin/python3 bench/infer_vs_ort.py                      # lenet b1 and b32, resnet50 b1
    /usr/bin/python3 bench/infer_vs_ort.py --model lenet --batch 1 32 --runs 2000 --repeats 5
    /usr/bin/python3 bench/infer_vs_ort.py --model resnet50 --batch 1 --threads 2 \
        --workdir /tmp/infer       # keeps the exported .mindir, .onnx and .npy files there
    /usr/bin/python3 bench/infer_vs_ort.py --onnx-from loom   # ONNX Runtime on loom's own .onnx
    /usr/bin/python3 bench/infer_vs_ort.py --loom-reads onnx  # both run PyTorch's very .onnx

For each model and batch size the network is exported twice: by loom (`loom export MODEL --batch
B`, the model zoo's network as MindIR; resnet50 with `--dataset fake-imagenet`, the ImageNet
layout: 3x224x224, 1000 classes; lenet 1x32x32, 10 classes) and by PyTorch (Debian's
python3-torch: bench/train_vs_torch.py's definitions of the same networks, MindSpore's padding
included, in eval mode, `torch.onnx.export` at a fixed batch, opset 17 or the highest this torch
writes). The weights are each side's own initial values, not the same numbers: latency does not
depend on them. Both sides read the same random float32 input (.npy).

A figure is `repeats` runs of each side, interleaved (loom, ONNX Runtime, loom, ...), each in a
fresh process, so drifts of the machine hit both alike. A run calls the model `warmup` times
untimed, then `runs` times, each call timed on its own, with the input already in memory:

  * loom: `loom run FILE.mindir --input X.npy --repeat N --warmup W` with LOOM_NUM_THREADS=threads,
    whose last line reads `latency: N runs, median 23.4 us, min 21.0 us, p90 30.1 us, mean ...`;
  * ONNX Runtime: bench/ort_worker.py under the venv's Python, one InferenceSession on the
    CPUExecutionProvider, ORT_ENABLE_ALL, intra_op_num_threads=threads, inter_op_num_threads=1.

Prints each run's median latency, the median of those medians per side, the ratio loom / ONNX
Runtime of the latencies (below 1: loom is faster) and images/s (batch / median latency).

ONNX Runtime comes from PyPI into a venv made once and cached at
${LOOM_ORT_VENV:-$HOME/.cache/loom/venv-ort} (versions pinned below: ORT_REQUIREMENTS; a venv
holding other versions is made again), one creator at a time (a lock file beside it). When it
cannot be made (no venv module, PyPI unreachable, no wheel for this Python) the script prints one
line saying why and exits 77.
"""
import argparse
import fcntl
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import warnings

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import train_vs_torch  # noqa: E402
from train_vs_torch import LeNet5, ResNet, processor_name  # noqa: E402

# The versions verified (numpy below 2, which onnxruntime 1.32 and onnx 1.23 accept).
ORT_REQUIREMENTS = ["onnxruntime==1.32.0", "numpy==1.26.4", "onnx==1.23.2"]
OPSET = 17

# name: (PyTorch constructor, sample shape, `loom export` flags, default batches, runs, warm-up)
MODELS = {
    "lenet": (LeNet5, (1, 32, 32), [], [1, 32], 2000, 200),
    "resnet50": (lambda: ResNet(50, 1000, 3, True), (3, 224, 224),
                 ["--dataset", "fake-imagenet"], [1], 50, 5),
}

LATENCY = re.compile(r"^latency: (\d+) runs, median (\S+) us, min (\S+) us, p90 (\S+) us, "
                     r"mean (\S+) us\s*$", re.M)


def fail(msg, proc=None, cmd=None):
    """Prints what failed (the command, the tail of its stderr and stdout) and exits 1."""
    print(f"FAILED: {msg}")
    if cmd:
        print("  command: " + " ".join(cmd))
    if proc is not None:
        for stream, text in (("stderr", proc.stderr), ("stdout", proc.stdout)):
            lines = (text or "").strip().splitlines()
            for line in lines[-10:]:
                print(f"  {stream}: {line}")
    sys.exit(1)


def venv_versions(python):
    """{package: version} of onnxruntime, onnx and numpy in `python`, or None when it lacks one."""
    if not os.access(python, os.X_OK):
        return None
    p = subprocess.run(
        [python, "-c", "import onnxruntime, onnx, numpy; "
                       "print(onnxruntime.__version__, onnx.__version__, numpy.__version__)"],
        capture_output=True, text=True)
    if p.returncode != 0:
        return None
    return dict(zip(["onnxruntime", "onnx", "numpy"], p.stdout.split()))


def venv_ready(python):
    """Whether `python` imports onnxruntime, onnx and numpy at the pinned versions."""
    have = venv_versions(python) or {}
    return all(have.get(r.split("==")[0]) == r.split("==")[1] for r in ORT_REQUIREMENTS)


def ort_python():
    """The ONNX Runtime venv's python, made once (under a lock); exits 77 when it cannot be."""
    venv = os.environ.get("LOOM_ORT_VENV") or os.path.join(
        os.environ.get("HOME") or "/tmp", ".cache", "loom", "venv-ort")
    python = os.path.join(venv, "bin", "python")

    def missing(why):
        print(f"SKIPPED: no ONNX Runtime venv at {venv}: {why}")
        sys.exit(77)

    try:
        os.makedirs(os.path.dirname(venv), exist_ok=True)
    except OSError as e:
        missing(f"cannot create {os.path.dirname(venv)} ({e.strerror})")
    try:
        lock = open(venv + ".lock", "w")
    except OSError as e:
        missing(f"cannot create the lock {venv}.lock ({e.strerror})")
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not venv_ready(python):
            shutil.rmtree(venv, ignore_errors=True)
            creator = shutil.which("python3") or sys.executable
            p = subprocess.run([creator, "-m", "venv", venv], capture_output=True, text=True)
            if p.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                missing(f"{creator} -m venv failed (python3-venv missing?)")
            print(f"creating {venv} (pip install {' '.join(ORT_REQUIREMENTS)}, once)", flush=True)
            p = subprocess.run(
                [os.path.join(venv, "bin", "pip"), "install", "--disable-pip-version-check", "-q",
                 "--timeout", "60", "--retries", "1"] + ORT_REQUIREMENTS,
                capture_output=True, text=True)
            if not venv_ready(python):
                shutil.rmtree(venv, ignore_errors=True)
                err = (p.stderr or p.stdout).strip().splitlines()
                why = err[-1] if err else f"exit {p.returncode}"
                missing(f"pip install failed (PyPI unreachable, or no wheel for "
                        f"{os.path.basename(creator)}?): {why}")
    return python


def max_opset():
    """The highest ONNX opset this torch exports."""
    try:
        from torch.onnx import _constants
        return _constants.ONNX_MAX_OPSET
    except (ImportError, AttributeError):
        from torch.onnx import symbolic_helper
        return symbolic_helper._onnx_stable_opsets[-1]


def export_onnx(model, batch, path, opset):
    """The PyTorch network in eval mode as ONNX at a fixed input shape.

    MindSpore's "same" padding (train_vs_torch.same_pad) is computed from the input's shape; the
    tracer would record that arithmetic as Shape / Gather / Div ... nodes in front of every Pad.
    The shapes being fixed, the sizes are taken as Python ints while exporting, so each Pad's
    amounts are constants (torch 1.13 still spells them as a small constant subgraph, which
    ORT_ENABLE_ALL folds when the session is made; the TracerWarnings of the ints are silenced)."""
    torch.manual_seed(1)
    net = MODELS[model][0]().eval()
    x = torch.randn(batch, *MODELS[model][1])
    same_pad = train_vs_torch.same_pad
    train_vs_torch.same_pad = lambda size, k, s: same_pad(int(size), k, s)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(net, x, path, opset_version=opset, input_names=["x"],
                              output_names=["logits"], do_constant_folding=True)
    finally:
        train_vs_torch.same_pad = same_pad


def export_loom(loom, model, batch, path):
    cmd = [loom, "export", model, "--output", path, "--batch", str(batch)] + MODELS[model][2]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"loom export {model} --batch {batch} (exit {p.returncode})", p, cmd)


def loom_run(loom, mindir, npy, runs, warmup, threads):
    cmd = [loom, "run", mindir, "--input", npy, "--repeat", str(runs), "--warmup", str(warmup)]
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, LOOM_NUM_THREADS=str(threads)))
    m = LATENCY.search(p.stdout)
    if p.returncode != 0:
        fail(f"loom run (exit {p.returncode})", p, cmd)
    if not m:
        fail("loom run printed no line 'latency: N runs, median X us, min X us, p90 X us, "
             "mean X us'", p, cmd)
    return {"runs": int(m.group(1)), "median_us": float(m.group(2)),
            "min_us": float(m.group(3)), "p90_us": float(m.group(4)),
            "mean_us": float(m.group(5))}


def ort_run(python, onnx_path, npy, runs, warmup, threads):
    cmd = [python, os.path.join(BENCH, "ort_worker.py"), "--model", onnx_path, "--input", npy,
           "--threads", str(threads), "--runs", str(runs), "--warmup", str(warmup)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"ONNX Runtime run (exit {p.returncode})", p, cmd)
    return json.loads(p.stdout.strip().splitlines()[-1])


def loom_version(loom):
    p = subprocess.run([loom, "info"], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{loom} info (exit {p.returncode})", p, [loom, "info"])
    lines = p.stdout.splitlines()
    info = dict(line.split(": ", 1) for line in lines if ": " in line)
    return lines[0] if lines else "loom ?", info


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loom", default=os.path.join(ROOT, "build", "bin", "loom"))
    ap.add_argument("--model", nargs="+", default=sorted(MODELS), choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, nargs="+", default=None,
                    help="batch sizes (default: 1 32 for lenet, 1 for resnet50)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side per figure")
    ap.add_argument("--runs", type=int, default=None,
                    help="timed calls per run (default: lenet 2000, resnet50 50)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed calls before them (default: lenet 200, resnet50 5)")
    ap.add_argument("--workdir", default=None,
                    help="where the exported models and inputs go (kept; default: a temporary "
                         "directory, removed at the end)")
    ap.add_argument("--loom-reads", choices=["mindir", "onnx"], default="mindir",
                    help="what `loom run` runs: loom's own export of the network (.mindir) or the "
                         "very .onnx file ONNX Runtime runs (loom's ONNX import: the same graph "
                         "and weights on both sides)")
    ap.add_argument("--onnx-from", choices=["torch", "loom"], default="torch",
                    help="who writes the .onnx ONNX Runtime runs: PyTorch (torch.onnx.export of "
                         "the same architecture, its own weights) or loom (`loom export --output "
                         "M.onnx`: the very graph and weights loom runs from its .mindir)")
    a = ap.parse_args()
    if not os.access(a.loom, os.X_OK):
        print(f"FAILED: no loom at {a.loom} (build it: cmake --build build --target loom_cli)")
        return 1

    python = ort_python()
    version, info = loom_version(a.loom)
    opset = min(OPSET, max_opset())
    torch.set_num_threads(a.threads)
    workdir = a.workdir or tempfile.mkdtemp(prefix="loom-infer-")
    os.makedirs(workdir, exist_ok=True)

    versions = venv_versions(python)
    print(f"processor: {processor_name()}, {os.cpu_count()} hardware threads; {a.threads} threads "
          f"on each side")
    print(f"{version}: LOOM_NUM_THREADS={a.threads}; convolutions: {info.get('convolutions', '?')}")
    print(f"onnxruntime {versions['onnxruntime']} (numpy {versions['numpy']}, onnx "
          f"{versions['onnx']}; venv {os.path.dirname(os.path.dirname(python))}): "
          f"CPUExecutionProvider, ORT_ENABLE_ALL, intra_op_num_threads={a.threads}, "
          f"inter_op_num_threads=1")
    if a.onnx_from == "loom":
        opset = OPSET
        print(f"ONNX models: loom export --output M.onnx (opset {OPSET}): the graph and weights "
              f"of the .mindir loom runs")
    else:
        print(f"ONNX models: torch {torch.__version__} torch.onnx.export, opset {opset}"
              f"{'' if opset == OPSET else f' (the highest it writes; {OPSET} asked)'}, fixed "
              f"batch, eval mode, bench/train_vs_torch.py's networks")
        if a.loom_reads == "mindir":
            print("weights: each side its own initial values (latency does not depend on them); "
                  "the same architecture and the same input array on both sides")
    if a.loom_reads == "onnx":
        print("loom runs the same .onnx file as ONNX Runtime (loom run M.onnx: its ONNX import)")
    print(f"each figure: {a.repeats} run{'s' if a.repeats != 1 else ''} per side, interleaved, "
          f"each in a fresh process; a run: "
          f"warm-up calls untimed, then each call timed on its own", flush=True)
    results = []
    try:
        for model in a.model:
            sample, runs0, warm0 = MODELS[model][1], MODELS[model][4], MODELS[model][5]
            runs = a.runs if a.runs is not None else runs0
            warmup = a.warmup if a.warmup is not None else warm0
            for batch in a.batch or MODELS[model][3]:
                stem = os.path.join(workdir, f"{model}_b{batch}")
                export_loom(a.loom, model, batch, stem + ".mindir")
                if a.onnx_from == "loom":
                    export_loom(a.loom, model, batch, stem + ".onnx")
                else:
                    export_onnx(model, batch, stem + ".onnx", opset)
                rng = np.random.default_rng(1)
                np.save(stem + ".npy", rng.standard_normal((batch,) + sample, dtype=np.float32))
                lo, ox = [], []
                loom_model = stem + (".onnx" if a.loom_reads == "onnx" else ".mindir")
                for _ in range(a.repeats):
                    lo.append(loom_run(a.loom, loom_model, stem + ".npy", runs, warmup,
                                       a.threads))
                    ox.append(ort_run(python, stem + ".onnx", stem + ".npy", runs, warmup,
                                      a.threads))
                    if ox[-1]["providers"][:1] != ["CPUExecutionProvider"] or \
                            ox[-1]["opset"] != opset:
                        print(f"note: the ONNX Runtime session reports providers "
                              f"{ox[-1]['providers']}, opset {ox[-1]['opset']}")
                for name, rs in (("loom", lo), ("onnxruntime", ox)):
                    meds = [r["median_us"] for r in rs]
                    med = statistics.median(meds)
                    print(f"{model:8s} batch {batch:3d}  {name:11s} median us per run "
                          f"{', '.join(f'{m:.1f}' for m in meds)}  -> {med:.1f} us"
                          f" (min {min(r['min_us'] for r in rs):.1f}, p90 "
                          f"{statistics.median(r['p90_us'] for r in rs):.1f}; "
                          f"{runs} calls after {warmup} warm-up)  {batch * 1e6 / med:,.0f} img/s",
                          flush=True)
                results.append((model, batch, statistics.median(r["median_us"] for r in lo),
                                statistics.median(r["median_us"] for r in ox)))
    finally:
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    print(f"{'model':9s} {'batch':>5s} {'loom us':>10s} {'ORT us':>10s} {'loom/ORT':>9s} "
          f"{'loom img/s':>11s} {'ORT img/s':>11s}")
    for model, batch, lm, om in results:
        print(f"{model:9s} {batch:5d} {lm:10.1f} {om:10.1f} {lm / om:9.2f} "
              f"{batch * 1e6 / lm:11,.0f} {batch * 1e6 / om:11,.0f}")
    print("loom/ORT: ratio of the median latencies (below 1: loom is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
