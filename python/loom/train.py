"""Training: Model, callbacks and the run context, as MindSpore's mindspore.train.

    model = loom.Model(net, loss_fn, optimizer, metrics={"accuracy"})
    model.train(1, train_dataset, callbacks=[loom.LossMonitor(100), MyCallback()])
    model.eval(test_dataset)   # {"accuracy": ...}

A callback is any object with some of MindSpore's methods (on_train_begin, on_train_epoch_begin,
on_train_step_begin, on_train_step_end, on_train_epoch_end, on_train_end), each called with the
run context (cur_epoch_num, cur_step_num, net_outputs, request_stop(); original_args() returns
it, as MindSpore's cb_params). Steps run without the GIL; Ctrl-C stops after the current step
and raises KeyboardInterrupt.
"""
from loom import _loom, communication
from loom._loom import (  # noqa: F401
    CheckpointConfig,
    LossMonitor,
    ModelCheckpoint,
    Profiler,
    RunContext,
    SummaryCollector,
    TimeMonitor,
)


class Model(_loom.Model):
    """MindSpore's Model: Model(network, loss_fn, optimizer, metrics={"accuracy"},
    amp_level="O0", loss_scale_manager=None, amp_dtype="float16"), then train(epoch,
    train_dataset, callbacks=...), eval(valid_dataset), predict(x). amp_level: MindSpore's mixed
    precision levels O0, O1, O2, O3, auto (training and evaluation; amp_dtype "float16" or
    "bfloat16"; float32_fallbacks lists the ops the CPU ran on Float32 kernels).
    loss_scale_manager: loom.amp's Fixed- or DynamicLossScaleManager (the step's loss scaling;
    loss_scale and skipped_steps read it); at O2 a DynamicLossScaleManager() unless given, as
    MindSpore's."""

    def __init__(self, network, loss_fn, optimizer, metrics=None, amp_level="O0",
                 loss_scale_manager=None, amp_dtype="float16"):
        _loom.Model.__init__(self, network, loss_fn, optimizer, metrics)
        import loom  # noqa: PLC0415
        from loom import amp  # noqa: PLC0415
        if loom._context["save_graphs"]:
            self._set_save_graphs_dir(loom._context["save_graphs_path"])
        if amp_level != "O0":
            self._set_amp(amp_level, amp_dtype)
            if amp_level == "O2" and loss_scale_manager is None:
                loss_scale_manager = amp.DynamicLossScaleManager()
        if loss_scale_manager is not None:
            if not isinstance(loss_scale_manager, amp.LossScaleManager):
                raise TypeError("Model: loss_scale_manager must be a loom.amp.FixedLossScaleManager "
                                f"or DynamicLossScaleManager, got {type(loss_scale_manager).__name__}")
            self._set_loss_scale(loss_scale_manager._native)

    def train(self, epoch, train_dataset, callbacks=None, dataset_sink_mode=False):
        """Trains for epoch epochs (MindSpore's total); callbacks: one or a list. In the
        data_parallel mode (loom.set_auto_parallel_context) the gradients are all-reduced over the
        ranks (set up once, before the first step)."""
        import os  # noqa: PLC0415
        communication._setup_data_parallel(self)
        config = os.environ.get("MINDSPORE_DUMP_CONFIG") or os.environ.get("LOOM_DUMP_CONFIG")
        if config:
            if callbacks is None:
                callbacks = []
            elif not isinstance(callbacks, (list, tuple)):
                callbacks = [callbacks]
            callbacks = list(callbacks) + [_loom.Dumper(config_file=config)]
        _loom.Model.train(self, epoch, train_dataset, callbacks, dataset_sink_mode)


class Callback:
    """The base of Python callbacks (its methods do nothing; override the ones you need)."""

    def on_train_begin(self, run_context):
        pass

    def on_train_epoch_begin(self, run_context):
        pass

    def on_train_step_begin(self, run_context):
        pass

    def on_train_step_end(self, run_context):
        pass

    def on_train_epoch_end(self, run_context):
        pass

    def on_train_end(self, run_context):
        pass


__all__ = ["Model", "Callback", "LossMonitor", "TimeMonitor", "RunContext", "ModelCheckpoint",
           "CheckpointConfig", "SummaryCollector", "Profiler"]
