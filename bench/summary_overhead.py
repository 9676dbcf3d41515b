#!/usr/bin/env python3
"""How much summary writing slows LeNet training: `loom train lenet` with and without
`--summary-dir D --summary-freq F`, runs interleaved (without, with, without, ...), medians.

The figure is the wall time of the training loops (`train_loop_s`: data waits, steps and the
per-step callbacks, where the collector works) and, to count the writer thread's backlog at the
end too, the whole run's `total_s`; the overhead is (with - without) / without-loop for both.
bench/README.md ("Summaries") has the results.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(loom, args, summary_dir=None, freq=1):
    cmd = [loom, "train", "lenet", "--json"] + args
    if summary_dir:
        cmd += ["--summary-dir", summary_dir, "--summary-freq", str(freq)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loom", default="build/bin/loom")
    p.add_argument("--train-samples", type=int, default=19200, help="600 steps at batch 32")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--freq", type=int, default=1, help="--summary-freq")
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    args = ["--epochs", "1", "--train-samples", str(a.train_samples), "--test-samples", "320",
            "--batch-size", str(a.batch_size), "--threads", str(a.threads)]
    base, summ = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            base.append(run(a.loom, args))
            d = os.path.join(tmp, f"run{r}")
            summ.append(run(a.loom, args, d, a.freq))
            print(f"run {r}: loop {base[-1]['train_loop_s']:.3f} s / {summ[-1]['train_loop_s']:.3f} s,"
                  f" total {base[-1]['total_s']:.3f} s / {summ[-1]['total_s']:.3f} s", flush=True)
    med = lambda runs, k: statistics.median(x[k] for x in runs)
    loop0, loop1 = med(base, "train_loop_s"), med(summ, "train_loop_s")
    tot0, tot1 = med(base, "total_s"), med(summ, "total_s")
    steps = a.train_samples // a.batch_size
    print(f"lenet batch {a.batch_size}, {a.threads} threads, {steps} steps, summary-freq {a.freq}, "
          f"{a.repeats} interleaved runs each (medians)")
    print(f"without summaries: loop {loop0:.3f} s ({1e3 * loop0 / steps:.2f} ms/step), total {tot0:.3f} s")
    print(f"with summaries:    loop {loop1:.3f} s ({1e3 * loop1 / steps:.2f} ms/step), total {tot1:.3f} s")
    print(f"overhead: training loop {100 * (loop1 - loop0) / loop0:+.1f} %, "
          f"whole run {100 * (tot1 - tot0) / loop0:+.1f} % of the loop time")


if __name__ == "__main__":
    sys.exit(main())
