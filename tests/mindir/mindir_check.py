"""MindIR interop with MindSpore, both ways (run by mindspore_check.sh).

1. LeNet-5 exported by loom (weights through a loom checkpoint) loads in MindSpore with
   mindspore.load + nn.GraphCell; outputs on 100 inputs equal loom's to 1e-5.
2. LeNet-5 exported by MindSpore (mindspore.export, MINDIR) loads and runs in loom; same check.
3. Both ways for a small ResNet-style network with BatchNorm (non-trivial moving statistics) and
   a residual Add (tests/mindir/nets.h is the loom twin of the network below).
4. Each MindSpore export fine-tuned in loom (mindir::GraphNet, 5 momentum steps on the 100
   inputs): the loss falls, and the checkpoint loom saves loads into MindSpore's network
   (load_param_into_net, every parameter) with the same outputs as loom's. Also for two networks
   MindSpore alone builds: MobileNetV2's inverted residual block with a classifier, and
   nn.TransformerEncoderLayer with a classifier (exported, run in loom, fine-tuned, loaded back).
"""
import os
import subprocess
import sys

import numpy as np
import mindspore as ms
from mindspore import nn

from mindspore_ops_check import MobileNetV2, ResNet50, VGG16, randomize_bn  # noqa: E402

TOL = 1e-5


class LeNet5(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.fc1 = nn.Dense(400, 120)
        self.fc2 = nn.Dense(120, 84)
        self.fc3 = nn.Dense(84, 10)
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()

    def construct(self, x):
        x = self.max_pool2d(self.relu(self.conv1(x)))
        x = self.max_pool2d(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


class SmallResNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, pad_mode="same")
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, pad_mode="pad", padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.pool = nn.AvgPool2d(2, 2)
        self.fc = nn.Dense(8, 10)
        self.sm = nn.Softmax()

    def construct(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        z = self.bn2(self.conv2(y))
        z = self.relu(z + y)
        z = self.pool(z)
        z = z.mean(axis=(2, 3), keep_dims=False)
        return self.sm(self.fc(z))


def loom(tool, *args):
    r = subprocess.run([tool, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("FAILED: %s %s: %s" % (tool, " ".join(args), r.stderr))


def ms_run(path, x):
    graph = ms.load(path)
    cell = nn.GraphCell(graph)
    return cell(ms.Tensor(x)).asnumpy()


def ms_eval(net, x):
    net.set_train(False)
    return net(ms.Tensor(x)).asnumpy()


def ms_to_loom(tool, tmp, name, net, x, xp, rng):
    """`net` with randomized BatchNorm, exported by MindSpore (MINDIR, and a checkpoint) and run
    by `loom run`: checks loom's outputs against MindSpore's; returns (stem, ok)."""
    randomize_bn(net, rng)
    net.set_train(False)
    want = net(ms.Tensor(x)).asnumpy()
    stem = os.path.join(tmp, name + "_ms")
    ms.export(net, ms.Tensor(x), file_name=stem, file_format="MINDIR")
    ms.save_checkpoint(net, stem + ".ckpt")
    yp = os.path.join(tmp, name + "_ms_y.npy")
    loom(tool, "run", stem + ".mindir", xp, yp)
    return stem, check(name + ": MindSpore export -> loom GraphCell", np.load(yp), want)


def check(label, got, want):
    d = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    ok = got.shape == want.shape and d <= TOL
    print("%-44s shape %s max |diff| %.3g %s" % (label, got.shape, d, "ok" if ok else "FAILED"))
    return ok


class MobileNetV2Head(nn.Cell):
    """MobileNetV2's inverted residual block (1x1 expansion, depthwise 3x3, 1x1 projection,
    BatchNorm, ReLU6, the residual Add), then a global mean and a Dense classifier."""

    def __init__(self):
        super().__init__()
        self.block = nn.SequentialCell([
            nn.Conv2d(4, 24, 1, has_bias=False), nn.BatchNorm2d(24), nn.ReLU6(),
            nn.Conv2d(24, 24, 3, group=24, pad_mode="pad", padding=1, has_bias=False),
            nn.BatchNorm2d(24), nn.ReLU6(),
            nn.Conv2d(24, 4, 1, has_bias=False), nn.BatchNorm2d(4)])
        self.fc = nn.Dense(4, 10)

    def construct(self, x):
        y = x + self.block(x)
        return self.fc(y.mean(axis=(2, 3), keep_dims=False))


class TransformerHead(nn.Cell):
    """MindSpore's nn.TransformerEncoderLayer (attention, LayerNorm, feed-forward), then a
    Dense classifier of the flattened sequence."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.1,
                                                  batch_first=True)
        self.fc = nn.Dense(5 * 16, 10)

    def construct(self, x):
        return self.fc(self.encoder(x).reshape((x.shape[0], 5 * 16)))


def finetune_roundtrip(tool, tmp, name, cls, stem, x, xp, init_ckpt=None, lr=0.05):
    """MindSpore's export of `cls` fine-tuned in loom (mindir::GraphNet, 5 momentum steps): the
    loss falls, and loom's checkpoint loads into MindSpore's `cls` (every parameter; its other
    weights from init_ckpt first, where given) with loom's outputs."""
    labels = (np.arange(x.shape[0]) % 10).astype(np.int32)
    lp = os.path.join(tmp, name + "_labels.npy")
    np.save(lp, labels)
    ckpt = os.path.join(tmp, name + "_tuned.ckpt")
    yp3 = os.path.join(tmp, name + "_tuned_y.npy")
    r = subprocess.run([tool, "finetune", stem + ".mindir", xp, lp, ckpt, yp3, str(lr)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("FAILED: finetune: %s" % r.stderr)
    losses = [float(v) for v in r.stdout.split(":")[1].split()]
    print("%-44s losses %s" % (name + ": fine-tuned in loom",
                                " ".join("%.6f" % v for v in losses)))
    ok = losses[-1] < losses[0]
    tuned = cls()
    if init_ckpt:
        ms.load_param_into_net(tuned, ms.load_checkpoint(init_ckpt))
    not_loaded, _ = ms.load_param_into_net(tuned, ms.load_checkpoint(ckpt))
    ok &= check(name + ": loom's fine-tuned checkpoint -> MindSpore", ms_eval(tuned, x),
                np.load(yp3))
    if not_loaded:
        print("  parameters MindSpore did not load:", not_loaded)
        ok = False
    return ok


def main():
    tool, tmp = sys.argv[1], sys.argv[2]
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(1)
    print("MindSpore", ms.__version__)
    rng = np.random.default_rng(0)
    ok = True
    shapes = {"lenet": (100, 1, 32, 32), "resnet": (100, 3, 8, 8)}
    for name, cls in (("lenet", LeNet5), ("resnet", SmallResNet)):
        x = rng.uniform(-1, 1, shapes[name]).astype(np.float32)
        xp = os.path.join(tmp, name + "_x.npy")
        np.save(xp, x)
        # loom -> MindSpore
        path = os.path.join(tmp, name + "_loom.mindir")
        yp = os.path.join(tmp, name + "_loom_y.npy")
        loom(tool, "export", name, path, xp, yp)
        ok &= check(name + ": loom export -> MindSpore GraphCell", ms_run(path, x), np.load(yp))
        # MindSpore -> loom
        stem, good = ms_to_loom(tool, tmp, name, cls(), x, xp, rng)
        ok &= good
        ok &= finetune_roundtrip(tool, tmp, name, cls, stem, x, xp)
    # MindSpore-only networks: exported by MindSpore, run in loom, fine-tuned in loom and loaded
    # back into MindSpore.
    for name, cls, shape, lr in (("mobilenet_v2_block", MobileNetV2Head, (100, 4, 8, 8), 0.05),
                                 ("transformer_encoder", TransformerHead, (100, 5, 16), 0.05),
                                 # the model zoo's whole networks (mindspore_ops_check.py)
                                 ("resnet50", ResNet50, (20, 3, 32, 32), 0.002),
                                 ("vgg16", VGG16, (20, 3, 32, 32), 0.05),
                                 ("mobilenet_v2", MobileNetV2, (20, 3, 32, 32), 0.002)):
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        xp = os.path.join(tmp, name + "_x.npy")
        np.save(xp, x)
        ms.set_seed(1)
        stem, good = ms_to_loom(tool, tmp, name, cls(), x, xp, rng)
        ok &= good
        ok &= finetune_roundtrip(tool, tmp, name, cls, stem, x, xp, stem + ".ckpt", lr)
    if not ok:
        raise SystemExit("FAILED")
    print("PASSED")


if __name__ == "__main__":
    main()
