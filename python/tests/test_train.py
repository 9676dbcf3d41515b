"""Cells in Python, training with Model and callbacks, against loom's own C++ training."""
import hashlib
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import loom
from loom import nn, ops

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python", "examples"))
import lenet_quickstart as quickstart  # noqa: E402

LOOM = os.environ.get("LOOM", os.path.join(ROOT, "build", "bin", "loom"))


def weights_sha256(net):
    h = hashlib.sha256()
    for _, p in sorted(net.parameters_and_names(), key=lambda kv: kv[0]):
        h.update(p.asnumpy().tobytes())
    return h.hexdigest()


def test_a_python_lenet_trains_to_the_weights_of_loom_train_bitwise():
    out = subprocess.run([LOOM, "train", "lenet", "--epochs", "1", "--deterministic",
                          "--train-samples", "640", "--test-samples", "64", "--json"],
                         capture_output=True, text=True, check=True)
    want = json.loads(out.stdout.strip().splitlines()[-1])
    loom.set_context(mode=loom.GRAPH_MODE)
    loom.set_seed(1, deterministic=True)
    net = quickstart.LeNet5()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = loom.Model(net, loss, opt, metrics={"accuracy"})
    model.train(1, quickstart.create_dataset("train", 32, 640))
    acc = model.eval(quickstart.create_dataset("test", 32, 64))["accuracy"]
    assert weights_sha256(net) == want["weights_sha256"]
    assert acc == pytest.approx(want["test_accuracy"], abs=1e-6)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(4, 8)
        self.fc2 = nn.Dense(8, 3)
        self.scale = nn.Parameter(np.full(8, 0.5, np.float32))

    def construct(self, x):
        return self.fc2(ops.ReLU(self.fc1(x)) * self.scale)


def test_python_cells_register_parameters_by_attribute_and_run_in_both_modes():
    loom.set_seed(3)
    net = Net()
    assert [n for n, _ in net.parameters_and_names()] == [
        "scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert net.fc1.parameters_and_names()[0][1].shape == (8, 4)
    x = loom.Tensor(np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32))
    loom.set_context(mode=loom.GRAPH_MODE)
    y_graph = net(x).asnumpy()
    assert net.num_compilations == 1
    net(x)
    assert net.num_compilations == 1  # one trace per signature
    loom.set_context(mode=loom.PYNATIVE_MODE)
    try:
        y_eager = net(x).asnumpy()
    finally:
        loom.set_context(mode=loom.GRAPH_MODE)
    np.testing.assert_array_equal(y_graph, y_eager)


def test_a_shape_error_in_a_python_construct_names_the_line_and_the_cell():
    class Bad(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(3, 4)  # (2, 4) @ (2, 4) below

        def construct(self, x):
            return ops.MatMul(self.fc(x), self.fc(x))

    line = Bad.construct.__code__.co_firstlineno + 1
    with pytest.raises(ValueError) as e:
        Bad()(loom.Tensor(np.zeros((2, 3), np.float32)))
    assert f"test_train.py:{line}" in str(e.value)
    assert "MatMul" in str(e.value) and "Bad" in str(e.value)


def small_data(n=64):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    y = (x.sum(axis=1) > 0).astype(np.int32)
    return loom.dataset.NumpySlicesDataset((x, y), column_names=["x", "y"]).batch(8)


class Recorder(loom.Callback):
    def __init__(self, stop_at=None, interrupt_at=None):
        self.calls = []
        self.stop_at, self.interrupt_at = stop_at, interrupt_at

    def on_train_begin(self, rc):
        self.calls.append("begin")

    def on_train_epoch_begin(self, rc):
        self.calls.append(f"epoch{rc.cur_epoch_num}")

    def on_train_step_end(self, rc):
        self.calls.append(rc.cur_step_num)
        assert rc.net_outputs.shape == ()
        if rc.cur_step_num == self.stop_at:
            rc.request_stop()
        if rc.cur_step_num == self.interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)

    def on_train_end(self, rc):
        self.calls.append("end")


def make_model():
    loom.set_seed(5)
    net = nn.SequentialCell([nn.Dense(4, 8), nn.ReLU(), nn.Dense(8, 2)])
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True)
    return loom.Model(net, loss, nn.Momentum(net.trainable_params(), 0.1, 0.9),
                      metrics={"accuracy", "loss"})


def test_python_callbacks_run_at_mindspores_hook_points():
    model = make_model()
    rec = Recorder()
    model.train(2, small_data(), callbacks=[rec])
    assert rec.calls == ["begin", "epoch1", 1, 2, 3, 4, 5, 6, 7, 8,
                         "epoch2", 9, 10, 11, 12, 13, 14, 15, 16, "end"]
    result = model.eval(small_data())
    assert set(result) == {"accuracy", "loss"} and result["accuracy"] > 0.5
    stop = Recorder(stop_at=3)
    make_model().train(2, small_data(), callbacks=stop)
    assert stop.calls == ["begin", "epoch1", 1, 2, 3, "end"]


def test_ctrl_c_stops_training_after_the_step_and_raises_keyboard_interrupt():
    rec = Recorder(interrupt_at=2)
    with pytest.raises(KeyboardInterrupt):
        make_model().train(2, small_data(), callbacks=[rec])
    assert rec.calls == ["begin", "epoch1", 1, 2, "end"]


def test_train_one_step_cell_from_python():
    loom.set_seed(5)
    net = nn.SequentialCell([nn.Dense(4, 8), nn.ReLU(), nn.Dense(8, 2)])
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True)),
                               nn.SGD(net.trainable_params(), learning_rate=0.5))
    x, y = small_data()[0]
    losses = [float(step(x, y).asnumpy()) for _ in range(20)]
    assert losses[-1] < losses[0] / 2
    assert step.num_steps == 20


def final_ir(folder):
    """The last compile stage's IR text with source locations removed."""
    import glob
    import re
    stages = sorted(glob.glob(os.path.join(folder, "*.ir")))
    assert stages, f"no .ir files under {folder}"
    return re.sub(r' loc\("[^"]*":\d+\)', "", open(stages[-1]).read())


def test_save_graphs_and_the_same_ir_as_the_cpp_network(tmp_path):
    x = loom.Tensor(np.random.default_rng(0).standard_normal((2, 1, 32, 32)).astype(np.float32))
    loom.set_seed(1)
    loom.set_context(mode=loom.GRAPH_MODE, save_graphs=True, save_graphs_path=str(tmp_path / "py"))
    try:
        py_net = quickstart.LeNet5()
        py_out = py_net(x).asnumpy()
        loom.set_context(save_graphs_path=str(tmp_path / "cpp"))
        loom.set_seed(1)
        cpp_net = loom.models.lenet5()
        cpp_out = cpp_net(x).asnumpy()
    finally:
        loom.set_context(save_graphs=False)
    (py_dir,) = [d for d in (tmp_path / "py").iterdir() if d.is_dir()]
    (cpp_dir,) = [d for d in (tmp_path / "cpp").iterdir() if d.is_dir()]
    # The traced nodes carry the Python file and line of each layer's call in construct.
    line = quickstart.LeNet5.construct.__code__.co_firstlineno + 1
    assert f'loc("{quickstart.__file__}":{line})' in open(sorted(py_dir.glob("*.ir"))[0]).read()
    assert final_ir(py_dir) == final_ir(cpp_dir)
    np.testing.assert_array_equal(py_out, cpp_out)


def test_generator_dataset_from_a_random_access_source_and_from_a_generator():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((12, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)

    class Source:
        def __len__(self):
            return len(x)

        def __getitem__(self, i):
            return x[i], y[i]

    a = loom.dataset.GeneratorDataset(Source(), column_names=["x", "y"])
    b = loom.dataset.GeneratorDataset(((x[i], y[i]) for i in range(12)), column_names=["x", "y"])
    c = loom.dataset.NumpySlicesDataset((x, y), column_names=["x", "y"])
    assert len(a) == len(b) == 12
    for d in (a, b):
        for i in range(12):
            np.testing.assert_array_equal(d[i][0].asnumpy(), c[i][0].asnumpy())
            assert int(d[i][1].asnumpy()) == int(c[i][1].asnumpy())
    # trained through the C++ loop (rows read by the prefetching thread under the GIL)
    model = make_model()
    model.train(2, a.batch(4))
    with pytest.raises(ValueError, match="column_names"):
        loom.dataset.GeneratorDataset(Source(), column_names=["x"])[0]


def test_model_checkpoint_and_summary_collector_from_python(tmp_path):
    model = make_model()
    ck = loom.ModelCheckpoint(prefix="net", directory=str(tmp_path / "ck"),
                              config=loom.CheckpointConfig(save_checkpoint_steps=4,
                                                           keep_checkpoint_max=2))
    summary = loom.SummaryCollector(str(tmp_path / "summary"), collect_freq=2)
    model.train(1, small_data(), callbacks=[ck, summary])
    assert sorted(os.listdir(tmp_path / "ck")) == ["net-1_4.ckpt", "net-1_8.ckpt"]
    assert ck.latest.endswith("net-1_8.ckpt")
    params = loom.load_checkpoint(ck.latest)
    assert "0.weight" in params
    assert any(f.startswith("events.out.") for f in os.listdir(tmp_path / "summary"))


def test_initializers_draw_by_the_parameters_final_name():
    from loom.common.initializer import HeUniform, Normal, initializer

    class Inner(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(initializer(Normal(0.5), [3, 4], loom.float32))

        def construct(self, x):
            return x

    class Outer(nn.Cell):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.fc = nn.Dense(4, 4)
            self.v = nn.Parameter(initializer("ones", 5))

        def construct(self, x):
            return x

    loom.set_seed(9)
    a = Outer()
    loom.set_seed(9)
    b = Outer()
    wa = dict(a.parameters_and_names())["inner.w"].asnumpy()
    np.testing.assert_array_equal(wa, dict(b.parameters_and_names())["inner.w"].asnumpy())
    assert abs(wa.std() - 0.5) < 0.3 and wa.shape == (3, 4)
    loom.set_seed(9)
    alone = Inner()  # named "w", not "inner.w": another draw
    assert not np.array_equal(dict(alone.parameters_and_names())["w"].asnumpy(), wa)
    np.testing.assert_array_equal(dict(a.parameters_and_names())["v"].asnumpy(), np.ones(5))
    t = initializer(HeUniform(), [8, 2]).init_data()
    assert t.shape == (8, 2) and t.dtype == loom.float32


def test_the_profiler_from_python(tmp_path):
    model = make_model()
    prof = loom.Profiler(output_path=str(tmp_path / "prof"), start_step=2, stop_step=4,
                         profile_memory=True)
    model.train(1, small_data(), callbacks=[prof])
    assert prof.steps_recorded == 3
    files = sorted(os.path.basename(f) for f in prof.analyse())
    for want in ["cpu_op_detail_info_0.csv", "cpu_op_type_info_0.csv", "step_trace_0.csv",
                 "cpu_timeline_display_0.json", "memory_plan_0.csv"]:
        assert want in files
    shown = subprocess.run([LOOM, "profile", "show", str(tmp_path / "prof")], capture_output=True,
                           text=True, check=True).stdout
    assert "steps profiled: 2-4" in shown and "MatMul" in shown
    model.train(1, small_data())  # no longer observed: nothing more recorded
    assert prof.steps_recorded == 3


def test_the_debuggers_numerics_check_and_dump_from_python(tmp_path):
    class Blows(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(4, 2)

        def construct(self, x):
            return ops.Log(self.fc(x) - 100.0)  # log of negatives: NaN

    loom.set_seed(5)
    net = Blows()
    model = loom.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1))
    x = np.ones((8, 4), np.float32)
    data = loom.dataset.NumpySlicesDataset((x, np.zeros((8, 2), np.float32))).batch(4)
    with pytest.raises(loom.LoomError, match="check-numerics: step 1: .* produced 8 NaN"):
        model.train(1, data, callbacks=[loom.debug.NumericsChecker(dump_dir=str(tmp_path / "n"))])
    model = make_model()
    model.train(1, small_data(16), callbacks=[loom.debug.Dumper(path=str(tmp_path / "dump"))])
    npys = [f for _, _, fs in os.walk(tmp_path / "dump") for f in fs if f.endswith(".npy")]
    assert any("MatMul" in f for f in npys), npys[:5]


def test_watchpoints_from_python(capfd):
    model = make_model()
    w = loom.debug.Watcher("tensor_range(range_start_inclusive=-1e9, range_end_inclusive=1e9, "
                           "range_percentage_gt=99.9)@/0/MatMul", stop_on_hit=True)
    rec = Recorder()
    model.train(2, small_data(), callbacks=[w, rec])
    assert w.stopped and rec.calls == ["begin", "epoch1", 1, "end"]  # stopped after step 1
    assert w.hits and w.hits[0].startswith("watch: step 1: tensor_range on ")
    assert w.hits[0] in capfd.readouterr().err
    quiet = loom.debug.Watcher("tensor_overflow", verbose=False)
    make_model().train(1, small_data(), callbacks=[quiet])
    assert quiet.hits == [] and not quiet.stopped
    with pytest.raises(ValueError, match="no_such_condition"):
        loom.debug.Watcher("no_such_condition")


def test_cell_list_and_identity_keep_mindspores_names():
    class Stack(nn.Cell):
        def __init__(self):
            super().__init__()
            self.layers = nn.CellList([nn.Dense(3, 3), nn.Identity(), nn.Dense(3, 2)])

        def construct(self, x):
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            return x

    net = Stack()
    assert [k for k, _ in net.parameters_and_names()] == [
        "layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias"]
    assert net(loom.Tensor(np.ones((4, 3), np.float32))).shape == (4, 2)


def test_amp_levels_from_python():
    # O2 bfloat16: the step computes in bfloat16 (on the CPU's Float32 kernels, rounded after
    # each op), the weights stay float32, the loss is close to the float32 run's but not the
    # same; O2 brings MindSpore's dynamic loss scale; a bad level names the levels.
    def model_with(**kwargs):
        loom.set_seed(5)
        net = nn.SequentialCell([nn.Dense(4, 8), nn.ReLU(), nn.Dense(8, 2)])
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True)
        opt = nn.Momentum(net.trainable_params(), 0.1, 0.9)
        return net, loom.Model(net, loss, opt, **kwargs)

    plain_net, plain = model_with()
    net, model = model_with(amp_level="O2", amp_dtype="bfloat16")
    plain.train(1, small_data())
    model.train(1, small_data())
    assert model.loss_scale == 2**24 and model.skipped_steps == 0
    assert "MatMul" in model.float32_fallbacks and plain.float32_fallbacks == []
    assert all(p.asnumpy().dtype == np.float32 for p in net.trainable_params())
    a = np.concatenate([p.asnumpy().ravel() for p in net.trainable_params()])
    b = np.concatenate([p.asnumpy().ravel() for p in plain_net.trainable_params()])
    assert not np.array_equal(a, b) and np.allclose(a, b, atol=2e-2)
    _, o1 = model_with(amp_level="O1", loss_scale_manager=loom.amp.FixedLossScaleManager(8))
    o1.train(1, small_data())
    assert o1.loss_scale == 8
    with pytest.raises(ValueError, match="expected a level of O0, O1, O2, O3, auto, got 'O5'"):
        model_with(amp_level="O5")


def test_loss_scale_managers_from_python():
    # 8 clean steps a epoch: with scale_window 3 the scale doubles at steps 3 and 6; a batch with
    # an Inf then halves it, skips that update, and the weights stay as they were.
    def model_with(manager):
        loom.set_seed(5)
        net = nn.SequentialCell([nn.Dense(4, 8), nn.ReLU(), nn.Dense(8, 2)])
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True)
        opt = nn.Momentum(net.trainable_params(), 0.1, 0.9)
        return net, loom.Model(net, loss, opt, loss_scale_manager=manager)

    plain_net, plain = model_with(None)
    net, model = model_with(loom.amp.DynamicLossScaleManager(init_loss_scale=1024, scale_window=3))
    assert repr(loom.amp.DynamicLossScaleManager()) == (
        "DynamicLossScaleManager(dynamic (init 16777216, factor 2, window 2000))")
    plain.train(1, small_data())
    model.train(1, small_data())
    assert model.loss_scale == 4096 and model.skipped_steps == 0
    assert weights_sha256(net) == weights_sha256(plain_net)  # a power-of-2 scale is exact
    x = np.ones((8, 4), np.float32)
    x[0, 0] = np.inf
    bad = loom.dataset.NumpySlicesDataset((x, np.zeros(8, np.int32)),
                                          column_names=["x", "y"]).batch(8)
    before = weights_sha256(net)
    model.train(1, bad)
    assert model.loss_scale == 2048 and model.skipped_steps == 1
    assert weights_sha256(net) == before
    fixed = loom.amp.FixedLossScaleManager(64, drop_overflow_update=False)
    assert fixed.get_loss_scale() == 64 and fixed.get_drop_overflow_update() is False
    with pytest.raises(ValueError, match="scale factor >= 1"):
        loom.amp.DynamicLossScaleManager(scale_factor=0.5)
    with pytest.raises(TypeError, match="loss_scale_manager"):
        model_with(1024)
