"""Every op of loom's registry as a function: ops.MatMul(a, b, transpose_b=True).

Positional arguments are the op's inputs (loom.Tensor, NumPy arrays, Python numbers, which take
the dtype of the op's first tensor input, or loom.Var while a function is traced); keyword
arguments are its attributes, checked against the registry's schema. A call on tensors runs the
kernel at once (PyNative); inside loom.grad's trace it adds a node to the graph, with the
caller's file and line as its source location. Each function's docstring comes from the
registry: its summary, inputs, outputs and attributes with their defaults.
"""
import os
import sys

from loom import _loom

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _caller_site():
    """(file, line) of the nearest frame outside the loom package."""
    frame = sys._getframe(2)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == \
            _PACKAGE_DIR:
        frame = frame.f_back
    if frame is None:
        return None
    return (frame.f_code.co_filename, frame.f_lineno)


def _docstring(info):
    lines = [info["summary"] or info["name"], ""]
    n = info["num_inputs"]
    lines.append(f"Inputs: {n}" if n >= 0 else f"Inputs: {info['min_inputs']} or more")
    m = info["num_outputs"]
    lines.append("Outputs: 1 tensor" if m == 1 else
                 f"Outputs: a tuple of {m} tensors" if m > 1 else "Outputs: set by attributes")
    if info["attrs"]:
        lines.append("Attributes:")
        for name, kind, has_default, default in info["attrs"]:
            lines.append(f"    {name} ({kind})" + (f" = {default!r}" if has_default else
                                                    ", required"))
    if not info["differentiable"]:
        lines.append(f"Not differentiable: {info['not_differentiable_because']}")
    return "\n".join(lines)


def _make(name):
    def op(*args, **attrs):
        site = _caller_site() if _loom.tracing() else None
        try:
            return _loom.call_op(name, list(args), attrs, site)
        except _loom.LoomError as e:
            if site is not None and f"{site[0]}:{site[1]}" not in str(e):
                raise type(e)(f"{e} (at {site[0]}:{site[1]})") from None
            raise
    op.__name__ = name
    op.__qualname__ = name
    op.__doc__ = _docstring(_loom.op_info(name))
    return op


names = _loom.op_names()
for _name in names:
    globals()[_name] = _make(_name)
del _name

__all__ = list(names)
