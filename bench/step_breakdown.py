#!/usr/bin/python3
"""Where a profiled step's microseconds go, from the profiler's timeline.

    build/bin/loom train lenet --epochs 1 --train-samples 6400 --profile prof \
        --profile-start-step 50 --profile-stop-step 150
    /usr/bin/python3 bench/step_breakdown.py prof [--rank 0]

Reads cpu_timeline_display_{rank}.json (`--profile`'s Trace Event file: the steps, each launch as
a "kernel" slice on the calling thread, and every chunk of the thread pool's parallel_for as a
"pool" slice on the thread that ran it) and prints, averaged over the profiled steps after the
first, in µs per step:

  step              the step's wall time (the data wait before it excluded);
  kernels           the launches' time, split into the time inside parallel_for chunks with every
                    thread of the pool busy, with some thread idle (the chunks ran out, or a
                    thread had not woken yet), and outside any chunk on the calling thread alone
                    (serial kernels and the code around the chunks);
  between kernels   the step's time outside every launch (the runtime's own work);
  wake-up           per launch that used a second thread, from the launch's start to that
                    thread's first chunk (its count, median and total), the latency of waking a
                    pool thread;
  core-µs idle      the pool's threads × kernel time minus the chunks' time and the calling
                    thread's time alone: what a perfect split of every kernel over every thread
                    would win; then the launches with the most of it (--top N, default 8).
"""
import argparse
import bisect
import json
import os
import statistics
import sys


def overlap(a0, a1, b0, b1):
    return max(0.0, min(a1, b1) - max(a0, b0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile_dir")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    path = os.path.join(a.profile_dir, f"cpu_timeline_display_{a.rank}.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"step_breakdown.py: {path}: {e}", file=sys.stderr)
        return 1
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    slices = [e for e in events if e.get("ph") == "X"]
    steps = sorted((e for e in slices if e.get("cat") == "step"), key=lambda e: e["ts"])
    kernels = sorted((e for e in slices if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    chunks = sorted((e for e in slices if e.get("cat") == "pool"), key=lambda e: e["ts"])
    threads = sorted({c["tid"] for c in chunks} | {k["tid"] for k in kernels})
    caller = kernels[0]["tid"] if kernels else None
    if len(steps) < 2:
        print(f"step_breakdown.py: {path}: expected at least 2 profiled steps, got {len(steps)}",
              file=sys.stderr)
        return 1
    chunk_ts = [c["ts"] for c in chunks]
    kernel_ts = [k["ts"] for k in kernels]
    rows = []
    wakeups = []
    per_node = {}  # launch name: [µs, idle core-µs, parallel or not]
    for st in steps[1:]:
        s0, s1 = st["ts"], st["ts"] + st["dur"]
        ks = kernels[bisect.bisect_left(kernel_ts, s0):bisect.bisect_left(kernel_ts, s1)]
        kernel_us = sum(k["dur"] for k in ks)
        all_busy = some_idle = chunk_us = 0.0
        for k in ks:
            k0, k1 = k["ts"], k["ts"] + k["dur"]
            inside = chunks[bisect.bisect_left(chunk_ts, k0):bisect.bisect_left(chunk_ts, k1)]
            node = per_node.setdefault(k["name"], [0.0, 0.0, bool(inside)])
            node[0] += k["dur"]
            if not inside:
                node[1] += (len(threads) - 1) * k["dur"]
                continue
            here = sum(c["dur"] for c in inside)
            chunk_us += here
            mine = sum(c["dur"] for c in inside if c["tid"] == caller)
            node[1] += len(threads) * k["dur"] - here - (k["dur"] - mine)
            # Sweep the chunks' edges: time with every thread in a chunk, with some.
            edges = sorted({c["ts"] for c in inside} | {c["ts"] + c["dur"] for c in inside})
            for t0, t1 in zip(edges, edges[1:]):
                busy = {c["tid"] for c in inside if overlap(t0, t1, c["ts"], c["ts"] + c["dur"])}
                if len(busy) == len(threads):
                    all_busy += t1 - t0
                elif busy:
                    some_idle += t1 - t0
            others = [c["ts"] for c in inside if c["tid"] != caller]
            if others:
                wakeups.append(min(others) - k0)
        rows.append({"step": st["dur"], "kernels": kernel_us, "all": all_busy, "some": some_idle,
                     "serial": kernel_us - all_busy - some_idle, "between": st["dur"] - kernel_us,
                     "idle": len(threads) * kernel_us - chunk_us
                     - (kernel_us - all_busy - some_idle),  # serial time counts its own thread
                     "launches": len(ks)})
    mean = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
    n = len(rows)
    print(f"{path}: {n} steps after the first, {len(threads)} pool threads, "
          f"{mean['launches']:.0f} launches a step; µs per step (mean)")
    print(f"  step                               {mean['step']:9.1f}")
    print(f"  kernels                            {mean['kernels']:9.1f}  "
          f"({100 * mean['kernels'] / mean['step']:.1f}%)")
    print(f"    every pool thread in a chunk     {mean['all']:9.1f}")
    print(f"    some pool thread idle            {mean['some']:9.1f}")
    print(f"    calling thread alone             {mean['serial']:9.1f}")
    print(f"  between kernels                    {mean['between']:9.1f}  "
          f"({100 * mean['between'] / mean['step']:.1f}%)")
    if wakeups:
        per_step = len(wakeups) / n
        print(f"  wake-up of a second thread         {statistics.median(wakeups):9.1f} median, "
              f"{per_step:.0f} launches a step, {sum(wakeups) / n:.1f} µs a step in all")
    print(f"  core-µs idle inside kernels        {mean['idle']:9.1f}  "
          f"(of {len(threads) * mean['kernels']:.1f} core-µs)")
    print(f"launches with the most idle core-µs (per step): launch, µs, idle core-µs, split")
    for name, (us, idle, par) in sorted(per_node.items(), key=lambda kv: -kv[1][1])[:a.top]:
        print(f"  {name:32s} {us / n:8.1f} {idle / n:8.1f}  {'parallel_for' if par else 'serial'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
