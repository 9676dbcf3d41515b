"""Loss scaling, as MindSpore's mindspore.amp managers:

    manager = loom.amp.DynamicLossScaleManager(init_loss_scale=2**16, scale_window=1000)
    model = loom.Model(net, loss_fn, optimizer, loss_scale_manager=manager)
    model.train(1, dataset)
    model.loss_scale, model.skipped_steps

The scaling runs inside the compiled step (loom's nn/train.h, LossScale): the backward pass
starts from the scale, the gradients are divided by it, and a step whose gradients hold an Inf or
NaN leaves the weights and optimizer states as they were (DynamicLossScaleManager always;
FixedLossScaleManager unless drop_overflow_update=False). The dynamic rule is MindSpore's
DynamicLossScaleUpdateCell's.
"""
from loom import _loom


class LossScaleManager:
    """The base of the two managers (MindSpore's LossScaleManager)."""

    def __init__(self, native):
        self._native = native

    def get_loss_scale(self):
        """The initial (fixed: the) loss scale."""
        return self._native.scale

    def get_drop_overflow_update(self):
        """Whether a step with an Inf or NaN gradient skips its update."""
        return self._native.drop_overflow_update

    def __repr__(self):
        return f"{type(self).__name__}({self._native!r})"


class FixedLossScaleManager(LossScaleManager):
    """MindSpore's FixedLossScaleManager(loss_scale=128.0, drop_overflow_update=True)."""

    def __init__(self, loss_scale=128.0, drop_overflow_update=True):
        super().__init__(_loom.LossScale.fixed(float(loss_scale), bool(drop_overflow_update)))


class DynamicLossScaleManager(LossScaleManager):
    """MindSpore's DynamicLossScaleManager(init_loss_scale=2**24, scale_factor=2,
    scale_window=2000): halves the scale on overflow (not below 1) and multiplies it by
    scale_factor after scale_window steps without one."""

    def __init__(self, init_loss_scale=2**24, scale_factor=2, scale_window=2000):
        super().__init__(_loom.LossScale.dynamic(float(init_loss_scale), float(scale_factor),
                                                 int(scale_window)))


__all__ = ["LossScaleManager", "FixedLossScaleManager", "DynamicLossScaleManager"]
