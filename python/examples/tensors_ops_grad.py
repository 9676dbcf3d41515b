import numpy as np
import torch
import loom
from loom import ops

x = loom.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))  # shares the array's memory
print(x + 1)
print((x @ x.T).asnumpy())
print(x[:, 1:])

def f(x, w):
    return ops.ReduceSum(ops.Tanh(x @ w), axis=(), keep_dims=False)

w = loom.Tensor(np.ones((3, 2), np.float32) / 4)
dx, dw = loom.grad(f, grad_position=(0, 1))(x, w)
print(dw)

t = torch.from_dlpack(x)               # loom -> PyTorch, no copy
print(t.data_ptr() == x.data_ptr())
print(ops.MatMul.__doc__)
try:
    ops.MatMul(x, x)
except ValueError as e:
    print("ValueError:", e)
