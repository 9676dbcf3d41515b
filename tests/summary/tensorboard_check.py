"""Reads the event file loom_summary_tb_writer wrote with TensorBoard's own reader
(EventAccumulator, which checks both record CRCs) and checks every kind of summary."""
import math
import sys

from tensorboard.backend.event_processing import event_accumulator as ea_mod
from tensorboard.plugins.hparams import api_pb2
from tensorboard.plugins.hparams import metadata as hp_metadata
from tensorboard.plugins.hparams import plugin_data_pb2

run_dir = sys.argv[1]
acc = ea_mod.EventAccumulator(
    run_dir,
    size_guidance={ea_mod.SCALARS: 0, ea_mod.HISTOGRAMS: 0, ea_mod.IMAGES: 0,
                   ea_mod.TENSORS: 0, ea_mod.GRAPH: 0},
)
acc.Reload()
tags = acc.Tags()
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


# Scalars: steps and values.
loss = acc.Scalars("loss")
check([e.step for e in loss] == [0, 1, 2, 3, 4], "loss steps %s" % [e.step for e in loss])
for e in loss:
    check(abs(e.value - 1.0 / (e.step + 1)) < 1e-6, "loss value at step %d: %r" % (e.step, e.value))
acc_metric = acc.Scalars("accuracy")
check([(e.step, e.value) for e in acc_metric] == [(4, 0.875)], "accuracy %s" % acc_metric)

# Histogram: the 12 values -0.55 .. 0.55.
hists = acc.Histograms("weights")
check(len(hists) == 1 and hists[0].step == 2, "histogram events %s" % hists)
h = hists[0].histogram_value
check(h.num == 12, "histogram num %r" % h.num)
check(abs(h.min + 0.55) < 1e-12 and abs(h.max - 0.55) < 1e-12, "histogram min/max %r %r" % (h.min, h.max))
check(abs(h.sum) < 1e-9, "histogram sum %r" % h.sum)
check(sum(h.bucket) == 12, "histogram bucket total %r" % sum(h.bucket))
check(h.bucket_limit[-1] > 0.55 and len(h.bucket) == len(h.bucket_limit), "histogram limits")
# TensorBoard's own conversion to the histograms plugin's (left, right, count) buckets.
comp = acc.CompressedHistograms("weights")
check(len(comp) == 1, "compressed histograms")

# Image: 4 high, 5 wide, RGB PNG.
imgs = acc.Images("img")
check(len(imgs) == 1 and imgs[0].step == 1, "image events")
im = imgs[0]
check((im.width, im.height) == (5, 4), "image size %dx%d" % (im.width, im.height))
check(im.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n", "PNG signature")
try:
    import io
    from PIL import Image  # tensorboard does not need it; check when present
    pil = Image.open(io.BytesIO(im.encoded_image_string))
    pil.load()
    check(pil.size == (5, 4) and pil.mode == "RGB", "PIL decode %s %s" % (pil.size, pil.mode))
    check(pil.getpixel((0, 0)) == (0, 80, 160), "pixel (0,0) %s" % (pil.getpixel((0, 0)),))
except ImportError:
    print("note: PIL not installed, pixel check skipped")

# Text.
texts = acc.Tensors("note")
check(len(texts) == 1 and texts[0].tensor_proto.string_val[0] == b"hello from loom", "text")
check("note" in acc.PluginTagToContent("text"), "text plugin tag")

# Graph with the Cell scopes as name scopes.
g = acc.Graph()
nodes = {n.name: n for n in g.node}
check(set(nodes) == {"x", "fc.weight", "Net/fc/MatMul_0", "Net/act/ReLU_0"}, "graph nodes %s" % sorted(nodes))
check(nodes["Net/fc/MatMul_0"].op == "MatMul" and list(nodes["Net/fc/MatMul_0"].input) == ["x", "fc.weight"], "MatMul node")
check(list(nodes["Net/act/ReLU_0"].input) == ["Net/fc/MatMul_0"], "ReLU input")

# HParams: experiment, session start (values), session end (success), as the plugin parses them.
content = acc.PluginTagToContent(hp_metadata.PLUGIN_NAME)
check(set(content) == {hp_metadata.EXPERIMENT_TAG, hp_metadata.SESSION_START_INFO_TAG,
                       hp_metadata.SESSION_END_INFO_TAG}, "hparams tags %s" % sorted(content))
exp = hp_metadata.parse_experiment_plugin_data(content[hp_metadata.EXPERIMENT_TAG])
check(sorted(i.name for i in exp.hparam_infos) == ["amp", "batch_size", "lr", "model", "optimizer", "seed"], "experiment hparams")
check(sorted(m.name.tag for m in exp.metric_infos) == ["accuracy", "loss"], "experiment metrics")
types = {i.name: i.type for i in exp.hparam_infos}
check(types["lr"] == api_pb2.DATA_TYPE_FLOAT64 and types["model"] == api_pb2.DATA_TYPE_STRING and types["amp"] == api_pb2.DATA_TYPE_BOOL, "hparam types")
start = hp_metadata.parse_session_start_info_plugin_data(content[hp_metadata.SESSION_START_INFO_TAG])
hp = start.hparams
check(math.isclose(hp["lr"].number_value, 0.01) and hp["optimizer"].string_value == "Momentum"
      and hp["batch_size"].number_value == 32 and hp["model"].string_value == "LeNet5"
      and hp["seed"].number_value == 1 and hp["amp"].bool_value is False, "session hparams %s" % hp)
end = hp_metadata.parse_session_end_info_plugin_data(content[hp_metadata.SESSION_END_INFO_TAG])
check(end.status == api_pb2.STATUS_SUCCESS, "session status %s" % end.status)

print("tags:", {k: v for k, v in tags.items() if v})
if failures:
    print("FAILED: %d checks" % len(failures))
    sys.exit(1)
print("OK: TensorBoard read every summary kind")
