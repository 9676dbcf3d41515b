"""loom.ops: every registered op, eager calls, attributes, operators, indexing, errors."""
import numpy as np
import pytest

import loom
from loom import _loom, ops


def test_every_registered_op_is_a_function_with_the_registrys_docstring():
    names = _loom.op_names()
    assert names == sorted(set(names))
    assert {"MatMul", "Conv2D", "BatchNorm", "StridedSlice", "ApplyMomentum"} <= set(names)
    assert set(ops.__all__) == set(names)
    for name in names:
        f = getattr(ops, name)
        assert f.__name__ == name
        info = _loom.op_info(name)
        assert f.__doc__.splitlines()[0] == (info["summary"] or name)
    assert "    keep_dims (bool) = False" in ops.ReduceSum.__doc__.splitlines()
    assert "    dst_type (loom dtype), required" in ops.Cast.__doc__.splitlines()


def test_eager_ops_match_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    ta, tb = loom.Tensor(a), loom.Tensor(b)
    np.testing.assert_allclose(ops.MatMul(ta, tb).asnumpy(), a @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.MatMul(ta, ta, transpose_b=True).asnumpy(), a @ a.T,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ops.ReLU(ta).asnumpy(), np.maximum(a, 0))
    np.testing.assert_allclose(ops.ReduceSum(ta, axis=(1,), keep_dims=True).asnumpy(),
                               a.sum(axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(ops.Softmax(ta, axis=-1).asnumpy(),
                               np.exp(a) / np.exp(a).sum(-1, keepdims=True), rtol=1e-5)


def test_operators_and_numbers_take_the_tensors_dtype():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    t = loom.Tensor(a)
    np.testing.assert_array_equal((t + 1).asnumpy(), a + 1)
    np.testing.assert_array_equal((2 * t - t / 2).asnumpy(), 2 * a - a / 2)
    np.testing.assert_array_equal((-t).asnumpy(), -a)
    np.testing.assert_array_equal((1 - t).asnumpy(), 1 - a)
    assert (t + 1).dtype == loom.float64
    np.testing.assert_allclose((t @ t.T).asnumpy(), a @ a.T)
    np.testing.assert_array_equal(t.sum(axis=0).asnumpy(), a.sum(axis=0))
    np.testing.assert_array_equal(t.reshape(3, 2).asnumpy(), a.reshape(3, 2))
    np.testing.assert_array_equal(t.astype(loom.int32).asnumpy(), a.astype(np.int32))


@pytest.mark.parametrize("key", [1, -1, (0, 2), slice(None), slice(1, None),
                                 (slice(None), slice(0, 3, 2)), (Ellipsis, 1), (None, 1),
                                 (1, slice(None, None, -1))])
def test_indexing_as_numpy(key):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(loom.Tensor(a)[key].asnumpy(), a[key])


def test_index_errors():
    t = loom.Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(IndexError, match="out of bounds"):
        t[2]
    with pytest.raises(TypeError, match="float"):
        t[1.5]


def test_errors_are_python_exceptions_with_loom_messages():
    a = loom.Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="MatMul"):
        ops.MatMul(a, a)
    with pytest.raises(loom.LoomError):  # every loom error is a LoomError too
        ops.MatMul(a, a)
    assert issubclass(loom.LoomShapeError, ValueError)
    assert issubclass(loom.LoomTypeError, TypeError) and issubclass(loom.LoomTypeError,
                                                                     loom.LoomError)
    with pytest.raises(ValueError, match="expected a registered op"):
        _loom.call_op("NoSuchOp", [a], {})
    with pytest.raises(Exception, match="transpose_a"):
        ops.MatMul(a, a, transpose_a="yes")


def test_item_assignment_writes_the_tensors_memory():
    a = np.zeros((2, 3), np.float32)
    t = loom.Tensor(a)
    t[0, 1] = 5
    t[1] = np.array([1, 2, 3], np.float32)
    t[t.asnumpy() > 2] = -1  # a mask, as NumPy takes it
    np.testing.assert_array_equal(a, [[0, -1, 0], [1, 2, -1]])  # 5 and 3 were masked


def test_comparisons_and_index_lists():
    a = np.array([[1, 2], [3, 4], [5, 6]], np.int32)
    t = loom.Tensor(a)
    np.testing.assert_array_equal((t == 3).asnumpy(), a == 3)
    np.testing.assert_array_equal((t != 3).asnumpy(), a != 3)
    np.testing.assert_array_equal((t > 3).asnumpy(), a > 3)
    np.testing.assert_array_equal((t < 3).asnumpy(), a < 3)
    np.testing.assert_array_equal(t[[2, 0]].asnumpy(), a[[2, 0]])
    np.testing.assert_array_equal(t[np.array([1])].asnumpy(), a[[1]])
    assert len({t, t}) == 1  # hashable by identity
