"""loom: a graph-mode deep-learning framework in the family of MindSpore, from Python.

    import numpy as np
    import loom
    from loom import ops

    x = loom.Tensor(np.ones((2, 3), np.float32))   # shares the array's memory
    y = ops.ReLU(ops.Sub(x, 0.5))                   # eager: runs the kernel now
    y.asnumpy()                                     # a NumPy view of y's memory

    def f(x, w):
        return ops.ReduceSum(ops.Mul(ops.MatMul(x, w), 2.0), axis=(), keep_dims=False)
    dx, dw = loom.grad(f, grad_position=(0, 1))(x, loom.Tensor(np.ones((3, 4), np.float32)))

The package wraps loom's C++ core (loom._loom): every op of its registry (loom.ops), tensors that
share memory with NumPy and DLPack, and gradients of Python functions by source transformation.
"""
from loom import _loom
from loom._loom import (  # noqa: F401
    DType,
    LoomError,
    LoomFormatError,
    LoomInternalError,
    LoomShapeError,
    LoomTypeError,
    LoomValueError,
    Tensor,
    Var,
    from_dlpack,
)

float32 = DType.float32
float64 = DType.float64
float16 = DType.float16
bfloat16 = DType.bfloat16
int32 = DType.int32
int64 = DType.int64
uint8 = DType.uint8
bool_ = DType.bool_

GRAPH_MODE = 0
PYNATIVE_MODE = 1


_context = {"save_graphs": False, "save_graphs_path": "."}


def set_context(mode=None, device_target=None, save_graphs=None, save_graphs_path=None):
    """MindSpore's set_context: mode GRAPH_MODE (compiled, the default) or PYNATIVE_MODE (op by
    op), device_target "CPU" or "GPU", save_graphs (True or a level above 0: every compile stage
    of the graphs compiled from then on is written under save_graphs_path, one folder per
    compiled function, as `loom train --save-graphs`)."""
    _loom.set_context(mode, device_target)
    if save_graphs is not None:
        _context["save_graphs"] = bool(save_graphs)
    if save_graphs_path is not None:
        _context["save_graphs_path"] = str(save_graphs_path)


def get_context(key):
    """"mode", "device_target", "save_graphs" or "save_graphs_path"."""
    if key == "mode":
        return _loom.get_context_mode()
    if key == "device_target":
        return "GPU" if _loom.get_context_device() == "CUDA" else _loom.get_context_device()
    if key in _context:
        return _context[key]
    raise ValueError(f"get_context: expected mode, device_target, save_graphs or "
                     f"save_graphs_path, got {key!r}")


def set_seed(seed, deterministic=False):
    """seed_all: the seed of every random stream (initializers, shuffles, dropout masks);
    deterministic also picks the kernels that repeat bitwise."""
    _loom.seed_all(seed, deterministic)


from loom import ops  # noqa: E402
from loom import _tensor_methods  # noqa: E402,F401  (operators of Tensor and Var)
from loom._autodiff import grad, value_and_grad  # noqa: E402
from loom import nn  # noqa: E402
from loom.nn import Parameter  # noqa: E402
from loom import dataset  # noqa: E402
from loom.train import (  # noqa: E402
    Callback,
    CheckpointConfig,
    LossMonitor,
    Model,
    ModelCheckpoint,
    Profiler,
    SummaryCollector,
    TimeMonitor,
)
from loom import amp, common, communication, debug, io, models  # noqa: E402
from loom.communication import (  # noqa: E402
    ParallelMode,
    get_auto_parallel_context,
    reset_auto_parallel_context,
    set_auto_parallel_context,
)
from loom.io import (  # noqa: E402
    export,
    load,
    load_checkpoint,
    load_param_into_net,
    save_checkpoint,
)

__all__ = [
    "GRAPH_MODE", "PYNATIVE_MODE", "set_context", "get_context", "set_seed", "nn", "Parameter", "dataset",
    "Model", "Callback", "LossMonitor", "TimeMonitor", "ModelCheckpoint", "CheckpointConfig",
    "SummaryCollector", "Profiler", "models", "amp", "communication", "ParallelMode",
    "set_auto_parallel_context", "get_auto_parallel_context", "reset_auto_parallel_context", "io", "save_checkpoint",
    "load_checkpoint", "load_param_into_net", "export", "load",
    "DType", "Tensor", "Var", "from_dlpack", "ops", "grad", "value_and_grad",
    "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool_",
    "LoomError", "LoomValueError", "LoomShapeError", "LoomTypeError", "LoomFormatError",
    "LoomInternalError",
]
