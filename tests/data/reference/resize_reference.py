#!/usr/bin/python3
"""Reference values for data::Resize (tests/data/transforms_test.cc).

Bilinear resizing with half-pixel centres, as PyTorch computes it with
interpolate(mode="bilinear", align_corners=False, antialias=False). Run with the Debian
python3-torch:

    /usr/bin/python3 tests/data/reference/resize_reference.py

It writes resize.txt next to itself in tests/ops/reference.h's format, one tensor per line:
<name> <dtype> <rank> <dims...> <values...>. Each case k has an input `k.in` (HWC, Float32) and
the expected output `k.out` (HWC, Float32).
"""
import os

import torch
import torch.nn.functional as F

CASES = [
    # name, (H, W, C), (out H, out W)
    ("down", (5, 7, 3), (3, 4)),
    ("up", (4, 5, 2), (7, 11)),
    ("mixed", (6, 3, 1), (4, 8)),
    ("same", (3, 3, 1), (3, 3)),
]


def fmt(name, t):
    dims = " ".join(str(d) for d in t.shape)
    vals = " ".join("%.9g" % v for v in t.flatten().tolist())
    return "%s Float32 %d %s %s" % (name, t.dim(), dims, vals)


def main():
    gen = torch.Generator().manual_seed(7)
    lines = []
    for name, shape, size in CASES:
        x = torch.rand(shape, generator=gen, dtype=torch.float32) * 255
        y = F.interpolate(x.permute(2, 0, 1).unsqueeze(0), size=size, mode="bilinear",
                          align_corners=False, antialias=False)
        y = y.squeeze(0).permute(1, 2, 0).contiguous()
        lines.append(fmt(name + ".in", x))
        lines.append(fmt(name + ".out", y))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resize.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
