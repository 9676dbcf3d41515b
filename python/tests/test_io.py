"""Checkpoints, MindIR export / load / GraphCell and the model zoo from Python (loom.io,
loom.models), against files the loom command writes."""
import os
import subprocess

import numpy as np
import pytest

import loom
from loom import _loom, ops
from loom import io as lio
from loom import models

LENET_NAMES = ["conv1.weight", "conv2.weight", "fc1.weight", "fc1.bias", "fc2.weight",
               "fc2.bias", "fc3.weight", "fc3.bias"]


def loom_command():
    """build/bin/loom next to the build's python/ (LOOM_BIN overrides)."""
    default = os.path.join(os.path.dirname(_loom.__file__), "..", "..", "bin", "loom")
    path = os.environ.get("LOOM_BIN", os.path.normpath(default))
    assert os.access(path, os.X_OK), f"no loom command at {path} (build the loom_cli target)"
    return path


@pytest.fixture(scope="module")
def cpp_lenet_ckpt(tmp_path_factory):
    """The checkpoint `loom train lenet` writes after one short epoch."""
    d = tmp_path_factory.mktemp("ckpt")
    subprocess.run([loom_command(), "train", "lenet", "--epochs", "1", "--train-samples", "64",
                    "--test-samples", "32", "--ckpt-dir", str(d)],
                   check=True, capture_output=True, text=True)
    return str(d / "lenet-1_2.ckpt")


class Net(loom.nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = loom.nn.Conv2d(1, 4, 3, has_bias=True)
        self.fc = loom.nn.Dense(4 * 8 * 8, 5)
        self.scale = loom.nn.Parameter(np.linspace(0.5, 2.0, 5).astype(np.float32))

    def construct(self, x):
        h = ops.ReLU(self.conv(x))
        return self.fc(ops.Reshape(h, shape=(-1, 4 * 8 * 8))) * self.scale


def values(net):
    return [(name, p.value.asnumpy().copy()) for name, p in net.parameters_and_names()]


def bitwise_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def rand(*shape, seed=0):
    return loom.Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# ---- checkpoints ----

def test_python_cell_checkpoint_round_trip_is_bitwise(tmp_path):
    loom.set_seed(3)
    net = Net()
    want = values(net)
    # own parameters first, then the children's (MindSpore's parameters_and_names order)
    assert [n for n, _ in want] == ["scale", "conv.weight", "conv.bias", "fc.weight", "fc.bias"]
    lio.save_checkpoint(net, str(tmp_path / "net"))         # ".ckpt" appended, as MindSpore
    assert sorted(os.listdir(tmp_path)) == ["net.ckpt"]
    got = lio.load_checkpoint(str(tmp_path / "net.ckpt"))
    assert list(got) == [n for n, _ in want]
    for (name, w), t in zip(want, got.values()):
        assert isinstance(t, loom.Tensor)
        assert bitwise_equal(t.asnumpy(), w), name

    loom.set_seed(4)
    other = Net()
    assert not bitwise_equal(values(other)[1][1], want[1][1])     # conv.weight: another draw
    assert lio.load_param_into_net(other, got) == ([], [])
    for (name, w), (name2, v) in zip(want, values(other)):
        assert name == name2 and bitwise_equal(v, w), name


def test_list_of_dicts_append_dict_and_filters(tmp_path):
    path = str(tmp_path / "list.ckpt")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, -2, 3], dtype=np.int32)
    lio.save_checkpoint([{"name": "a", "data": loom.Tensor(a)}, {"name": "b", "data": b}], path,
                        append_dict={"epoch_num": 7, "lr": 0.5, "note": "hello"})
    got = lio.load_checkpoint(path)
    assert list(got) == ["a", "b", "epoch_num", "lr", "note"]
    assert bitwise_equal(got["a"].asnumpy(), a) and bitwise_equal(got["b"].asnumpy(), b)
    assert got["epoch_num"].dtype == loom.int64 and got["epoch_num"].shape == ()
    assert int(got["epoch_num"].asnumpy()) == 7
    assert got["lr"].dtype == loom.float32 and float(got["lr"].asnumpy()) == 0.5
    assert got["note"] == "hello"
    assert list(lio.load_checkpoint(path, filter_prefix="a")) == ["b", "epoch_num", "lr", "note"]
    assert list(lio.load_checkpoint(path, specify_prefix=["a", "n"])) == ["a", "note"]
    assert list(lio.load_checkpoint(path, choice_func=lambda n: n == "b")) == ["b"]


def test_checkpoint_of_the_loom_command_loads_into_the_zoos_lenet(cpp_lenet_ckpt):
    ck = lio.load_checkpoint(cpp_lenet_ckpt)
    net = models.lenet5()
    param_not_load, ckpt_not_load = lio.load_param_into_net(net, ck)
    assert param_not_load == []
    assert ckpt_not_load == [n for n, v in ck.items()
                             if n not in LENET_NAMES and not isinstance(v, str)]
    assert "moments.fc3.bias" in ckpt_not_load            # the optimizer's state
    for name, v in values(net):
        assert bitwise_equal(v, ck[name].asnumpy()), name


def test_zoo_parameter_names_equal_the_cpp_checkpoints(cpp_lenet_ckpt):
    names = list(lio.load_checkpoint(cpp_lenet_ckpt))
    assert names[:8] == LENET_NAMES
    assert [n for n, _ in models.lenet5().parameters_and_names()] == LENET_NAMES
    assert [n for n, _ in models.network("lenet").parameters_and_names()] == LENET_NAMES
    assert models.names() == ["lenet", "resnet18", "resnet34", "resnet50", "resnet101"]


def test_resnet_layouts_and_names():
    net = models.resnet18(num_classes=7, in_channels=1, layout="small")
    ps = net.parameters_and_names()
    names = [n for n, _ in ps]
    assert names[:11] == ["conv1.weight", "bn1.gamma", "bn1.beta", "bn1.moving_mean",
                          "bn1.moving_variance", "layer1.0.conv1.weight", "layer1.0.bn1d.gamma",
                          "layer1.0.bn1d.beta", "layer1.0.bn1d.moving_mean",
                          "layer1.0.bn1d.moving_variance", "layer1.0.conv2.weight"]
    assert names[-2:] == ["end_point.weight", "end_point.bias"]
    assert "layer2.0.down_sample_layer.0.weight" in names
    assert ps[0][1].shape == (64, 1, 3, 3) and ps[-1][1].shape == (7,)
    # torchvision's ResNet-18 (11,689,512) with a 3x3 1-channel stem and 7 classes
    trainable = 11_689_512 - 64 * 3 * 7 * 7 + 64 * 1 * 3 * 3 - 513 * 1000 + 513 * 7
    assert sum(int(np.prod(p.shape)) for _, p in ps if p.requires_grad) == trainable
    assert net.depth == 18
    with pytest.raises(ValueError, match="expected layout 'imagenet' or 'small', got 'big'"):
        models.resnet18(layout="big")


def test_corrupt_and_missing_checkpoints_raise_value_error_naming_the_file(cpp_lenet_ckpt,
                                                                          tmp_path):
    data = open(cpp_lenet_ckpt, "rb").read()
    path = str(tmp_path / "cut.ckpt")
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])
    with pytest.raises(ValueError, match=path) as e:
        lio.load_checkpoint(path)
    assert isinstance(e.value, loom.LoomFormatError)
    missing = str(tmp_path / "none.ckpt")
    with pytest.raises(ValueError, match=f"load_checkpoint: cannot open '{missing}'"):
        lio.load_checkpoint(missing)


def test_load_param_into_net_refuses_a_wrong_shape_and_loads_nothing():
    loom.set_seed(1)
    net = models.lenet5()
    before = values(net)
    bad = {"conv1.weight": np.zeros((6, 1, 5, 5), np.float32),
           "fc1.weight": np.zeros((3, 3), np.float32)}
    with pytest.raises(ValueError, match="fc1.weight"):
        lio.load_param_into_net(net, bad)
    for (name, v), (_, w) in zip(values(net), before):
        assert bitwise_equal(v, w), name


# ---- MindIR ----

def test_export_load_and_graphcell_equal_the_networks_own_call(tmp_path):
    loom.set_seed(1)
    net = models.lenet5()
    x = rand(2, 1, 32, 32, seed=1)
    want = net(x).asnumpy()
    base = str(tmp_path / "lenet")
    assert lio.export(net, x, file_name=base, file_format="MINDIR") is None
    assert sorted(os.listdir(tmp_path)) == ["lenet.mindir"]
    graph = lio.load(base + ".mindir")
    assert graph.producer == "loom"
    assert graph.inputs == [("x0", loom.float32, (2, 1, 32, 32))]
    assert [n for n, _ in graph.parameters] == LENET_NAMES
    cell = lio.GraphCell(graph)
    got = cell(x)
    assert isinstance(got, loom.Tensor)
    np.testing.assert_allclose(got.asnumpy(), want, rtol=0, atol=1e-6)
    x5 = rand(5, 1, 32, 32, seed=2)                        # another batch size
    np.testing.assert_allclose(cell(x5).asnumpy(), net(x5).asnumpy(), rtol=0, atol=1e-6)


def test_graphcell_inside_a_python_cell_in_both_modes(tmp_path):
    loom.set_seed(2)
    net = Net()
    x = rand(3, 1, 8, 8, seed=3)
    lio.export(net, x, file_name=str(tmp_path / "net.mindir"))

    class Head(loom.nn.Cell):
        def __init__(self, graph):
            super().__init__()
            self.body = lio.GraphCell(graph)

        def construct(self, x):
            return ops.Tanh(self.body(x)) * 2.0

    head = Head(lio.load(str(tmp_path / "net.mindir")))
    want = np.tanh(net(x).asnumpy()) * 2
    np.testing.assert_allclose(head(x).asnumpy(), want, rtol=0, atol=1e-6)    # traced
    loom.set_context(mode=loom.PYNATIVE_MODE)
    try:
        np.testing.assert_allclose(head(x).asnumpy(), want, rtol=0, atol=1e-6)
    finally:
        loom.set_context(mode=loom.GRAPH_MODE)


def test_graphnet_fine_tunes_a_mindir_file(tmp_path):
    loom.set_seed(4)
    net = models.lenet5()
    x = rand(8, 1, 32, 32, seed=4)
    path = str(tmp_path / "lenet.mindir")
    lio.export(net, x, file_name=path)
    tuned = loom.nn.GraphNet(path)
    assert [n for n, _ in tuned.parameters_and_names()] == LENET_NAMES
    np.testing.assert_allclose(tuned(x).asnumpy(), net(x).asnumpy(), rtol=0, atol=1e-6)
    labels = loom.Tensor(np.arange(8, dtype=np.int32) % 10)
    step = loom.nn.TrainOneStepCell(
        loom.nn.WithLossCell(tuned, loom.nn.SoftmaxCrossEntropyWithLogits(sparse=True)),
        loom.nn.Momentum(tuned.trainable_params(), learning_rate=0.05, momentum=0.9))
    losses = [float(step(x, labels).asnumpy()) for _ in range(5)]
    assert losses[-1] < losses[0]
    ckpt = str(tmp_path / "tuned.ckpt")
    lio.save_checkpoint(tuned, ckpt)
    assert list(lio.load_checkpoint(ckpt)) == LENET_NAMES
    with pytest.raises(loom.LoomFormatError, match="missing.mindir"):
        loom.nn.GraphNet(str(tmp_path / "missing.mindir"))


def test_mindir_errors(tmp_path):
    with pytest.raises(ValueError,
                       match="expected a file name ending in .mindir or .onnx, got 'm.txt'"):
        lio.load("m.txt")
    net = models.lenet5()
    x = rand(1, 1, 32, 32)
    with pytest.raises(ValueError, match="expected file_format 'MINDIR', got 'ONNX'"):
        lio.export(net, x, file_name=str(tmp_path / "m"), file_format="ONNX")
    path = str(tmp_path / "m.mindir")
    lio.export(net, x, file_name=path)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 3])
    with pytest.raises(loom.LoomFormatError, match=f"MindIR {path}: "):
        lio.load(path)
    graph_cell = lio.GraphCell(lio.load(_fresh(net, x, tmp_path)))
    with pytest.raises(ValueError, match="GraphCell: expected 1 inputs, got 2"):
        graph_cell(x, x)


def _fresh(net, x, tmp_path):
    path = str(tmp_path / "fresh.mindir")
    lio.export(net, x, file_name=path)
    return path
