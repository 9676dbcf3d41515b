"""The debugger's tools from Python (docs/debugging.md): pass them among Model.train's callbacks.

    model.train(1, data, callbacks=[loom.debug.NumericsChecker()])     # the first NaN / Inf
    model.train(1, data, callbacks=[loom.debug.Dumper(path="dump")])   # MindSpore's dump layout
    model.train(1, data, callbacks=[loom.debug.Watcher("tensor_overflow;gradient_vanishing")])

With MINDSPORE_DUMP_CONFIG (or LOOM_DUMP_CONFIG) naming a data_dump.json in the environment,
Model.train dumps as that file says, as MindSpore does. `loom compare` reads the dumps.
"""
from loom._loom import Dumper, NumericsChecker, Watcher  # noqa: F401

__all__ = ["Dumper", "NumericsChecker", "Watcher"]
