#!/usr/bin/env python3
"""Writes tests/nn/reference/loss_scale.txt: the loss scales MindSpore's own
DynamicLossScaleUpdateCell (mindspore.nn, the cell DynamicLossScaleManager.get_update_cell()
returns to TrainOneStepWithLossScaleCell) gives for fixed overflow patterns, read by
tests/nn/loss_scale_test.cc, which trains with loom's in-graph rule on batches that overflow at
the same steps.

Lines: `case NAME INIT FACTOR WINDOW`, then `overflow 0 1 ...` (one flag per step),
`scale ...` (exact Float32 values), `current_iterator_step ...` and `last_overflow_iterator_step ...` (the values after
each step).

Run in the MindSpore 2.10 environment the interoperability tests make (tests/mindspore_venv.sh):
    ~/.cache/loom/venv-ms/bin/python tests/nn/reference/loss_scale_reference.py
"""
import os

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn

CASES = [
    # name, init, factor, window, overflow pattern (1 = the step's gradients overflow)
    ("grow_and_back_off", 1024.0, 2, 3,
     [0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]),
    ("floor_at_one", 4.0, 2, 2, [1, 1, 1, 1, 0, 0, 0, 1, 0, 0]),
    ("factor_three", 81.0, 3, 1, [0, 1, 0, 0, 1, 1, 0]),
]


def run(init, factor, window, pattern):
    cell = nn.DynamicLossScaleUpdateCell(loss_scale_value=init, scale_factor=factor,
                                         scale_window=window)
    scale = Parameter(Tensor(init, ms.float32), name="scale_sense")
    out = {"scale": [], "current_iterator_step": [], "last_overflow_iterator_step": []}
    for flag in pattern:
        cell(scale, Tensor(bool(flag)))
        out["scale"].append(float(scale.asnumpy()))
        out["current_iterator_step"].append(int(cell.cur_iter.asnumpy()))
        out["last_overflow_iterator_step"].append(int(cell.last_overflow_iter.asnumpy()))
    return out


def main():
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    lines = []
    for name, init, factor, window, pattern in CASES:
        got = run(init, factor, window, pattern)
        lines.append(f"case {name} {init:g} {factor} {window}")
        lines.append("overflow " + " ".join(str(f) for f in pattern))
        lines.append("scale " + " ".join(repr(v) for v in got["scale"]))
        for key in ("current_iterator_step", "last_overflow_iterator_step"):
            lines.append(key + " " + " ".join(str(v) for v in got[key]))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loss_scale.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    assert np.isfinite([v for c in CASES for v in c[4]]).all()


if __name__ == "__main__":
    main()
