"""Data parallelism under mpirun, as MindSpore's mindspore.communication and its auto parallel
context: every rank runs the same script on its share of each batch, and the gradients are
averaged over the ranks inside the training step.

    mpirun -np 2 python3 train.py

    import loom
    from loom.communication import init, get_rank, get_group_size

    init()                                     # MPI under mpirun; rank 0 of 1 otherwise
    loom.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    loom.set_seed(1)                           # the same seed on every rank
    model = loom.Model(net, loss, opt)         # trains data-parallel from its first step
    data = data.shuffle().shard(get_group_size(), get_rank()).batch(16)
    model.train(1, data)

In data-parallel mode a Model (or TrainOneStepCell), before its first step, puts the gradient
all-reduce into its step graph and takes rank 0's parameters, optimizer states and step count
(loom's parallel::setup_data_parallel): every rank then holds the same weights after every step.
With gradients_mean the gradients are the mean over the ranks, so n ranks training on batches of
B (rows r, r + n, ... of the global batch: shard between shuffle and batch) follow one process
training on batches of n * B to float rounding. Without it (MindSpore's default) they are
summed. data_parallel is the only parallel mode loom has.
"""
import sys

from loom import _loom


class GlobalComm:
    """MindSpore's name of the group of all ranks (the only group loom has)."""
    WORLD_COMM_GROUP = "loom_world_group"


def init(backend_name=None):
    """Starts communication: MPI when mpirun (or another launcher) started this process, else
    nothing (the process is rank 0 of 1). backend_name: None or "mpi"; "nccl" is accepted for
    MindSpore's GPU scripts and runs over MPI too (reductions staged through host memory). A
    ValueError in a build without MPI when several processes were launched.

    With several ranks, an exception that ends this rank's script ends the whole job at once,
    its traceback printed and then the rank named (MPI_Abort), as `mpirun loom train` does,
    whatever collective the other ranks are waiting in."""
    if backend_name not in (None, "mpi", "nccl"):
        raise ValueError(f"init: expected backend_name None, 'mpi' or 'nccl', got {backend_name!r}")
    _loom.parallel_init()
    if _loom.get_group_size() > 1 and not isinstance(sys.excepthook, _AbortOnException):
        sys.excepthook = _AbortOnException(sys.excepthook)


class _AbortOnException:
    """sys.excepthook under mpirun: the previous hook (the traceback), then the job's end."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, kind, value, traceback):
        self.previous(kind, value, traceback)
        if _loom.parallel_initialized():
            sys.stderr.flush()
            _loom.parallel_abort(f"uncaught {kind.__name__}: {value}")


def release():
    """Finishes outstanding reductions and finalises MPI (MPI cannot start again after it)."""
    _loom.parallel_finalize()


def _check_group(place, group):
    if group is not None and group != GlobalComm.WORLD_COMM_GROUP:
        raise ValueError(f"{place}: expected the world group ({GlobalComm.WORLD_COMM_GROUP!r}, "
                         f"the only one), got {group!r}")
    if _loom.launched_by_mpi() and not _loom.parallel_initialized():
        raise RuntimeError(f"{place}: expected loom.communication.init() first (this process "
                           f"was started by mpirun), got no init")


def get_rank(group=None):
    """This process's rank in the world group (0 without mpirun)."""
    _check_group("get_rank", group)
    return _loom.get_rank()


def get_group_size(group=None):
    """The number of ranks (1 without mpirun)."""
    _check_group("get_group_size", group)
    return _loom.get_group_size()


class ParallelMode:
    """MindSpore's parallel modes; loom has STAND_ALONE and DATA_PARALLEL."""
    STAND_ALONE = "stand_alone"
    DATA_PARALLEL = "data_parallel"
    SEMI_AUTO_PARALLEL = "semi_auto_parallel"
    AUTO_PARALLEL = "auto_parallel"
    HYBRID_PARALLEL = "hybrid_parallel"


_DEFAULTS = {"parallel_mode": ParallelMode.STAND_ALONE, "gradients_mean": False,
             "device_num": None}
# The auto parallel context: what set_auto_parallel_context last set (process-wide).
_auto_parallel = dict(_DEFAULTS)


def set_auto_parallel_context(**kwargs):
    """MindSpore's set_auto_parallel_context: parallel_mode ("stand_alone", the default, or
    "data_parallel"), gradients_mean (the gradients' mean over the ranks when True, their sum
    when False, MindSpore's default), device_num (the number of ranks expected; checked against
    the group size when a network is set up). Keys not given keep their values."""
    for key, value in kwargs.items():
        if key not in _DEFAULTS:
            raise ValueError(f"set_auto_parallel_context: expected parallel_mode, gradients_mean "
                             f"or device_num, got {key!r}")
        if key == "parallel_mode":
            if value not in (ParallelMode.STAND_ALONE, ParallelMode.DATA_PARALLEL):
                raise ValueError(f"set_auto_parallel_context: expected parallel_mode "
                                 f"'stand_alone' or 'data_parallel' (loom's only parallel mode), "
                                 f"got {value!r}")
        elif key == "gradients_mean":
            if not isinstance(value, bool):
                raise TypeError(f"set_auto_parallel_context: expected gradients_mean a bool, got "
                                f"{type(value).__name__}")
        elif key == "device_num":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"set_auto_parallel_context: expected device_num an integer >= "
                                 f"1, got {value!r}")
    _auto_parallel.update(kwargs)


def get_auto_parallel_context(attr_key):
    """"parallel_mode", "gradients_mean" or "device_num" (the group size unless set)."""
    if attr_key not in _DEFAULTS:
        raise ValueError(f"get_auto_parallel_context: expected parallel_mode, gradients_mean or "
                         f"device_num, got {attr_key!r}")
    if attr_key == "device_num" and _auto_parallel["device_num"] is None:
        return _loom.get_group_size()
    return _auto_parallel[attr_key]


def reset_auto_parallel_context():
    """Back to stand-alone training (parallel_mode "stand_alone", gradients_mean False)."""
    _auto_parallel.clear()
    _auto_parallel.update(_DEFAULTS)


def _setup_data_parallel(model_or_step):
    """Model.train and TrainOneStepCell's call, before each step: in data-parallel mode the
    gradient all-reduce and rank 0's state, once per object (loom's setup_data_parallel); True
    when it set up now. Stand-alone: nothing."""
    if _auto_parallel["parallel_mode"] != ParallelMode.DATA_PARALLEL:
        return False
    size = _loom.get_group_size()
    want = _auto_parallel["device_num"]
    if want is not None and want != size:
        raise ValueError(f"data_parallel: expected device_num {want} ranks "
                         f"(set_auto_parallel_context), got a group of {size}")
    return _loom.setup_data_parallel(model_or_step, _auto_parallel["gradients_mean"])


__all__ = ["init", "release", "get_rank", "get_group_size", "GlobalComm", "ParallelMode",
           "set_auto_parallel_context", "get_auto_parallel_context",
           "reset_auto_parallel_context"]
