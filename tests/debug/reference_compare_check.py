#!/usr/bin/env python3
"""Checks the CSV of `loom compare LOOM_DUMP TORCH_DUMP --mapping MAP --csv CSV` for
tests/debug/reference_compare_test.sh.

  bounds     every mapping entry is a row; every row passes msprobe's rule and the float32
             bounds given (cosine, RelativeEucDist, MaxAbsErr relative to the bench tensor's
             largest magnitude, optionally the one-thousandth error ratio); prints the worst
             values per class of tensor (forward outputs, the loss, activation gradients,
             parameter gradients, ...)
  first-over ROW_BOUND: prints the NPU name of the first row (in A's execution order, the CSV's
             order) whose RelativeEucDist exceeds the bound, or nothing
  keys       LOOM_ITERATION_FOLDER: every loom key of the mapping names a tensor of the dump;
             exit 1 with "out of date" when one does not
"""
import argparse
import csv
import json
import math
import os
import re
import sys

_FILE = re.compile(r"^([^.]+)\.(.+)\.(\d+)\.(\d+)\.(\d+)\.(input|output)\.(\d+)\.([^.]+)\.npy$")


def number(text):
    if text == "N/A":
        return math.nan
    return float(text)


def classify(bench, calls):
    """The class of a row from its PyTorch key (debug/reference/README.md names)."""
    if bench.startswith("Gradient."):
        return "parameter gradients (Gradient files)"
    if bench.startswith("Parameter."):
        return "batch (Parameter.data/label)"
    m = re.fullmatch(r"(.+)\.(forward|backward)\.(input|output)\.(\d+)", bench)
    if not m:
        return "other"
    call, role, io, slot = m.group(1), m.group(2), m.group(3), int(m.group(4))
    c = calls.get(call, {})
    if call.startswith("loss_fn.") and role == "forward" and io == "output":
        return "loss"
    if role == "forward" and io == "input":
        return "weights as node inputs" if slot >= c.get("n_args", 1) else \
            "forward inputs (activations)"
    if role == "forward":
        return "BatchNorm statistics (outputs 1-4)" if slot > 0 else "forward outputs"
    if io == "output" and slot >= c.get("n_args", 1):
        return "parameter gradients (weight-gradient nodes)"
    return "activation gradients"


def load_calls(torch_dump):
    for root, _, files in os.walk(torch_dump):
        if "reference_run.json" in files:
            with open(os.path.join(root, "reference_run.json")) as f:
                meta = json.load(f)
            return {c["op_name"][:-len(".forward")]: c for c in meta["calls"]}
    raise SystemExit(f"FAILED: no .dump_metadata/reference_run.json under {torch_dump}")


def bounds(args):
    with open(args.mapping) as f:
        mapping = json.load(f)
    with open(args.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    calls = load_calls(args.torch_dump)
    failures = []
    benches = [r["Bench Name"] for r in rows]
    if sorted(benches) != sorted(mapping):
        missing = sorted(set(mapping) - set(benches))
        failures.append(f"expected one row per mapping entry ({len(mapping)}), got {len(rows)} "
                        f"rows; not compared: {missing[:5]}")
    worst = {}
    for r in rows:
        name = f"{r['NPU Name']} ~ {r['Bench Name']}"
        cos = number(r["Cosine"])
        red = number(r["RelativeEucDist"])
        mae = number(r["MaxAbsErr"])
        mre = number(r["MaxRelativeErr"])
        ratio = number(r["One Thousandth Err Ratio"])
        mag = max(abs(number(r["Bench max"])), abs(number(r["Bench min"])))
        rel_mae = mae / mag if mag > 0 else (0.0 if mae == 0 else math.inf)
        if r["Accuracy Reached or Not"] != "Yes":
            failures.append(f"{name}: {r['Accuracy Reached or Not']} ({r['Err_message']})")
        if not math.isnan(cos) and not cos > args.min_cosine:
            failures.append(f"{name}: Cosine {cos!r}, expected > {args.min_cosine}")
        if math.isnan(cos) and r["NPU Tensor Shape"] not in ("[]", "[1]"):
            failures.append(f"{name}: Cosine N/A for a tensor of shape {r['NPU Tensor Shape']}")
        if not red <= args.max_rel_euc:
            failures.append(f"{name}: RelativeEucDist {red!r}, expected <= {args.max_rel_euc}")
        if not rel_mae <= args.max_abs_rel:
            failures.append(f"{name}: MaxAbsErr {mae!r} = {rel_mae:.3g} x max|bench| "
                            f"{mag:.6g}, expected <= {args.max_abs_rel}")
        if args.min_ratio is not None and not ratio >= args.min_ratio:
            failures.append(f"{name}: One Thousandth Err Ratio {ratio!r}, expected >= "
                            f"{args.min_ratio}")
        c = classify(r["Bench Name"], calls)
        w = worst.setdefault(c, {"n": 0, "cos": 1.0, "red": 0.0, "mae": 0.0, "mre": 0.0,
                                 "ratio": 1.0})
        w["n"] += 1
        if not math.isnan(cos):
            w["cos"] = min(w["cos"], cos)
        w["red"] = max(w["red"], red)
        w["mae"] = max(w["mae"], rel_mae)
        w["mre"] = max(w["mre"], mre)
        w["ratio"] = min(w["ratio"], ratio)
    print(f"{len(rows)} rows; per class: min Cosine, max RelativeEucDist, max MaxAbsErr/max|bench|,"
          " max MaxRelativeErr (element-wise), min One Thousandth Err Ratio")
    for c, w in sorted(worst.items()):
        print(f"  {c:45s} {w['n']:4d}  {w['cos']:.10f}  {w['red']:.3g}  {w['mae']:.3g}  "
              f"{w['mre']:.3g}  {w['ratio']:.5f}")
    if failures:
        for f in failures[:20]:
            print(f"FAILED: {f}")
        if len(failures) > 20:
            print(f"FAILED: ... {len(failures) - 20} more")
        return 1
    return 0


def first_over(args):
    with open(args.csv, newline="") as f:
        for r in csv.DictReader(f):
            if not number(r["RelativeEucDist"]) <= args.bound:
                print(r["NPU Name"])
                return 0
    return 0


def keys(args):
    with open(args.mapping) as f:
        mapping = json.load(f)
    have = set()
    for f in os.listdir(args.folder):
        m = _FILE.match(f)
        if m:
            key = f"{m.group(2)}.{m.group(6)}.{m.group(7)}"
            have.add(f"{m.group(1)}.{key}" if m.group(1) in ("Parameter", "Gradient") else key)
    missing = sorted(a for a in mapping.values() if a not in have)
    if missing:
        print(f"FAILED: the mapping {args.mapping} is out of date for this loom build: "
              f"{len(missing)} of its {len(mapping)} loom keys are not in the dump "
              f"{args.folder} (e.g. {', '.join(missing[:4])}): the training step's node "
              "numbering changed; regenerate the mapping with debug/reference/make_mapping.py "
              "(debug/reference/README.md)")
        return 1
    print(f"mapping {os.path.basename(args.mapping)}: all {len(mapping)} loom keys are in the "
          "dump")
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bounds")
    b.add_argument("--csv", required=True)
    b.add_argument("--mapping", required=True)
    b.add_argument("--torch-dump", required=True)
    b.add_argument("--min-cosine", type=float, required=True)
    b.add_argument("--max-rel-euc", type=float, required=True)
    b.add_argument("--max-abs-rel", type=float, required=True)
    b.add_argument("--min-ratio", type=float)
    f = sub.add_parser("first-over")
    f.add_argument("--csv", required=True)
    f.add_argument("--bound", type=float, required=True)
    k = sub.add_parser("keys")
    k.add_argument("--mapping", required=True)
    k.add_argument("--folder", required=True)
    args = p.parse_args()
    return {"bounds": bounds, "first-over": first_over, "keys": keys}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
