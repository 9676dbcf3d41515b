#!/usr/bin/env python3
"""How much summary writing slows LeNet training: `loom train lenet` without summaries, with
`--summary-dir D --summary-freq F` (the default collection) and with `--summary-collect
+gradients` added (gradient histograms and norms too), runs interleaved (none, default,
+gradients, none, ...), medians.

The figure is the wall time of the training loops (`train_loop_s`: data waits, steps and the
per-step callbacks, where the collector works) and, to count the writer thread's backlog at the
end too, the whole run's `total_s`; each overhead is (with - without) / without-loop for both.
bench/README.md ("Summaries") has the results.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# (label, extra flags; None: no summaries)
CONFIGS = [
    ("none", None),
    ("default", []),
    ("+gradients", ["--summary-collect", "+gradients"]),
]


def run(loom, args, summary_dir=None, freq=1, collect=None):
    cmd = [loom, "train", "lenet", "--json"] + args
    if summary_dir:
        cmd += ["--summary-dir", summary_dir, "--summary-freq", str(freq)] + (collect or [])
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
    runs = {label: [] for label, _ in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            line = []
            for label, collect in CONFIGS:
                d = None if collect is None else os.path.join(tmp, f"{label}{r}")
                x = run(a.loom, args, d, a.freq, collect)
                runs[label].append(x)
                line.append(f"{label} {x['train_loop_s']:.3f} / {x['total_s']:.3f}")
            print(f"run {r} (loop / total s): " + ", ".join(line), flush=True)
    med = lambda label, k: statistics.median(x[k] for x in runs[label])
    steps = a.train_samples // a.batch_size
    loop0, tot0 = med("none", "train_loop_s"), med("none", "total_s")
    print(f"lenet batch {a.batch_size}, {a.threads} threads, {steps} steps, summary-freq {a.freq}, "
          f"{a.repeats} interleaved runs each (medians)")
    for label, _ in CONFIGS:
        loop, tot = med(label, "train_loop_s"), med(label, "total_s")
        line = (f"{label:>11}: loop {loop:.3f} s ({1e3 * loop / steps:.3f} ms/step), "
                f"total {tot:.3f} s")
        if label != "none":
            line += (f"; overhead: training loop {100 * (loop - loop0) / loop0:+.1f} %, "
                     f"whole run {100 * (tot - tot0) / loop0:+.1f} % of the loop time")
        print(line)


if __name__ == "__main__":
    sys.exit(main())
