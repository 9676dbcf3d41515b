"""ONNX import against PyTorch: models exported by torch.onnx.export (Debian's PyTorch) run in
loom with PyTorch's outputs, give PyTorch's autograd gradients on the same weights, and train."""
import copy
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as tnn
import torch.nn.functional as F

import loom
from loom import io as lio


class MLP(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = tnn.Linear(20, 64)
        self.fc2 = tnn.Linear(64, 32)
        self.drop = tnn.Dropout(0.5)
        self.fc3 = tnn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return self.fc3(self.drop(x))


class BasicBlock(tnn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(cout)
        self.conv2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False),
                                             tnn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + identity)


class ResNet18(tnn.Module):
    """torchvision's resnet18 (BasicBlock, [2, 2, 2, 2]), written out."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = tnn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = tnn.BatchNorm2d(64)
        self.maxpool = tnn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(tnn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = tnn.AdaptiveAvgPool2d((1, 1))
        self.fc = tnn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class ViewNet(tnn.Module):
    """x.view(x.size(0), -1): Shape, Gather, Unsqueeze, Concat, Reshape in the export."""

    def __init__(self):
        super().__init__()
        self.conv = tnn.Conv2d(1, 4, 3, padding=1)
        self.pool = tnn.AvgPool2d(2)
        self.fc = tnn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        y = self.pool(F.leaky_relu(self.conv(x), 0.1))
        return torch.log_softmax(self.fc(y.view(y.size(0), -1)), dim=1)


class SamePadNet(tnn.Module):
    """MindSpore's pad_mode "same" in PyTorch (bench/train_vs_torch.py's SameConv2d): F.pad with
    asymmetric pads (exported as ConstantOfShape, Concat, Reshape, Slice, Transpose, Cast and
    Pad), a -inf padded max pooling, a backwards slice."""

    def __init__(self):
        super().__init__()
        self.conv = tnn.Conv2d(2, 4, 3, 2)
        self.fc = tnn.Linear(4 * 2 * 2, 5)

    def forward(self, x):
        y = self.conv(F.pad(x, (0, 1, 0, 1)))                     # 8x8 -> 4x4
        y = F.max_pool2d(F.pad(y, (0, 1, 0, 1), value=float("-inf")), 3, 2)  # -> 2x2
        return self.fc(torch.flatten(y.flip(1), 1))


def randomized(model, seed):
    """The model in inference mode with BatchNorm statistics that are not the initial ones."""
    torch.manual_seed(seed)
    for m in model.modules():
        if isinstance(m, tnn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


def export(model, x, path, fold=False):
    """torch.onnx.export with a symbolic batch; fold=False keeps BatchNorm and the parameter
    names (TrainingMode.PRESERVE, no constant folding), fold=True is the default export (BatchNorm
    folded into the convolutions)."""
    kwargs = {} if fold else {"training": torch.onnx.TrainingMode.PRESERVE,
                              "do_constant_folding": False}
    torch.onnx.export(model, torch.from_numpy(x), path, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, **kwargs)
    return path


def rand(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def assert_close(got, want, rel):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    scale = max(float(np.abs(want).max()), 1e-30)
    assert float(np.abs(got - want).max()) <= rel * scale, (float(np.abs(got - want).max()), scale)


MODELS = {
    "mlp": (MLP, (20,)),
    "resnet18": (ResNet18, (3, 32, 32)),
    "viewnet": (ViewNet, (1, 8, 8)),
    "samepad": (SamePadNet, (2, 8, 8)),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("onnx")
    out = {}
    for i, (name, (cls, shape)) in enumerate(MODELS.items()):
        torch.manual_seed(i)
        model = randomized(cls(), i)
        x = rand(2, *shape, seed=i)
        out[name] = (model, export(model, x, str(tmp / f"{name}.onnx")), shape)
    model = out["resnet18"][0]
    out["resnet18_folded"] = (model, export(model, rand(2, 3, 32, 32), str(tmp / "folded.onnx"),
                                            fold=True), (3, 32, 32))
    return out


@pytest.mark.parametrize("name", ["mlp", "resnet18", "resnet18_folded", "viewnet", "samepad"])
def test_outputs_equal_pytorchs_at_any_batch_size(exported, name):
    model, path, shape = exported[name]
    cell = loom.nn.GraphCell(lio.load(path))
    for batch in (2, 5):
        x = rand(batch, *shape, seed=batch)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        assert_close(cell(loom.Tensor(x)).asnumpy(), want, 1e-5)


def test_loom_run_command(exported, tmp_path):
    model, path, shape = exported["resnet18"]
    x = rand(3, *shape, seed=11)
    np.save(tmp_path / "x.npy", x)
    default = os.path.join(os.path.dirname(loom._loom.__file__), "..", "..", "bin", "loom")
    r = subprocess.run([os.environ.get("LOOM_BIN", os.path.normpath(default)), "run", path, "--input", str(tmp_path / "x.npy"), "--output",
                        str(tmp_path / "y.npy")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"wrote Float32 (3, 10) to {tmp_path / 'y.npy'}\n"
    with torch.no_grad():
        assert_close(np.load(tmp_path / "y.npy"), model(torch.from_numpy(x)).numpy(), 1e-5)


def loss_fn(net):
    ce = loom.nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return lambda x, labels: ce(net(x), labels)


@pytest.mark.parametrize("name", ["mlp", "resnet18", "viewnet", "samepad"])
def test_gradients_equal_pytorchs_autograd(exported, name):
    model, path, shape = exported[name]
    net = loom.nn.GraphNet(path)
    params = net.trainable_params()
    want_names = [n for n, p in model.named_parameters()]
    assert sorted(p.name for p in params) == sorted(want_names)
    x = rand(4, *shape, seed=3)
    labels = np.arange(4, dtype=np.int32) % 5
    loss, grads = loom.value_and_grad(loss_fn(net), None, weights=params)(
        loom.Tensor(x), loom.Tensor(labels))
    model.zero_grad()
    out = model(torch.from_numpy(x))
    tloss = F.cross_entropy(out, torch.from_numpy(labels).long())
    tloss.backward()
    np.testing.assert_allclose(loss.asnumpy(), tloss.item(), rtol=1e-5)
    torch_grads = dict((n, p.grad.numpy()) for n, p in model.named_parameters())
    for p, g in zip(params, grads):
        assert_close(g.asnumpy(), torch_grads[p.name], 1e-4)


@pytest.mark.parametrize("name,lr,fall", [("mlp", 0.1, 0.5), ("resnet18", 0.01, 0.9)])
def test_trains_in_loom_as_in_pytorch(exported, tmp_path, name, lr, fall):
    """20 momentum steps on a fixed batch: the loss falls, along PyTorch's own curve (torch's
    SGD with momentum is MindSpore's Momentum: v = 0.9 v + g, w -= lr v; BatchNorm frozen, as
    in the inference-mode export)."""
    model, path, shape = exported[name]
    net = loom.nn.GraphNet(path)
    step = loom.nn.TrainOneStepCell(
        loom.nn.WithLossCell(net, loom.nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                          reduction="mean")),
        loom.nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=0.9))
    x = rand(8, *shape, seed=5)
    labels = np.arange(8, dtype=np.int32) % 10
    losses = [float(step(loom.Tensor(x), loom.Tensor(labels)).asnumpy()) for _ in range(20)]
    assert losses[-1] < fall * losses[0], losses
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    want = []
    for _ in range(20):
        opt.zero_grad()
        loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(labels).long())
        loss.backward()
        opt.step()
        want.append(loss.item())
    np.testing.assert_allclose(losses, want, rtol=1e-3)
    # The tuned weights save under PyTorch's names.
    ckpt = str(tmp_path / "tuned.ckpt")
    lio.save_checkpoint(net, ckpt)
    assert sorted(lio.load_checkpoint(ckpt)) == sorted(n for n, _ in net.parameters_and_names())


def test_an_op_loom_lacks_is_one_message(tmp_path):
    class ErfNet(tnn.Module):
        def forward(self, x):
            return torch.erf(x) + 1

    path = export(ErfNet(), rand(2, 3), str(tmp_path / "erf.onnx"))
    with pytest.raises(loom.LoomFormatError) as e:
        lio.load(path)
    assert str(e.value) == (
        f"ONNX {path}: unknown op 'Erf' at node '/Erf' with inputs (<Tensor[Float32], (-1, 3)>) "
        "(docs/formats.md, \"ONNX import\", lists the ONNX ops loom reads)")
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(loom.LoomFormatError, match="protobuf cannot parse"):
        lio.load(path)
