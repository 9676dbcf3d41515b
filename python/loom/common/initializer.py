"""Initializers, as MindSpore's mindspore.common.initializer.

    from loom.common.initializer import initializer, Normal, HeUniform
    self.w = loom.nn.Parameter(initializer(Normal(0.02), [120, 400], loom.float32))

initializer(init, shape, dtype) describes a tensor to draw; a Parameter made from it is drawn
when its Cell registers it, from the random stream of the parameter's full name ("fc1.w"), and
drawn again when the name changes (the Cell registered into a parent), so its values depend only
on the seed in force and the final name, as the built-in layers' parameters do. init_data()
draws it now from the stream "initializer" instead. init: an Initializer, a name ("normal",
"he_uniform", "xavier_uniform", "zeros", "ones"...) or a number (a Constant).
"""
from loom import _loom
from loom._loom import (  # noqa: F401
    Constant,
    HeNormal,
    HeUniform,
    Initializer,
    Normal,
    One,
    TruncatedNormal,
    Uniform,
    XavierUniform,
    Zero,
)


class InitSpec:
    """What initializer() returns: an initializer with the shape and dtype to draw."""

    def __init__(self, init, shape, dtype):
        if isinstance(init, (int, float)) and not isinstance(init, bool):
            init = Constant(float(init))
        elif isinstance(init, str):
            init = _loom.make_initializer(init)
        elif not isinstance(init, Initializer):
            raise TypeError("initializer: expected an Initializer, a name or a number, got "
                            f"{type(init).__name__}")
        self.init = init
        self.shape = tuple(int(s) for s in ([shape] if isinstance(shape, int) else shape))
        self.dtype = dtype

    def init_data(self):
        """The tensor, drawn now from the stream "initializer"."""
        return _loom.draw_initializer(self.init, list(self.shape), self.dtype, "initializer")

    def __repr__(self):
        return f"initializer({self.init.name}, {self.shape}, {self.dtype})"


def initializer(init, shape, dtype=_loom.DType.float32):
    return InitSpec(init, shape, dtype)


__all__ = ["initializer", "Initializer", "Normal", "TruncatedNormal", "Uniform", "HeUniform",
           "HeNormal", "XavierUniform", "Constant", "Zero", "One"]
