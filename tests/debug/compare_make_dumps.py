"""Writes synthetic dumps in MindSpore's layout with NumPy, for tests/debug/compare_cli_test.sh.

Usage: compare_make_dumps.py OUT_DIR

OUT_DIR/ref         graph 0, iterations 0 and 1: Parameter.w, MatMul-op0 (input and output),
                    ReLU-op1, MatMulGrad-op2 (a backward node), Gradient.w; an execution order
                    and a statistic.csv as loom writes them
OUT_DIR/same        the same values, other timestamps
OUT_DIR/perturbed   ReLU-op1's output in iteration 0 off by 2 in one element (and MatMulGrad-op2
                    flipped, but written earlier: the first failure is still ReLU-op1)
OUT_DIR/nan         MatMul-op0's output with a NaN
OUT_DIR/shape       MatMul-op0's output with another shape
OUT_DIR/f64         every tensor as float64 (a reference in double precision)
OUT_DIR/foreign     ReLU-op1's and MatMul-op0's outputs under PyTorch-like names (the rest under
                    loom's), with OUT_DIR/mapping.json naming those two
OUT_DIR/truncated   the same as ref with ReLU-op1's file cut short
OUT_DIR/stray       the same as ref with a notes.txt beside the tensors
"""
import os
import sys

import numpy as np

ORDER = (
    "index,op_type,op_name,full_name,scope,file,line,role,forward,depth,graph\n"
    "0,MatMul,MatMul-op0,Net/fc/MatMul-op0,Net/fc/MatMul,net.py,3,forward,,0,train_step\n"
    "1,ReLU,ReLU-op1,Net/relu/ReLU-op1,Net/relu/ReLU,net.py,4,forward,,0,train_step\n"
    "2,MatMulGrad,MatMulGrad-op2,Gradients/Net/fc/MatMulGrad-op2,Gradients/Net/fc/MatMulGrad,"
    "\"net, with a comma.py\",3,backward,Net/fc/MatMul,0,train_step\n"
)


def values():
    rng = np.random.default_rng(7)
    v = {}
    for it in (0, 1):
        v[("Parameter", "w", "output", it)] = rng.standard_normal((4, 4)).astype(np.float32)
        v[("MatMul", "MatMul-op0", "input", it)] = rng.standard_normal((2, 4)).astype(np.float32)
        v[("MatMul", "MatMul-op0", "output", it)] = rng.standard_normal((2, 4)).astype(np.float32)
        v[("MatMulGrad", "MatMulGrad-op2", "output", it)] = rng.standard_normal(8).astype(
            np.float32)
        # Multiples of 1/8, so that the perturbation below is exactly 2.
        v[("ReLU", "ReLU-op1", "output", it)] = np.maximum(
            np.round(rng.standard_normal((2, 4)) * 8) / 8, 0).astype(np.float32)
        v[("Gradient", "w", "output", it)] = rng.standard_normal((4, 4)).astype(np.float32)
    return v


# Timestamps in execution order except MatMulGrad-op2, written before ReLU-op1.
STAMP = {"Parameter": 10, "MatMul.input": 20, "MatMul.output": 21, "MatMulGrad": 25, "ReLU": 30,
         "Gradient": 40}


def write(root, vals, t0=1000, names=None):
    rank = os.path.join(root, "rank_0")
    os.makedirs(os.path.join(rank, ".dump_metadata"), exist_ok=True)
    with open(os.path.join(rank, ".dump_metadata", "data_dump.json"), "w") as f:
        f.write("{}\n")
    os.makedirs(os.path.join(rank, "execution_order"), exist_ok=True)
    with open(os.path.join(rank, "execution_order", "ms_execution_order_graph_0.csv"), "w") as f:
        f.write(ORDER)
    for (op_type, op_name, io, it), a in vals.items():
        if names is not None and (op_name, io) in names:
            op_type, op_name = names[(op_name, io)]
        d = os.path.join(rank, "Net", "0", str(it))
        os.makedirs(d, exist_ok=True)
        stamp = STAMP.get(op_type, STAMP.get(op_type + "." + io, 50))
        ts = t0 + 100 * it + stamp
        np.save(os.path.join(d, f"{op_type}.{op_name}.0.0.{ts}.{io}.0.DefaultFormat.npy"), a)
        stat = os.path.join(d, "statistic.csv")
        new = not os.path.exists(stat)
        with open(stat, "a") as f:
            if new:
                f.write("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,"
                        "Shape,Max Value,Min Value,L2Norm Value\n")
            f.write(f'{op_type},{op_name},0,0,{ts},{io},0,{a.nbytes},{a.dtype},'
                    f'"{tuple(a.shape)}",{a.max()},{a.min()},{np.linalg.norm(a)}\n')


def main():
    out = sys.argv[1]
    v = values()
    write(os.path.join(out, "ref"), v)
    write(os.path.join(out, "same"), v, t0=5000)

    p = dict(v)
    relu = p[("ReLU", "ReLU-op1", "output", 0)].copy()
    relu[1, 2] += 2.0
    p[("ReLU", "ReLU-op1", "output", 0)] = relu
    p[("MatMulGrad", "MatMulGrad-op2", "output", 0)] = -p[("MatMulGrad", "MatMulGrad-op2",
                                                           "output", 0)]
    write(os.path.join(out, "perturbed"), p)

    n = dict(v)
    mm = n[("MatMul", "MatMul-op0", "output", 0)].copy()
    mm[0, 0] = np.nan
    n[("MatMul", "MatMul-op0", "output", 0)] = mm
    write(os.path.join(out, "nan"), n)

    s = dict(v)
    s[("MatMul", "MatMul-op0", "output", 1)] = s[("MatMul", "MatMul-op0", "output", 1)].reshape(8)
    write(os.path.join(out, "shape"), s)

    write(os.path.join(out, "f64"), {k: a.astype(np.float64) for k, a in v.items()})

    write(os.path.join(out, "foreign"), v,
          names={("ReLU-op1", "output"): ("Relu", "relu"),
                 ("MatMul-op0", "output"): ("Linear", "fc")})
    with open(os.path.join(out, "mapping.json"), "w") as f:
        f.write('{"relu.output.0": "ReLU-op1.output.0", "fc.output.0": "MatMul-op0.output.0"}\n')

    write(os.path.join(out, "truncated"), v)
    d = os.path.join(out, "truncated", "rank_0", "Net", "0", "0")
    f = [x for x in os.listdir(d) if x.startswith("ReLU.")][0]
    size = os.path.getsize(os.path.join(d, f))
    with open(os.path.join(d, f), "r+b") as fh:
        fh.truncate(size - 5)

    write(os.path.join(out, "stray"), v)
    with open(os.path.join(out, "stray", "rank_0", "Net", "0", "1", "notes.txt"), "w") as fh:
        fh.write("x\n")


if __name__ == "__main__":
    main()
