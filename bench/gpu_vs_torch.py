#!/usr/bin/env python3
"""Training throughput on one GPU: loom against PyTorch, eager and as a CUDA graph, in one run.

    python3 bench/gpu_vs_torch.py --loom build/bin/loom [--data-dir DIR] [--json out.json]
    python3 bench/gpu_vs_torch.py --loom build/bin/loom --configs lenet:32 lenet:256 resnet18:256

For each configuration (model:batch; default LeNet-5 at batch 32 and 256, then ResNet-18 in
loom's 32x32 layout at batch 256 when the time budget allows), `repeats` rounds, interleaved:
  - loom: `loom train MODEL --device GPU --epochs 1 --batch-size B --train-samples N --json` on
    Fashion-MNIST, its JSON train_images_per_s (training steps only: data waits and compilation
    excluded) and N / train_loop_s (the whole step loop, data waits included);
  - PyTorch eager: the same network (bench/train_vs_torch.py's definitions of MindSpore's
    model-zoo LeNet-5 and ResNet) on one synthetic batch resident on the GPU, SGD with momentum
    0.9 (ResNet: weight decay 1e-4, as loom's recipe), softmax cross-entropy;
  - PyTorch CUDA graph: forward, backward and the optimizer step captured once
    (torch.cuda.graph, whole-network capture) and replayed.
FP32 throughout: TF32 off for cuBLAS and cuDNN in PyTorch (loom's CUDA backend uses
CUBLAS_PEDANTIC_MATH), cudnn.benchmark on. Prints the medians in a table with the GPU's name and
the ratios loom / PyTorch; --json writes every run's figures.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from train_vs_torch import LeNet5, ResNet  # noqa: E402

# model: (constructor, sample shape, classes, weight decay, steps per timed run by batch)
MODELS = {
    "lenet": (LeNet5, (1, 32, 32), 10, 0.0, {32: 600, 256: 150}),
    "resnet18": (lambda: ResNet(18, 10, 1, False), (1, 32, 32), 10, 1e-4, {}),
}
DEFAULT_STEPS = {"lenet": 150, "resnet18": 40}


def steps_for(model, batch):
    return MODELS[model][4].get(batch, DEFAULT_STEPS[model])


def loom_run(loom, model, batch, steps, data_dir, timeout, device="GPU"):
    cmd = [loom, "train", model, "--device", device, "--epochs", "1", "--batch-size", str(batch),
           "--train-samples", str(batch * steps), "--test-samples", str(batch), "--json"]
    if data_dir:
        cmd += ["--data-dir", data_dir]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stdout + p.stderr).strip().splitlines()[-8:]
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n  " + "\n  ".join(tail))
    r = json.loads(lines[-1])
    loop = r.get("train_loop_s") or 0
    return {"images_per_s": r["train_images_per_s"],
            "loop_images_per_s": batch * steps / loop if loop else None,
            "train_loop_s": loop, "compile_ms": r.get("compile_ms"), "wall_s": wall}


class TorchTrainer:
    """One network, optimizer and synthetic batch on the GPU; eager steps or a captured graph."""

    def __init__(self, model, batch, graphed, device="cuda"):
        make, sample, classes, wd = MODELS[model][:4]
        torch.manual_seed(1)
        self.device = device
        self.net = make().to(device).train()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9,
                                   weight_decay=wd)
        self.x = torch.randn(batch, *sample, device=device)
        self.y = torch.randint(0, classes, (batch,), device=device)
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
                self.loss = F.cross_entropy(self.net(self.x), self.y)
                self.loss.backward()
                self.opt.step()
        self.sync()

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def eager_step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.net(self.x), self.y)
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


def median(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def fmt(x, spec="{:10.0f}"):
    return spec.format(x) if x is not None else "{:>10}".format("-")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loom", default=os.environ.get("LOOM", "build/bin/loom"))
    ap.add_argument("--data-dir", default=None, help="Fashion-MNIST (default: where loom finds it)")
    ap.add_argument("--configs", nargs="+", default=["lenet:32", "lenet:256", "resnet18:256"],
                    help="model:batch pairs, in order (later ones are dropped past the budget)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=float, default=150,
                    help="seconds: a configuration starts only while it is likely to fit")
    ap.add_argument("--json", default=None, help="write every run's figures here")
    ap.add_argument("--device", choices=["GPU", "CPU"], default="GPU",
                    help="CPU: a dry run of this script where there is no GPU (no CUDA graphs)")
    a = ap.parse_args()
    start = time.perf_counter()

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

    results = []
    for i, cfg in enumerate(a.configs):
        model, batch = cfg.split(":")
        batch = int(batch)
        steps = steps_for(model, batch)
        elapsed = time.perf_counter() - start
        # A configuration's first round tells how long a round takes; ResNet rounds are longer.
        per_round = max((r.get("round_s", 8.0) for r in results), default=8.0) * (3 if "resnet" in model else 1)
        if i > 0 and elapsed + per_round * a.repeats > a.budget:
            print(f"{cfg}: skipped ({elapsed:.0f} s of the {a.budget:.0f} s budget used)")
            continue
        row = {"model": model, "batch": batch, "steps": steps, "loom": [], "torch_eager": [],
               "torch_graph": [], "errors": []}
        try:
            eager = TorchTrainer(model, batch, graphed=False, device="cuda" if cuda else "cpu")
            graphed = TorchTrainer(model, batch, graphed=True) if cuda else None
        except Exception as e:  # noqa: BLE001
            row["errors"].append(f"torch: {e}")
            eager = graphed = None
        t_cfg = time.perf_counter()
        for rep in range(a.repeats):
            t_round = time.perf_counter()
            left = a.budget - (t_round - start)
            if rep > 0 and left < (t_round - t_cfg) / rep:
                break
            try:
                row["loom"].append(loom_run(a.loom, model, batch, steps, a.data_dir,
                                            timeout=max(30, left), device=a.device))
            except Exception as e:  # noqa: BLE001
                row["errors"].append(f"loom: {e}")
                row["loom"].append(None)
            if eager is not None:
                row["torch_eager"].append(eager.images_per_s(steps))
                row["torch_graph"].append(graphed.images_per_s(steps) if graphed else None)
            row["round_s"] = time.perf_counter() - t_round
            lo = row["loom"][-1]
            print(f"{cfg} round {rep + 1}: loom "
                  f"{lo['images_per_s']:.0f} img/s (loop {lo['loop_images_per_s'] or 0:.0f}, "
                  f"wall {lo['wall_s']:.1f} s)" if lo else f"{cfg} round {rep + 1}: loom failed",
                  end="")
            if row["torch_eager"]:
                print(f", torch eager {row['torch_eager'][-1]:.0f}, "
                      f"graph {row['torch_graph'][-1] or 0:.0f} img/s", end="")
            print(f" ({row['round_s']:.1f} s)", flush=True)
        for err in dict.fromkeys(row["errors"]):
            print(f"{cfg}: {err}")
        del eager, graphed
        if cuda:
            torch.cuda.empty_cache()
        results.append(row)
        if a.json:  # after every configuration: a run cut short keeps what it measured
            with open(a.json, "w") as f:
                json.dump({"gpu": gpu, "torch": torch.__version__, "results": results}, f,
                          indent=1)

    print()
    print(header)
    print(f"{'model':<9} {'batch':>5} {'steps':>5} {'loom':>10} {'loom loop':>10} "
          f"{'torch':>10} {'torch graph':>11} {'loom/torch':>10} {'loom/graph':>10}   (images/s, "
          f"medians of {a.repeats})")
    for r in results:
        lo = median([x["images_per_s"] if x else None for x in r["loom"]])
        ll = median([x["loop_images_per_s"] if x else None for x in r["loom"]])
        te, tg = median(r["torch_eager"]), median(r["torch_graph"])
        r["median"] = {"loom": lo, "loom_loop": ll, "torch_eager": te, "torch_graph": tg}
        ratio = lambda x, y: x / y if x and y else None  # noqa: E731
        print(f"{r['model']:<9} {r['batch']:>5} {r['steps']:>5} {fmt(lo)} {fmt(ll)} {fmt(te)} "
              f"{fmt(tg, '{:11.0f}')} {fmt(ratio(lo, te), '{:10.2f}')} "
              f"{fmt(ratio(lo, tg), '{:10.2f}')}")
    print("loom: train_images_per_s (steps only); loom loop: images / train_loop_s (data waits "
          "included); torch: one synthetic batch resident on the GPU (no input copies)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": gpu, "torch": torch.__version__, "results": results}, f, indent=1)
    failed = any(not r["loom"] or any(x is None for x in r["loom"]) for r in results)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
