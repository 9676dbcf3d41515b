"""loom.grad and loom.value_and_grad: MindSpore's functional autodiff on Python functions.

The function is traced once per signature of its tensor arguments (their dtypes and shapes) into
loom's IR, differentiated by source transformation (the same autodiff as C++ networks) and
compiled; later calls with that signature only run the compiled gradient. Called inside another
function's trace, the gradient is a call of the gradient graph there, so gradients of gradients
(higher order) come out of the same transform.
"""
from loom import _loom
from loom._loom import Tensor, Var


def _positions(grad_position, n):
    if isinstance(grad_position, int):
        if not -n <= grad_position < n:
            raise ValueError(f"grad: expected grad_position in [-{n}, {n}), got {grad_position}")
        return grad_position % n, True
    positions = tuple(grad_position)
    for p in positions:
        if not isinstance(p, int) or not -n <= p < n:
            raise ValueError(f"grad: expected grad_position entries in [-{n}, {n}), got {p}")
    return tuple(p % n for p in positions), False


def _name(fn):
    name = getattr(fn, "__name__", "fn")
    return name if name.isidentifier() else "fn"


def _weights(weights):
    if weights is None:
        return None
    if isinstance(weights, _loom.Parameter):
        return [weights]
    weights = list(weights)
    for w in weights:
        if not isinstance(w, _loom.Parameter):
            raise TypeError("grad: expected weights to be Parameters (net.trainable_params()), "
                            f"got a {type(w).__name__}")
    return weights


def _compiled(fn, cache, args, return_value, weights):
    if any(isinstance(a, Var) for a in args):
        if weights is not None:
            raise ValueError("grad: weights= is not supported inside another function's trace")
        # Inside another function's trace (grad of grad): the gradient becomes a call in that
        # trace's graph, so it can be differentiated again.
        return _loom.grad_in_trace(fn, list(args), return_value, _name(fn))
    tensors = [a if isinstance(a, Tensor) else Tensor(a) for a in args]
    key = tuple((t.dtype, t.shape) for t in tensors)
    g = cache.get(key)
    if g is None:
        g = _loom.GradFunction(fn, [(t.dtype, list(t.shape)) for t in tensors], return_value,
                               _name(fn), weights or [])
        cache[key] = g
    return g.run(tensors)


def _select(grads, grad_position, weights):
    if weights is not None:
        inputs, wgrads = grads
        if grad_position is None:
            return wgrads
        return _select(inputs, grad_position, None), wgrads
    if grad_position is None:
        raise ValueError("grad: expected grad_position or weights, got neither")
    positions, single = _positions(grad_position, len(grads))
    return grads[positions] if single else tuple(grads[p] for p in positions)


def grad(fn, grad_position=0, weights=None):
    """The gradient of fn's (tensor) output with respect to the arguments at grad_position (an
    index: one tensor; a tuple of indices: a tuple of tensors), as a function of fn's
    arguments. The output's gradient is ones_like(output) (a scalar output: d output / d x).
    MindSpore's weights: the Parameters (net.trainable_params()) to differentiate too; the
    result is then (the arguments' gradients, a tuple of the weights' gradients), or only the
    weights' tuple when grad_position is None. A weight fn does not read gets zeros."""
    cache = {}
    weights = _weights(weights)

    def grad_fn(*args):
        if not args:
            raise ValueError("grad: expected the function's arguments, got none")
        return _select(_compiled(fn, cache, args, False, weights), grad_position, weights)

    grad_fn.__name__ = f"grad_{getattr(fn, '__name__', 'fn')}"
    return grad_fn


def value_and_grad(fn, grad_position=0, weights=None):
    """As grad, returning (fn's output, the gradients)."""
    cache = {}
    weights = _weights(weights)

    def value_and_grad_fn(*args):
        if not args:
            raise ValueError("value_and_grad: expected the function's arguments, got none")
        value, grads = _compiled(fn, cache, args, True, weights)
        return value, _select(grads, grad_position, weights)

    value_and_grad_fn.__name__ = f"value_and_grad_{getattr(fn, '__name__', 'fn')}"
    return value_and_grad_fn
