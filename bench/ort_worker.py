"""ONNX Runtime's side of bench/infer_vs_ort.py: one inference-latency run, JSON on the last line.

Run with the Python of the ONNX Runtime venv (bench/infer_vs_ort.py makes it), by
infer_vs_ort.py; not meant to be run by hand:

    VENV/bin/python bench/ort_worker.py --model lenet_b1.onnx --input x.npy --threads 2 \
        --runs 2000 --warmup 200

One InferenceSession on the CPUExecutionProvider with graph_optimization_level ORT_ENABLE_ALL,
intra_op_num_threads=--threads and inter_op_num_threads=1. The input array is read once and fed
from memory; after --warmup untimed calls, each of --runs calls of sess.run is timed on its own
(time.perf_counter_ns). Prints the median, minimum, 90th percentile (nearest rank) and mean in
microseconds, the versions, the providers the session uses and the model's ONNX opset.
"""
import argparse
import json
import math
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="the .onnx file")
    ap.add_argument("--input", required=True, help="the input array (.npy)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args()

    opset = {o.domain or "ai.onnx": o.version for o in onnx.load(a.model).opset_import}
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])

    x = np.ascontiguousarray(np.load(a.input), dtype=np.float32)
    name = sess.get_inputs()[0].name
    feed = {name: x}
    for _ in range(a.warmup):
        sess.run(None, feed)
    times = []
    clock = time.perf_counter_ns
    for _ in range(a.runs):
        t0 = clock()
        sess.run(None, feed)
        times.append(clock() - t0)
    us = sorted(t / 1000.0 for t in times)
    p90 = us[max(0, math.ceil(0.9 * len(us)) - 1)]
    print(json.dumps({
        "runs": len(us), "median_us": round(statistics.median(us), 3), "min_us": us[0],
        "p90_us": p90,
        "mean_us": round(statistics.fmean(us), 3), "ort_version": ort.__version__,
        "numpy_version": np.__version__, "onnx_version": onnx.__version__,
        "providers": sess.get_providers(), "opset": opset.get("ai.onnx"),
        "input_shape": list(x.shape), "threads": a.threads,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
