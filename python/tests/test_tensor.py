"""loom.Tensor and NumPy / DLPack: shared memory both ways, lifetimes, dtypes, copies."""
import gc
import weakref

import numpy as np
import pytest

import loom

DTYPES = [(np.float32, loom.float32), (np.float64, loom.float64), (np.float16, loom.float16),
          (np.int32, loom.int32), (np.int64, loom.int64), (np.uint8, loom.uint8),
          (np.bool_, loom.bool_)]


@pytest.mark.parametrize("np_dtype,dtype", DTYPES)
def test_numpy_round_trip_shares_memory_for_every_dtype(np_dtype, dtype):
    a = (np.arange(12) % 3).astype(np_dtype).reshape(3, 4)
    t = loom.Tensor.from_numpy(a)
    assert t.dtype == dtype
    assert t.shape == (3, 4)
    assert t.data_ptr() == a.ctypes.data  # no copy into loom
    b = t.asnumpy()
    assert b.ctypes.data == a.ctypes.data  # no copy out of loom
    assert b.dtype == np.dtype(np_dtype)
    np.testing.assert_array_equal(b, a)
    a[0, 0] = 1  # one memory: a write shows through every view
    assert np.asarray(t)[0, 0] == 1


def test_size_zero_and_rank_zero_arrays():
    for shape in [(0,), (2, 0, 3), ()]:
        a = np.zeros(shape, np.float32)
        t = loom.Tensor(a)
        assert t.shape == shape
        assert t.size == a.size
        assert t.asnumpy().shape == shape


def test_tensor_keeps_the_array_alive():
    a = np.arange(6, dtype=np.float32)
    t = loom.Tensor(a)
    ptr = a.ctypes.data
    owner = weakref.ref(a)
    del a
    gc.collect()
    assert owner() is not None  # the tensor holds the array
    assert t.data_ptr() == ptr
    np.testing.assert_array_equal(t.asnumpy(), np.arange(6, dtype=np.float32))


def test_array_keeps_the_tensor_alive():
    t = loom.ops.Add(loom.Tensor(np.ones(4, np.float32)), 1.0)  # memory loom allocated
    b = np.asarray(t)
    del t
    gc.collect()
    np.testing.assert_array_equal(b, np.full(4, 2, np.float32))


def test_non_contiguous_and_read_only_arrays_are_copied():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = a[:, ::2]  # strided view
    t = loom.Tensor(v)
    assert t.shape == (3, 2)
    assert t.data_ptr() != a.ctypes.data
    np.testing.assert_array_equal(t.asnumpy(), v)
    r = np.arange(4, dtype=np.float32)
    r.setflags(write=False)
    tr = loom.Tensor(r)
    assert tr.data_ptr() != r.ctypes.data  # loom may write its tensors: a copy
    np.testing.assert_array_equal(tr.asnumpy(), r)


def test_lists_and_numbers_take_mindspore_dtypes():
    assert loom.Tensor([[1.5, 2.0]]).dtype == loom.float32
    assert loom.Tensor([1, 2, 3]).dtype == loom.int64
    assert loom.Tensor(3.0).shape == ()
    assert loom.Tensor([1, 2], dtype=loom.float64).dtype == loom.float64


def test_a_dtype_loom_lacks_is_refused_by_name():
    with pytest.raises(TypeError, match="complex64"):
        loom.Tensor(np.zeros(3, np.complex64))


def test_dlpack_with_pytorch_shares_memory_both_ways():
    import torch  # noqa: PLC0415  (Debian's python3-torch: setup.sh installs it)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = loom.from_dlpack(x)
    assert t.shape == (2, 3) and t.dtype == loom.float32
    assert t.data_ptr() == x.data_ptr()
    del x
    gc.collect()
    np.testing.assert_array_equal(t.asnumpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    y = torch.utils.dlpack.from_dlpack(t)  # loom -> PyTorch
    assert y.data_ptr() == t.data_ptr()
    y[0, 0] = 42
    assert t.asnumpy()[0, 0] == 42
    assert t.__dlpack_device__() == (1, 0)


def test_dlpack_refuses_strided_views():
    import torch  # noqa: PLC0415  (Debian's python3-torch: setup.sh installs it)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    with pytest.raises(ValueError, match="contiguous"):
        loom.from_dlpack(x)


def test_dlpack_with_numpy():
    a = np.arange(5, dtype=np.int64)
    t = loom.from_dlpack(a)
    assert t.data_ptr() == a.ctypes.data
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data


def test_repr_names_shape_dtype_and_values():
    s = repr(loom.Tensor(np.array([[1, 2]], np.int32)))
    assert s.startswith("Tensor(shape=(1, 2), dtype=Int32, value=")
    assert "[[1 2]]" in s


def test_the_array_is_freed_with_its_last_tensor():
    a = np.arange(6, dtype=np.float32)
    owner = weakref.ref(a)
    t = loom.Tensor(a)
    del a
    gc.collect()
    assert owner() is not None
    del t
    gc.collect()
    assert owner() is None  # no leak: the storage released its owner
