"""MindSpore 2.x op forms in MindIR, read by `loom run` (run by mindspore_check.sh).

Each network below is built in MindSpore at test time, run in MindSpore (graph mode, inference),
exported with mindspore.export (MINDIR) and run by `loom run FILE --input X --output Y`; the
outputs must agree to 1e-5 of the output's scale (max(1, max |y|)). The networks use the forms
MindSpore 2.x writes for `tensor * 2.0` (Muls), ops.matmul (MatMulExt), nn.LayerNorm,
nn.Pad, nn.AdaptiveAvgPool2d, a depthwise convolution with ReLU6, an attention block
(BatchMatMul, Softmax, GeLU, Dropout in inference, Reshape, Transpose), MobileNetV2's inverted
residual block, VGG's pattern, MindSpore's nn.TransformerEncoderLayer, and whole networks as
the model zoo builds them: ResNet-50, VGG-16 (with BatchNorm) and MobileNetV2. A form loom does not
read (an AdaptiveAvgPool2d whose output size does not divide the input) must be refused with
exit status 1 and one line naming the op, the node and what loom reads instead.
"""
import os
import subprocess
import sys

import numpy as np
import mindspore as ms
from mindspore import nn, ops

TOL = 1e-5


class Scale(nn.Cell):
    def construct(self, x):
        return x * 2.0 + 1.0


class MatMul(nn.Cell):
    def __init__(self, shape):
        super().__init__()
        w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        self.w = ms.Parameter(ms.Tensor(w), name="w")

    def construct(self, x):
        return ops.matmul(x, self.w)


class LayerNorm(nn.Cell):
    def __init__(self, shape, axis):
        super().__init__()
        self.ln = nn.LayerNorm(shape, begin_norm_axis=axis, begin_params_axis=axis)
        rng = np.random.default_rng(2)
        self.ln.gamma.set_data(ms.Tensor(rng.uniform(0.5, 1.5, shape).astype(np.float32)))
        self.ln.beta.set_data(ms.Tensor(rng.uniform(-0.5, 0.5, shape).astype(np.float32)))

    def construct(self, x):
        return self.ln(x)


class Pad(nn.Cell):
    def __init__(self):
        super().__init__()
        self.pad = nn.Pad(((0, 0), (0, 0), (1, 1), (2, 2)))

    def construct(self, x):
        return self.pad(x)


class AdaptivePool(nn.Cell):
    def __init__(self, size):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(size)

    def construct(self, x):
        return self.pool(x)


class Depthwise(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, group=4, pad_mode="same", has_bias=True)
        self.relu6 = nn.ReLU6()

    def construct(self, x):
        return self.relu6(self.conv(x) * 3.0)


class Attention(nn.Cell):
    def __init__(self):
        super().__init__()
        self.softmax = nn.Softmax(axis=-1)
        self.gelu = nn.GELU()
        self.dropout = nn.Dropout(p=0.1)
        self.bmm_t = ops.BatchMatMul(transpose_b=True)
        self.bmm = ops.BatchMatMul()

    def construct(self, x):
        q = ops.transpose(ops.reshape(x, (2, 3, 2, 4)), (0, 2, 1, 3))
        a = self.softmax(self.bmm_t(q, q) * 0.5)
        return self.dropout(self.gelu(self.bmm(a, q)))


def randomize_bn(net, seed):
    """Non-trivial BatchNorm statistics and affine parameters (the initial ones hide mistakes);
    `seed` an int or a numpy Generator to draw from."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    for name, p in net.parameters_and_names():
        v = p.asnumpy()
        if "moving_variance" in name or "gamma" in name:
            p.set_data(ms.Tensor(rng.uniform(0.5, 1.5, v.shape).astype(np.float32)))
        elif "moving_mean" in name or "beta" in name:
            p.set_data(ms.Tensor(rng.uniform(-0.3, 0.3, v.shape).astype(np.float32)))
    return net


class InvertedResidual(nn.Cell):
    """MobileNetV2's block: 1x1 expansion, depthwise 3x3, 1x1 projection, BatchNorm and ReLU6,
    the residual Add; moving statistics and affine parameters made non-trivial."""

    def __init__(self, c, expand):
        super().__init__()
        h = c * expand
        self.conv = nn.SequentialCell([
            nn.Conv2d(c, h, 1, has_bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, h, 3, group=h, pad_mode="pad", padding=1, has_bias=False),
            nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, c, 1, has_bias=False), nn.BatchNorm2d(c)])
        randomize_bn(self, 3)

    def construct(self, x):
        return x + self.conv(x)


class VGGHead(nn.Cell):
    """VGG-16's pattern at a small size: 3x3 convolutions with bias and ReLU, max pooling,
    Flatten, Dense, ReLU, Dropout (inference), Dense."""

    def __init__(self):
        super().__init__()
        self.features = nn.SequentialCell([
            nn.Conv2d(3, 8, 3, pad_mode="pad", padding=1, has_bias=True), nn.ReLU(),
            nn.Conv2d(8, 8, 3, pad_mode="pad", padding=1, has_bias=True), nn.ReLU(),
            nn.MaxPool2d(2, 2)])
        self.classifier = nn.SequentialCell([
            nn.Flatten(), nn.Dense(8 * 4 * 4, 10), nn.ReLU(), nn.Dropout(p=0.5), nn.Dense(10, 5)])

    def construct(self, x):
        return self.classifier(self.features(x))


def conv_bn(cin, cout, k, stride=1, group=1, act=nn.ReLU):
    layers = [nn.Conv2d(cin, cout, k, stride, pad_mode="pad", padding=(k - 1) // 2, group=group,
                        has_bias=False), nn.BatchNorm2d(cout)]
    return nn.SequentialCell(layers + ([act()] if act else []))


class Bottleneck(nn.Cell):
    """The model zoo's ResNet-50 residual block (1x1, 3x3 with the stride, 1x1 x4)."""

    def __init__(self, cin, c, stride):
        super().__init__()
        self.body = nn.SequentialCell([conv_bn(cin, c, 1), conv_bn(c, c, 3, stride),
                                       conv_bn(c, 4 * c, 1, act=None)])
        self.down = None
        if stride != 1 or cin != 4 * c:
            self.down = conv_bn(cin, 4 * c, 1, stride, act=None)
        self.relu = nn.ReLU()

    def construct(self, x):
        identity = x if self.down is None else self.down(x)
        return self.relu(self.body(x) + identity)


class ResNet50(nn.Cell):
    """The model zoo's ResNet-50: 7x7 stem, max pooling (same), [3, 4, 6, 3] bottlenecks, the
    mean over H and W, Dense."""

    def __init__(self, classes=10):
        super().__init__()
        blocks, cin = [], 64
        for c, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(n):
                blocks.append(Bottleneck(cin, c, stride if i == 0 else 1))
                cin = 4 * c
        self.stem = conv_bn(3, 64, 7, 2)
        self.pool = nn.MaxPool2d(3, 2, pad_mode="same")
        self.blocks = nn.SequentialCell(blocks)
        self.mean = ops.ReduceMean(keep_dims=True)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(2048, classes)
        randomize_bn(self, 5)

    def construct(self, x):
        y = self.blocks(self.pool(self.stem(x)))
        return self.fc(self.flatten(self.mean(y, (2, 3))))


class VGG16(nn.Cell):
    """The model zoo's VGG-16 with BatchNorm (CIFAR-10 sizes): 13 3x3 convolutions with bias,
    BatchNorm and ReLU, five max poolings, a 512-512-10 classifier with Dropout."""

    def __init__(self, classes=10):
        super().__init__()
        layers, cin = [], 3
        for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                  512, 512, 512, "M"):
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, v, 3, pad_mode="pad", padding=1, has_bias=True),
                           nn.BatchNorm2d(v), nn.ReLU()]
                cin = v
        self.features = nn.SequentialCell(layers)
        self.classifier = nn.SequentialCell([
            nn.Flatten(), nn.Dense(512, 512), nn.ReLU(), nn.Dropout(p=0.5), nn.Dense(512, 512),
            nn.ReLU(), nn.Dropout(p=0.5), nn.Dense(512, classes)])
        randomize_bn(self, 6)

    def construct(self, x):
        return self.classifier(self.features(x))


class MobileNetV2Block(nn.Cell):
    def __init__(self, cin, cout, stride, t):
        super().__init__()
        h = cin * t
        layers = [conv_bn(cin, h, 1, act=nn.ReLU6)] if t != 1 else []
        layers += [conv_bn(h, h, 3, stride, group=h, act=nn.ReLU6), conv_bn(h, cout, 1, act=None)]
        self.conv = nn.SequentialCell(layers)
        self.residual = stride == 1 and cin == cout

    def construct(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Cell):
    """The model zoo's MobileNetV2 (width 1.0): ConvBNReLU6 stem, the 17 inverted residual
    blocks, a 1x1 to 1280 channels, global average pooling, Dense."""

    def __init__(self, classes=10):
        super().__init__()
        layers, cin = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
        for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
            for i in range(n):
                layers.append(MobileNetV2Block(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(conv_bn(cin, 1280, 1, act=nn.ReLU6))
        self.features = nn.SequentialCell(layers)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.flatten = nn.Flatten()
        self.head = nn.Dense(1280, classes)
        randomize_bn(self, 7)

    def construct(self, x):
        return self.head(self.flatten(self.pool(self.features(x))))


CASES = [
    ("muls", Scale(), (2, 8)),
    ("matmul_2d", MatMul((8, 4)), (2, 8)),
    ("matmul_batch", MatMul((8, 4)), (3, 2, 8)),
    ("layernorm_last", LayerNorm((8,), -1), (2, 3, 8)),
    ("layernorm_last_two", LayerNorm((3, 8), 1), (2, 3, 8)),
    ("pad", Pad(), (1, 2, 3, 3)),
    ("adaptive_avg_pool_1x1", AdaptivePool((1, 1)), (2, 4, 5, 5)),
    ("adaptive_avg_pool_2x3", AdaptivePool((2, 3)), (2, 4, 6, 6)),
    ("depthwise_relu6", Depthwise(), (1, 4, 6, 6)),
    ("attention", Attention(), (2, 3, 8)),
    ("mobilenet_v2_block", InvertedResidual(4, 6), (2, 4, 8, 8)),
    ("vgg_head", VGGHead(), (2, 3, 8, 8)),
    # MindSpore's own encoder layer: Split, Div, MatMul, MatMulExt, LayerNorm, Softmax...
    ("transformer_encoder_layer",
     nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.1, batch_first=True),
     (2, 5, 16)),
    # Whole networks of MindSpore's model zoo (smaller inputs; every layer as the zoo has it).
    ("resnet50", ResNet50(), (2, 3, 64, 64)),
    ("vgg16", VGG16(), (2, 3, 32, 32)),
    ("mobilenet_v2", MobileNetV2(), (2, 3, 64, 64)),
]


def export(tmp, name, net, shape, rng):
    net.set_train(False)
    x = rng.standard_normal(shape).astype(np.float32)
    xp = os.path.join(tmp, name + "_x.npy")
    np.save(xp, x)
    want = net(ms.Tensor(x)).asnumpy()
    stem = os.path.join(tmp, name)
    ms.export(net, ms.Tensor(x), file_name=stem, file_format="MINDIR")
    return stem + ".mindir", xp, want


def main():
    loom, tmp = sys.argv[1], sys.argv[2]
    os.chdir(tmp)  # MindSpore writes its analysis files (rank_0/) into the working directory
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(1)
    print("MindSpore", ms.__version__)
    rng = np.random.default_rng(0)
    ok = True
    for name, net, shape in CASES:
        path, xp, want = export(tmp, name, net, shape, rng)
        yp = os.path.join(tmp, name + "_loom.npy")
        r = subprocess.run([loom, "run", path, "--input", xp, "--output", yp],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("%-24s FAILED: loom run exited %d: %s" % (name, r.returncode, r.stderr.strip()))
            ok = False
            continue
        got = np.load(yp)
        scale = max(1.0, float(np.max(np.abs(want))))
        d = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) / scale
        good = got.shape == want.shape and d <= TOL
        print("%-24s shape %-14s max |diff| / scale %.3g %s"
              % (name, got.shape, d, "ok" if good else "FAILED"))
        ok &= good
    # A form loom does not read: one clear line, exit status 1.
    path, xp, _ = export(tmp, "adaptive_avg_pool_4x4", AdaptivePool((4, 4)), (1, 2, 5, 5), rng)
    r = subprocess.run([loom, "run", path, "--input", xp, "--output",
                        os.path.join(tmp, "refused.npy")], capture_output=True, text=True)
    message = r.stderr.strip()
    expected = ("unsupported form of AdaptiveAvgPool2D", "<Tensor[Float32], (1, 2, 5, 5)>",
                "loom reads an output_size of (1, 1) or one that divides the input's H and W, "
                "got (4, 4)")
    good = r.returncode == 1 and len(message.splitlines()) == 1 and all(
        e in message for e in expected)
    print("%-24s exit %d: %s %s" % ("refused form", r.returncode, message,
                                    "ok" if good else "FAILED"))
    ok &= good
    if not ok:
        raise SystemExit("FAILED")
    print("PASSED")


if __name__ == "__main__":
    main()
