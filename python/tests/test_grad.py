"""loom.grad / value_and_grad on Python functions, against PyTorch's autograd in float64."""
import os

import numpy as np
import pytest

import loom
from loom import ops

import torch  # noqa: E402  (Debian's python3-torch: setup.sh installs it)
torch.set_default_dtype(torch.float64)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def f_loom(x, w, b):
    h = ops.Tanh(ops.BiasAdd(ops.MatMul(x, w), b))
    return ops.ReduceSum(h * h + ops.Exp(x).mean(), axis=(), keep_dims=False)


def f_torch(x, w, b):
    h = torch.tanh(x @ w + b)
    return (h * h + torch.exp(x).mean()).sum()


def test_gradients_of_a_python_function_equal_pytorchs():
    x, w, b = rand(4, 3, seed=1), rand(3, 5, seed=2), rand(5, seed=3)
    dx, dw, db = loom.grad(f_loom, grad_position=(0, 1, 2))(
        loom.Tensor(x), loom.Tensor(w), loom.Tensor(b))
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    f_torch(tx, tw, tb).backward()
    for got, want in [(dx, tx.grad), (dw, tw.grad), (db, tb.grad)]:
        assert got.dtype == loom.float64
        np.testing.assert_allclose(got.asnumpy(), want.numpy(), rtol=1e-10, atol=1e-12)


def test_value_and_grad_and_single_position():
    x, w, b = rand(2, 3, seed=4), rand(3, 2, seed=5), rand(2, seed=6)
    value, dw = loom.value_and_grad(f_loom, grad_position=1)(x, w, b)
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    out = f_torch(tx, tw, tb)
    out.backward()
    np.testing.assert_allclose(value.asnumpy(), out.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(dw.asnumpy(), tw.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_one_trace_per_signature():
    calls = []

    def f(x):
        calls.append(1)
        return ops.ReduceSum(x * x, axis=(), keep_dims=False)

    g = loom.grad(f)
    for _ in range(3):
        np.testing.assert_allclose(g(np.ones(3)).asnumpy(), 2 * np.ones(3))
    assert len(calls) == 1
    g(np.ones(4))
    assert len(calls) == 2


def test_a_shape_error_in_a_traced_function_names_the_python_line():
    def bad(x):
        return ops.MatMul(x, x)  # (2, 3) @ (2, 3)

    line = bad.__code__.co_firstlineno + 1
    with pytest.raises(ValueError) as e:
        loom.grad(bad)(np.zeros((2, 3)))
    assert f"{os.path.basename(__file__)}:{line}" in str(e.value)
    assert "MatMul" in str(e.value)


def test_grad_position_out_of_range():
    with pytest.raises(ValueError, match="grad_position"):
        loom.grad(lambda x: ops.ReduceSum(x, axis=(), keep_dims=False), grad_position=2)(
            np.ones(2))


def test_higher_order_gradients():
    x = rand(5, seed=7)

    def f(x):
        return ops.ReduceSum(ops.Tanh(x) * x * x, axis=(), keep_dims=False)

    def df_sum(x):  # sum of d f / d x: a scalar function of x again
        return ops.ReduceSum(loom.grad(f)(x), axis=(), keep_dims=False)

    d2 = loom.grad(df_sum)(loom.Tensor(x))
    tx = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad((torch.tanh(tx) * tx * tx).sum(), tx, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), tx, create_graph=True)
    np.testing.assert_allclose(d2.asnumpy(), h.detach().numpy(), rtol=1e-10, atol=1e-12)
    # third order
    d3 = loom.grad(lambda x: ops.ReduceSum(loom.grad(df_sum)(x), axis=(), keep_dims=False))(x)
    (h2,) = torch.autograd.grad(h.sum(), tx)
    np.testing.assert_allclose(d3.asnumpy(), h2.numpy(), rtol=1e-9, atol=1e-11)


def test_gradients_through_a_cell():
    loom.set_seed(2)
    net = loom.nn.Dense(3, 2)
    x = rand(4, 3, seed=8).astype(np.float32)

    def f(x):
        return ops.ReduceSum(net(x) * net(x), axis=(), keep_dims=False)

    w = net.parameters_and_names()[0][1].asnumpy()
    b = net.parameters_and_names()[1][1].asnumpy()
    want = 2 * (x @ w.T + b) @ w  # d/dx sum((x W^T + b)^2)
    np.testing.assert_allclose(loom.grad(f)(x).asnumpy(), want, rtol=1e-5, atol=1e-6)


def test_weights_gradients_equal_pytorchs_and_follow_the_parameters():
    """MindSpore's value_and_grad(fn, grad_position, weights): the Parameters' gradients, read
    from the Parameters' current values at each call; zeros for a weight fn does not read."""
    loom.set_seed(3)
    net = loom.nn.SequentialCell([loom.nn.Dense(3, 4), loom.nn.Tanh(), loom.nn.Dense(4, 2)])
    unused = loom.nn.Dense(2, 2)
    x = rand(5, 3, seed=10).astype(np.float32)

    def f(x):
        return ops.ReduceSum(net(x) * net(x), axis=(), keep_dims=False)

    weights = net.trainable_params() + unused.trainable_params()
    vg = loom.value_and_grad(f, None, weights=weights)
    for trial in range(2):
        tparams = [torch.tensor(p.asnumpy(), dtype=torch.float64, requires_grad=True)
                   for p in net.trainable_params()]
        w1, b1, w2, b2 = tparams
        out = torch.tanh(torch.tensor(x, dtype=torch.float64) @ w1.T + b1) @ w2.T + b2
        (out * out).sum().backward()
        value, grads = vg(x)
        np.testing.assert_allclose(value.asnumpy(), (out * out).sum().item(), rtol=1e-5)
        assert len(grads) == 6
        for g, t in zip(grads, tparams):
            np.testing.assert_allclose(g.asnumpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)
        for g, p in zip(grads[4:], unused.trainable_params()):
            assert g.shape == p.shape and not g.asnumpy().any()
        # The gradients follow a changed weight (no stale snapshot of the trace).
        p0 = net.trainable_params()[0]
        p0.value = loom.Tensor(p0.asnumpy() * 0.5)
    dx, dw = loom.grad(f, 0, weights=net.trainable_params())(x)
    assert dx.shape == (5, 3) and len(dw) == 4
    with pytest.raises(TypeError, match="expected weights to be Parameters"):
        loom.grad(f, weights=[np.ones(3)])


def test_grad_of_a_cell_and_second_order_through_a_cell():
    loom.set_seed(1)
    net = loom.nn.SequentialCell([loom.nn.Dense(3, 3), loom.nn.Tanh()])
    x = rand(2, 3, seed=9)
    params = dict(net.parameters_and_names())
    w = torch.tensor(params["0.weight"].asnumpy(), dtype=torch.float64)
    b = torch.tensor(params["0.bias"].asnumpy(), dtype=torch.float64)
    tx = torch.tensor(x, requires_grad=True)
    out = torch.tanh(tx @ w.T + b)
    (g1,) = torch.autograd.grad(out.sum(), tx, create_graph=True)
    (g2,) = torch.autograd.grad(g1.sum(), tx)
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(loom.grad(net)(x32).asnumpy(), g1.detach().numpy(), rtol=1e-5,
                               atol=1e-6)  # a Cell as the function: d sum(net(x)) / dx

    def f(x):
        return ops.ReduceSum(net(x), axis=(), keep_dims=False)

    def g(x):
        return ops.ReduceSum(loom.grad(f)(x), axis=(), keep_dims=False)

    np.testing.assert_allclose(loom.grad(g)(x32).asnumpy(), g2.numpy(), rtol=1e-4, atol=1e-6)


def test_python_if_on_a_traced_value_is_a_clear_error():
    def f(x):
        if ops.ReduceSum(x, axis=(), keep_dims=False) > 0:  # decided at trace time: refused
            return ops.ReduceSum(x * x, axis=(), keep_dims=False)
        return ops.ReduceSum(x, axis=(), keep_dims=False)

    with pytest.raises(TypeError, match="no truth value"):
        loom.grad(f)(np.ones(3))
