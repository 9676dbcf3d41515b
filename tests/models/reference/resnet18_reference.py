#!/usr/bin/env python3
"""Writes tests/models/reference/data/resnet18_small.txt: PyTorch reference values for loom's
ResNet-18 in the small-image layout (models/resnet/resnet.h), read by tests/models/resnet_test.cc.

The network is rebuilt here in PyTorch with MindSpore's model-zoo structure and names
(models/official/cv/ResNet/src/resnet.py, ResidualBlockBase with res_base): 3×3 stride-1 stem
conv1 (padding 1) → bn1 → relu (no max-pool); blocks conv1 (3×3, stride, padding 1) → bn1d →
relu → conv2 → bn2d, + down_sample_layer (1×1 conv with the stride, BatchNorm) when the stride or
the width changes, → relu; mean over (H, W) → flatten → end_point Dense. BatchNorm settings as
resnet.py's _bn: eps 1e-4, MindSpore momentum 0.9 (PyTorch momentum 0.1) in the blocks; eps 1e-5,
MindSpore momentum 0.1 (PyTorch 0.9) for the stem's bn1 and the down-sample BatchNorms.

No weight file is stored: every parameter, the input and the output sensitivity come from a small
integer hash of (parameter index in MindSpore order, element index), written identically in the
C++ test (resnet_test.cc, `hashed_uniform`), rounded to float32; the network runs in float64.

Lines (format of tests/ops/reference.h: `<name> <dtype> <rank> <dims...> <values...>`):
  names: one line per parameter, `param <index> <name> <rank> <dims...>` (loom must agree);
  eval_logits: logits in eval mode (moving statistics, as the hash set them);
  train_logits: logits in train mode (batch statistics), and afterwards the moving statistics of
    bn1, layer1.0.bn1d and layer2.0.down_sample_layer.1 (momentum and unbiased variance);
  loss = sum(train_logits * dy) and its gradients for conv1.weight, layer4.1.bn2d.gamma and
    end_point.bias.

Run: /usr/bin/python3 tests/models/reference/resnet18_reference.py
"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
BATCH, IN_CHANNELS, SIZE, CLASSES = 2, 3, 32, 10


def hashed_uniform(key, n):
    """n values in [0, 1): a 32-bit integer mix of (key, element index)."""
    out = []
    for i in range(n):
        h = (i * 2654435761 + (key + 1) * 2246822519) & 0xFFFFFFFF
        h ^= h >> 16
        h = (h * 0x45D9F3B) & 0xFFFFFFFF
        h ^= h >> 16
        out.append(h / 4294967296.0)
    return torch.tensor(out)


def hashed_value(key, name, shape):
    n = math.prod(shape)
    u = hashed_uniform(key, n)
    if name in ("x", "dy"):  # inputs
        v = 2 * u - 1
    elif name.endswith("gamma"):
        v = 0.75 + 0.5 * u
    elif name.endswith("moving_variance"):
        v = 0.5 + u
    elif name.endswith(("beta", "moving_mean", "bias")):
        v = 0.1 * (2 * u - 1)
    elif len(shape) >= 2:  # conv (O, I, k, k) or dense (O, I) weight
        fan_in = math.prod(shape[1:])
        v = math.sqrt(3.0 / fan_in) * (2 * u - 1)
    else:
        raise ValueError(f"no hashed value rule for {name} {shape}")
    return v.float().double().reshape(shape)


def bn(channels, res_base):
    # resnet.py's _bn; PyTorch's momentum is 1 - MindSpore's.
    return nn.BatchNorm2d(channels, eps=1e-5, momentum=0.9) if res_base else \
        nn.BatchNorm2d(channels, eps=1e-4, momentum=0.1)


class ResidualBlockBase(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1d = bn(cout, False)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2d = bn(cout, False)
        self.down_sample_layer = None
        if stride != 1 or cin != cout:
            self.down_sample_layer = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                                   bn(cout, True))

    def forward(self, x):
        out = F.relu(self.bn1d(self.conv1(x)))
        out = self.bn2d(self.conv2(out))
        identity = self.down_sample_layer(x) if self.down_sample_layer is not None else x
        return F.relu(out + identity)


class ResNet18Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(IN_CHANNELS, 64, 3, 1, 1, bias=False)
        self.bn1 = bn(64, True)
        widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
        for s, (cin, cout, stride) in enumerate(widths):
            self.add_module(f"layer{s + 1}", nn.Sequential(ResidualBlockBase(cin, cout, stride),
                                                           ResidualBlockBase(cout, cout, 1)))
        self.end_point = nn.Linear(512, CLASSES)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.mean(x, dim=(2, 3), keepdim=True).flatten(1)
        return self.end_point(x)


TORCH_SUFFIX = {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean",
                "moving_variance": "running_var"}


def mindspore_names(model):
    """(MindSpore name, PyTorch tensor) in MindSpore's parameter order."""
    out = []
    for module_name, module in model.named_modules():
        prefix = module_name + "." if module_name else ""
        if isinstance(module, nn.Conv2d):
            out.append((prefix + "weight", module.weight))
        elif isinstance(module, nn.BatchNorm2d):
            for ms, pt in TORCH_SUFFIX.items():
                out.append((prefix + ms, getattr(module, pt)))
        elif isinstance(module, nn.Linear):
            out += [(prefix + "weight", module.weight), (prefix + "bias", module.bias)]
    return out


def tensor_line(name, t):
    t = t.detach()
    dims = " ".join(str(d) for d in t.shape)
    values = " ".join("%.9g" % v for v in t.reshape(-1).float().tolist())
    return f"{name} Float32 {t.dim()} {dims} {values}".replace("  ", " ")


def main():
    model = ResNet18Small()
    params = mindspore_names(model)
    lines = []
    with torch.no_grad():
        for k, (name, t) in enumerate(params):
            t.copy_(hashed_value(k, name, tuple(t.shape)))
            dims = " ".join(str(d) for d in t.shape)
            lines.append(f"param {k} {name} {t.dim()} {dims}")
    x = hashed_value(10000, "x", (BATCH, IN_CHANNELS, SIZE, SIZE))
    dy = hashed_value(10001, "dy", (BATCH, CLASSES))

    model.eval()
    with torch.no_grad():
        lines.append(tensor_line("eval_logits", model(x)))

    model.train()
    logits = model(x)
    lines.append(tensor_line("train_logits", logits))
    for bn_name in ["bn1", "layer1.0.bn1d", "layer2.0.down_sample_layer.1"]:
        m = model.get_submodule(bn_name)
        lines.append(tensor_line(bn_name + ".moving_mean", m.running_mean))
        lines.append(tensor_line(bn_name + ".moving_variance", m.running_var))
    loss = (logits * dy).sum()
    loss.backward()
    lines.append(tensor_line("loss", loss.reshape(())))
    for name in ["conv1.weight", "layer4.1.bn2d.weight", "end_point.bias"]:
        ms_name = name.replace("bn2d.weight", "bn2d.gamma")
        lines.append(tensor_line("grad." + ms_name, model.get_parameter(name).grad))

    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "resnet18_small.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
