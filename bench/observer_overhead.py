#!/usr/bin/env python3
"""What an observer costs a training step: loom_bench_train with and without one (--check-numerics,
or --profile), runs interleaved (without, with, without, ...), medians.

--check-numerics: every floating output of every launch tested for NaN/Inf as it is produced,
the step run without in-place reuse (it reports the inputs a kernel read). --profile: the
profiler recording every timed step (launch times, the pool's spans). bench/README.md
("Checking numerics", "Profiler") has the results.
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(bench, model, batch, steps, threads, flag):
    cmd = [bench, "--model", model, "--batch", str(batch), "--steps", str(steps),
           "--repeats", "1", "--threads", str(threads)]
    if flag:
        cmd.append(flag)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", default="build/bin/loom_bench_train")
    p.add_argument("--model", default="lenet")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--flag", default="--check-numerics", choices=["--check-numerics", "--profile"])
    a = p.parse_args()
    off, on = [], []
    for r in range(a.repeats):
        off.append(run(a.bench, a.model, a.batch, a.steps, a.threads, None))
        on.append(run(a.bench, a.model, a.batch, a.steps, a.threads, a.flag))
        print(f"run {r}: {off[-1]['median']:.1f} / {on[-1]['median']:.1f} images/s, "
              f"peak RSS {off[-1]['peak_rss_mib']:.0f} / {on[-1]['peak_rss_mib']:.0f} MiB",
              flush=True)
    m0 = statistics.median(x["median"] for x in off)
    m1 = statistics.median(x["median"] for x in on)
    r0 = statistics.median(x["peak_rss_mib"] for x in off)
    r1 = statistics.median(x["peak_rss_mib"] for x in on)
    print(f"{a.model} batch {a.batch}, {a.threads} threads, {a.steps} steps x {a.repeats} "
          f"interleaved runs each (medians)")
    print(f"without {a.flag}: {m0:.1f} images/s, peak RSS {r0:.1f} MiB")
    print(f"with {a.flag}:    {m1:.1f} images/s, peak RSS {r1:.1f} MiB")
    print(f"ratio with / without: images/s {m1 / m0:.3f}, peak RSS {r1 / r0:.3f}")


if __name__ == "__main__":
    sys.exit(main())
