"""MindSpore's side of bench/train_vs_torch.py: one training-step timing, as JSON on the last line.

Run with the Python of the MindSpore venv (tests/mindspore_venv.sh makes it), by
train_vs_torch.py; not meant to be run by hand:

    VENV/bin/python bench/ms_worker.py --model lenet --batch 32 --steps 200 --warmup 5 --threads 2

The networks are the zoo's as bench/train_vs_torch.py builds them for PyTorch (MindSpore's model
zoo LeNet-5 and the small-image ResNet-18, 1x32x32, 10 classes), trained in graph mode on the CPU
with Momentum (lr 0.01, momentum 0.9; ResNet-18 weight decay 1e-4) and sparse softmax
cross-entropy (mean) on one fixed random batch, through nn.TrainOneStepCell, as MindSpore's own
quick start trains. The first call compiles the graph; warm-up steps are not timed. A run stops
early once it has used --budget seconds, reporting the steps it timed.
"""
import argparse
import json
import time

import numpy as np
import mindspore as ms
from mindspore import nn, ops


class LeNet5(nn.Cell):
    """The model zoo's LeNet-5: convolutions without bias, pad_mode "valid", 1x32x32 input."""

    def __init__(self, num_class=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.fc1 = nn.Dense(16 * 5 * 5, 120)
        self.fc2 = nn.Dense(120, 84)
        self.fc3 = nn.Dense(84, num_class)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()

    def construct(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


def conv3x3(cin, cout, stride):
    return nn.Conv2d(cin, cout, 3, stride, pad_mode="pad", padding=1, has_bias=False)


def conv1x1(cin, cout, stride):
    return nn.Conv2d(cin, cout, 1, stride, pad_mode="pad", padding=0, has_bias=False)


def bn(channels, res_base=False):
    # the zoo's _bn: momentum 0.9, eps 1e-4; res_base's stem and down-sample: momentum 0.1, eps 1e-5
    if res_base:
        return nn.BatchNorm2d(channels, eps=1e-5, momentum=0.1)
    return nn.BatchNorm2d(channels, eps=1e-4, momentum=0.9)


class BasicBlock(nn.Cell):
    """The zoo's ResidualBlockBase (ResNet-18/34)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1d = conv3x3(cin, cout, stride), bn(cout)
        self.conv2, self.bn2d = conv3x3(cout, cout, 1), bn(cout)
        self.relu = nn.ReLU()
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.SequentialCell([conv1x1(cin, cout, stride), bn(cout, True)])

    def construct(self, x):
        out = self.relu(self.bn1d(self.conv1(x)))
        out = self.bn2d(self.conv2(out))
        identity = x
        if self.down is not None:
            identity = self.down(x)
        return self.relu(out + identity)


class ResNet18(nn.Cell):
    """The zoo's ResNet-18 in the small-image layout (3x3 stride-1 stem, no max-pool)."""

    def __init__(self, num_class=10, in_channel=1):
        super().__init__()
        self.conv1 = conv3x3(in_channel, 64, 1)
        self.bn1 = bn(64, True)
        self.relu = nn.ReLU()
        ins, outs = (64, 64, 128, 256), (64, 128, 256, 512)
        layers = []
        for s in range(4):
            layers.append(nn.SequentialCell([
                BasicBlock(ins[s] if b == 0 else outs[s], outs[s], (1, 2, 2, 2)[s] if b == 0 else 1)
                for b in range(2)]))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.mean = ops.ReduceMean(keep_dims=True)
        self.flatten = nn.Flatten()
        self.end_point = nn.Dense(512, num_class)

    def construct(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.end_point(self.flatten(self.mean(x, (2, 3))))


MODELS = {"lenet": (LeNet5, 0.0), "resnet18": (ResNet18, 1e-4)}


def peak_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=float, default=120.0, help="seconds of timed steps at most")
    a = ap.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(1)
    try:  # MindSpore 2.3 and newer
        ms.runtime.set_cpu_affinity(False)
    except AttributeError:
        pass
    ms.set_context(runtime_num_threads=a.threads)
    make, wd = MODELS[a.model]
    net = make()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9, weight_decay=wd)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)
    step.set_train()
    rng = np.random.default_rng(1)
    x = ms.Tensor(rng.standard_normal((a.batch, 1, 32, 32)).astype(np.float32))
    y = ms.Tensor(rng.integers(0, 10, (a.batch,)).astype(np.int32))
    t0 = time.perf_counter()
    for _ in range(a.warmup):
        step(x, y).asnumpy()
    warmup_s = time.perf_counter() - t0
    done = 0
    t0 = time.perf_counter()
    while done < a.steps:
        step(x, y).asnumpy()
        done += 1
        if time.perf_counter() - t0 > a.budget:
            break
    elapsed = time.perf_counter() - t0
    print(json.dumps({"framework": "mindspore", "version": ms.__version__,
                      "images_per_s": [a.batch * done / elapsed], "steps_timed": done,
                      "warmup_s": warmup_s, "threads": a.threads,
                      "peak_rss_mib": peak_rss_mib()}))


if __name__ == "__main__":
    main()
