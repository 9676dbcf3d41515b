"""Operators and methods of loom.Tensor and loom.Var, as MindSpore's Tensor has them: + - * / @ **,
unary -, == != < > (elementwise, Bool), indexing with integers, slices, ``...``, ``None`` and
index lists or tensors (rows, ops.Gather), item assignment on host tensors, astype, reshape,
transpose, sum and mean. Each goes through loom.ops, so it runs eagerly on
tensors and becomes a graph node on a traced Var."""
from loom import _loom, ops
from loom._loom import Tensor, Var


def _binary(op, reflected=False):
    def method(self, other):
        return op(other, self) if reflected else op(self, other)
    return method


def _index_attrs(key, shape):
    """StridedSlice's attributes (MindSpore's masks) for a basic index."""
    if not isinstance(key, tuple):
        key = (key,)
    begin, end, strides = [], [], []
    begin_mask = end_mask = ellipsis_mask = new_axis_mask = shrink_mask = 0
    axis = 0  # the axis of shape the next key element indexes
    explicit = sum(1 for k in key if k is not None and k is not Ellipsis)
    for i, k in enumerate(key):
        if k is Ellipsis:
            ellipsis_mask |= 1 << i
            begin.append(0), end.append(0), strides.append(1)
            axis += len(shape) - explicit
        elif k is None:
            new_axis_mask |= 1 << i
            begin.append(0), end.append(0), strides.append(1)
        elif isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            if k.start is None:
                begin_mask |= 1 << i
            if k.stop is None:
                end_mask |= 1 << i
            begin.append(0 if k.start is None else int(k.start))
            end.append(0 if k.stop is None else int(k.stop))
            strides.append(step)
            axis += 1
        elif isinstance(k, int) and not isinstance(k, bool):
            if axis >= len(shape):
                raise IndexError(f"index {k} on a tensor of rank {len(shape)}: too many indices")
            n = shape[axis]
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for axis {axis} with size {n}")
            k = k + n if k < 0 else k
            begin.append(k), end.append(k + 1), strides.append(1)
            shrink_mask |= 1 << i
            axis += 1
        else:
            raise TypeError("Tensor indexing: expected integers, slices, ..., None or an index "
                            f"list, got {type(k).__name__}")
    return dict(begin=tuple(begin), end=tuple(end), strides=tuple(strides),
                begin_mask=begin_mask, end_mask=end_mask, ellipsis_mask=ellipsis_mask,
                new_axis_mask=new_axis_mask, shrink_axis_mask=shrink_mask)


def _getitem(self, key):
    # An index list / array / tensor picks rows (ops.Gather along axis 0); the rest is basic
    # indexing (ops.StridedSlice).
    if isinstance(key, (list, Tensor, Var)) or type(key).__name__ == "ndarray":
        index = key if isinstance(key, (Tensor, Var)) else Tensor(key, dtype=_loom.DType.int32)
        return ops.Gather(self, index, axis=0)
    return ops.StridedSlice(self, **_index_attrs(key, self.shape))


def _eq(self, other):
    return ops.Equal(self, other)


def _ne(self, other):
    return ops.Equal(ops.Cast(ops.Equal(self, other), dst_type=_loom.DType.int32), 0)


def _setitem(self, key, value):
    """t[key] = value on a host tensor, in place (NumPy's indexing rules on the tensor's own
    memory: integers, slices, ..., index arrays and masks)."""
    if self.device != "CPU":
        raise TypeError(f"Tensor item assignment: expected a host tensor, got one on "
                        f"{self.device} (assign on the host, then move it)")
    import numpy as np  # noqa: PLC0415
    np.asarray(self)[key] = np.asarray(value)


def _astype(self, dtype):
    return ops.Cast(self, dst_type=dtype)


def _reshape(self, *shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return ops.Reshape(self, shape=tuple(int(s) for s in shape))


def _transpose(self, *perm):
    if not perm:
        perm = tuple(reversed(range(len(self.shape))))
    elif len(perm) == 1 and isinstance(perm[0], (tuple, list)):
        perm = tuple(perm[0])
    return ops.Transpose(self, perm=tuple(int(p) for p in perm))


def _axes(axis):
    if axis is None:
        return ()
    return (int(axis),) if isinstance(axis, int) else tuple(int(a) for a in axis)


def _sum(self, axis=None, keepdims=False):
    return ops.ReduceSum(self, axis=_axes(axis), keep_dims=keepdims)


def _mean(self, axis=None, keepdims=False):
    return ops.ReduceMean(self, axis=_axes(axis), keep_dims=keepdims)


for _cls in (Tensor, Var):
    _cls.__add__ = _binary(ops.Add)
    _cls.__radd__ = _binary(ops.Add, True)
    _cls.__sub__ = _binary(ops.Sub)
    _cls.__rsub__ = _binary(ops.Sub, True)
    _cls.__mul__ = _binary(ops.Mul)
    _cls.__rmul__ = _binary(ops.Mul, True)
    _cls.__truediv__ = _binary(ops.RealDiv)
    _cls.__rtruediv__ = _binary(ops.RealDiv, True)
    _cls.__matmul__ = _binary(ops.MatMul)
    _cls.__pow__ = _binary(ops.Pow)
    _cls.__lt__ = _binary(ops.Less)
    _cls.__gt__ = _binary(ops.Greater)
    _cls.__eq__ = _eq  # elementwise, as MindSpore's and NumPy's (hashing stays by identity)
    _cls.__ne__ = _ne
    _cls.__hash__ = object.__hash__
    _cls.__neg__ = lambda self: ops.Neg(self)
    _cls.__getitem__ = _getitem
    _cls.astype = _astype
    _cls.reshape = _reshape
    _cls.transpose = _transpose
    _cls.sum = _sum
    _cls.mean = _mean
    _cls.T = property(lambda self: _transpose(self))
del _cls
Tensor.__setitem__ = _setitem


def _var_bool(self):
    raise TypeError("a traced value (loom.Var) has no truth value while a function or construct "
                    "is traced: Python's if / while run once, at trace time; branch on data "
                    "with ops.Select, or compute the condition outside the traced code")


Var.__bool__ = _var_bool

# A Python number on the left of a Tensor operator takes the tensor's dtype (ops convert numbers
# to the first tensor argument's dtype, which the reflected methods pass second).
_loom  # noqa: B018  (the module the operators call through)
