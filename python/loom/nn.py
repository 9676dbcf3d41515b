"""Cells: networks written as Python classes, as in MindSpore.

    class Net(loom.nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc1 = loom.nn.Dense(4, 8)          # a child Cell: parameters "fc1.weight"...
            self.scale = loom.nn.Parameter(np.ones(8, np.float32))
        def construct(self, x):
            return ops.ReLU(self.fc1(x)) * self.scale

    y = Net()(loom.Tensor(x))

Attributes that are Cells or Parameters are registered with the Cell (MindSpore's names:
"fc1.weight", "scale"). In graph mode (the default, loom.set_context(mode=loom.GRAPH_MODE)) the
first call per input signature traces construct into loom's IR (each node carries the Python
file and line) and compiles it; in PyNative mode construct runs op by op. The built-in layers
(Dense, Conv2d, MaxPool2d, BatchNorm2d, Dropout, ReLU, Flatten, SequentialCell...) are loom's
C++ layers.
"""
from loom import _loom, communication
from loom._loom import (  # noqa: F401
    AvgPool2d,
    BatchNorm2d,
    CellList,
    Conv2d,
    Dense,
    Dropout,
    Flatten,
    GELU,
    GraphCell,
    GraphNet,
    Identity,
    MaxPool2d,
    ReLU,
    ReLU6,
    SequentialCell,
    Sigmoid,
    Softmax,
    Tanh,
)
from loom._loom import (  # noqa: F401  (losses, wrappers, optimizers)
    L1Loss,
    MSELoss,
    SoftmaxCrossEntropyWithLogits,
    WithLossCell,
    Adam,
    AdamWeightDecay,
    Momentum,
    SGD,
    Optimizer,
)
from loom._loom import Tensor
from loom.ops import _caller_site


class Parameter:
    """A tensor a Cell trains (requires_grad) or keeps as state, registered when assigned to a
    Cell attribute; the attribute then holds the Cell's parameter (name, value, requires_grad)."""

    def __init__(self, default_input, name=None, requires_grad=True):
        from loom.common.initializer import InitSpec  # noqa: PLC0415
        if isinstance(default_input, InitSpec):
            self.spec, self.data = default_input, None  # drawn at registration, by name
        else:
            self.spec = None
            self.data = (default_input if isinstance(default_input, Tensor)
                         else Tensor(default_input))
        self.name = name
        self.requires_grad = requires_grad


def _save_graphs(obj):
    """Points obj's compiled function at set_context's save_graphs_path, once, when asked."""
    import loom  # noqa: PLC0415  (the package imports this module)
    if loom._context["save_graphs"] and not getattr(obj, "_graphs_dir_set", False):
        obj._set_save_graphs_dir(loom._context["save_graphs_path"])
        try:
            obj._graphs_dir_set = True
        except AttributeError:  # a built-in layer's instance has no __dict__
            pass


def _call(self, *inputs):
    """Calls construct: compiled in graph mode (a root call), op by op in PyNative mode."""
    tracing = _loom.tracing()
    if not tracing:
        _save_graphs(self)
    return self._call(list(inputs), _caller_site() if tracing else None)


_loom._Cell.__call__ = _call
_loom._Cell.parameters = lambda self: [p for _, p in self.parameters_and_names()]


class Cell(_loom._Cell):
    """The base of networks written in Python: define construct(self, *inputs)."""

    def __init__(self, auto_prefix=True):
        _loom._Cell.__init__(self, type(self).__name__, auto_prefix)

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            if value.spec is not None:
                value = self._register_parameter_init(value.name or name, list(value.spec.shape),
                                                      value.spec.dtype, value.spec.init,
                                                      value.requires_grad)
            else:
                value = self._register_parameter(value.name or name, value.data,
                                                 value.requires_grad)
        elif isinstance(value, _loom._Cell):
            self._register_cell(name, value)
        object.__setattr__(self, name, value)

    def construct(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__}: define construct(self, *inputs)")


class TrainOneStepCell(_loom.TrainOneStepCell):
    """One training step of a network with its loss (WithLossCell) and an optimizer:
    step(data, label) returns the loss before the update."""

    def __call__(self, data, label):
        _save_graphs(self)
        communication._setup_data_parallel(self)  # data_parallel mode: once, before the first step
        return _loom.TrainOneStepCell.__call__(self, data, label)
