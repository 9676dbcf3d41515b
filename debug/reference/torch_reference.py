#!/usr/bin/env python3
"""A PyTorch reference run of one loom training step, written as a dump in loom's layout.

Runs LeNet-5 or ResNet-18 (small-image layout) in PyTorch on the weights of a loom/MindSpore
checkpoint (--ckpt) or of a loom dump's Parameter files (--weights-from-dump), on the batch of a
loom dump (--loom-dump: its Parameter.data / Parameter.label files), computes the forward pass,
the loss (softmax cross-entropy, mean over the batch) and the backward pass, and writes every
module call's inputs, outputs and gradients as a dump that `loom compare` reads:

  {out}/rank_{r}/{net}/{graph}/{iteration}/{op_type}.{op_name}.0.0.{timestamp}.{io}.{slot}.DefaultFormat.npy
  {out}/rank_{r}/execution_order/ms_execution_order_graph_{graph}.csv   (one row per call and role)
  {out}/rank_{r}/.dump_metadata/reference_run.json   (provenance and the calls' data flow)

Names (PyTorch's own; debug/reference/README.md):
  op_type   the module's class name: Conv2d, BatchNorm2d, ReLU, MaxPool2d, Flatten, Linear,
            ReduceMean, CrossEntropyLoss, ResidualBlockBase
  op_name   {module path}.{call}.{forward|backward}: "conv1.0.forward", "relu.2.forward",
            "layer1.0.0.backward" (the module path is everything before the last two fields;
            call counts from 0 within the step; the loss module is "loss_fn")
  forward   input.{k}: the call's tensor arguments, then the module's own parameters in
            registration order, then its own floating-point buffers (Conv2d: x, weight;
            Linear: x, weight, bias; BatchNorm2d: x, weight, bias, running_mean, running_var as
            they were before the call); output.{k}: its outputs (a training BatchNorm2d adds, as
            MindSpore's BatchNorm outputs 1-4, the running mean and variance after its update
            and torch.native_batch_norm's saved batch mean and inverse std)
  backward  input.{k}: the gradient w.r.t. forward output k (the total over its consumers);
            output.{k}: the gradient w.r.t. forward input k of this call alone (its parameters'
            slots only for a module called once in the step)
  Parameter.{name}, Gradient.{name}: the weights as run (after --perturb) and their gradients,
            by PyTorch's state_dict names; Parameter.data and Parameter.label: the batch.
Timestamps are microseconds since the epoch, strictly increasing in the order the tensors were
produced (Parameter files first, then the forward, the backward, the Gradient files).

Checkpoints are MindSpore's protobuf .ckpt (docs/formats.md), parsed with python3-protobuf from
the repository's checkpoint/proto/checkpoint.proto: `protoc --descriptor_set_out` compiles the
schema into a FileDescriptorSet at run time and the message class is built from it in a
descriptor pool, so no generated *_pb2.py is imported: generated code is tied to the protoc
that made it (newer runtimes refuse or warn about old gencode), while a descriptor set is plain
data every runtime reads (checked: python3-protobuf 4.21 with protoc 3.21 on Debian 12, protobuf
7.36 with protoc 3.21 beside PyTorch 2.11).

Usage (debug/reference/README.md):
  python3 debug/reference/torch_reference.py --model lenet --ckpt run/lenet-1_1.ckpt \\
      --loom-dump loom_dump --iteration 1 --out torch_dump
  loom compare loom_dump torch_dump --mapping debug/reference/lenet_torch_map.json
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
CHECKPOINT_PROTO = os.path.join(REPO, "checkpoint", "proto", "checkpoint.proto")


class UsageError(Exception):
    """A user-facing error: printed as 'torch_reference: ...' with exit status 2."""


# --------------------------------------------------------------------------------------------
# The networks, in PyTorch, with MindSpore's model-zoo structure and loom's Cell names.


class LeNet5(nn.Module):
    """models/lenet/lenet.{h,cc}: conv1, conv2 (5x5 "valid", no bias), fc1..fc3, one shared
    relu, max_pool2d and flatten, called in loom's construct order."""

    def __init__(self, num_class=10, num_channel=1):
        super().__init__()
        self.conv1 = nn.Conv2d(num_channel, 6, 5, bias=False)
        self.conv2 = nn.Conv2d(6, 16, 5, bias=False)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_class)
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()

    def forward(self, x):
        x = self.max_pool2d(self.relu(self.conv1(x)))
        x = self.max_pool2d(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


def _bn(channels, res_base):
    # models/resnet/resnet.cc bn(): MindSpore momentum 0.1 / eps 1e-5 (res_base) or 0.9 / 1e-4;
    # PyTorch's momentum is 1 - MindSpore's. Moving statistics do not enter a training step's
    # outputs (train mode normalizes with the batch's statistics), only their update does.
    return nn.BatchNorm2d(channels, eps=1e-5, momentum=0.9) if res_base else \
        nn.BatchNorm2d(channels, eps=1e-4, momentum=0.1)


class ReduceMean(nn.Module):
    """resnet.py's ReduceMean(keep_dims=True) over (H, W), a module so that it is dumped."""

    def forward(self, x):
        return torch.mean(x, dim=(2, 3), keepdim=True)


class ResidualBlockBase(nn.Module):
    """models/resnet/resnet.cc ResidualBlockBase: conv1 3x3 (stride, pad 1) -> bn1d -> relu ->
    conv2 -> bn2d, + identity or down_sample_layer (1x1 conv with the stride, BatchNorm) -> relu
    (the block's relu is called twice: relu.0 after bn1d, relu.1 after the addition)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1d = _bn(cout, False)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2d = _bn(cout, False)
        self.relu = nn.ReLU()
        self.down_sample_layer = None
        if stride != 1 or cin != cout:
            self.down_sample_layer = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                                   _bn(cout, True))

    def forward(self, x):
        out = self.relu(self.bn1d(self.conv1(x)))
        out = self.bn2d(self.conv2(out))
        identity = self.down_sample_layer(x) if self.down_sample_layer is not None else x
        return self.relu(out + identity)


class ResNet18Small(nn.Module):
    """models/resnet/resnet.cc ResNet(18, kSmallImage): 3x3 stride-1 stem conv1 -> bn1 -> relu
    (no max-pool), layer1..layer4 of two blocks, ReduceMean over (H, W) -> flatten -> end_point.
    loom's stem relu and ReduceMean are functions in the ResNet's own scope; here they are the
    modules `relu` and `mean` (no parameters, so the state_dict names stay loom's)."""

    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        self.bn1 = _bn(64, True)
        self.relu = nn.ReLU()
        widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
        for s, (cin, cout, stride) in enumerate(widths):
            self.add_module(f"layer{s + 1}", nn.Sequential(ResidualBlockBase(cin, cout, stride),
                                                           ResidualBlockBase(cout, cout, 1)))
        self.mean = ReduceMean()
        self.flatten = nn.Flatten()
        self.end_point = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.end_point(self.flatten(self.mean(x)))


def build_model(model, weights):
    """The network for `model`, its class count and channel count read from the weights."""
    if model == "lenet":
        need = ["conv1.weight", "fc3.bias"]
    else:
        need = ["conv1.weight", "end_point.bias"]
    for n in need:
        if n not in weights:
            raise UsageError(f"the weights have no '{n}': not a {model} checkpoint/dump? "
                                 f"(got {', '.join(sorted(weights)[:8])}...)")
    in_channels = int(weights["conv1.weight"].shape[1])
    classes = int(weights[need[1]].shape[0])
    if model == "lenet":
        return LeNet5(classes, in_channels)
    return ResNet18Small(classes, in_channels)


# MindSpore's BatchNorm parameter names -> PyTorch's.
MS_TO_TORCH_SUFFIX = {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean",
                      "moving_variance": "running_var"}


def torch_to_mindspore_names(net):
    """{PyTorch state_dict name: MindSpore/loom name} for every float parameter and buffer."""
    bn_modules = {name for name, m in net.named_modules() if isinstance(m, nn.BatchNorm2d)}
    out = {}
    for name, t in net.state_dict().items():
        if not t.is_floating_point():
            continue  # num_batches_tracked
        module, _, leaf = name.rpartition(".")
        if module in bn_modules:
            inverse = {v: k for k, v in MS_TO_TORCH_SUFFIX.items()}
            out[name] = f"{module}.{inverse[leaf]}"
        else:
            out[name] = name
    return out


# --------------------------------------------------------------------------------------------
# Reading checkpoints and loom dumps.

_CKPT_DTYPES = {"Float32": np.float32, "Float64": np.float64, "Float16": np.float16,
                "Int32": np.int32, "Int64": np.int64, "UInt8": np.uint8, "Bool": np.bool_,
                "Int8": np.int8, "Int16": np.int16}


def _checkpoint_message_class():
    """checkpoint.proto's Checkpoint message class, built from a descriptor set (see the module
    docstring for why not generated code)."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as e:
        raise UsageError("reading a .ckpt needs python3-protobuf (apt-get install "
                             f"python3-protobuf; pip: protobuf): {e}") from None
    protoc = shutil.which("protoc")
    if protoc is None:
        raise UsageError("reading a .ckpt needs protoc (apt-get install protobuf-compiler) to "
                             f"compile {CHECKPOINT_PROTO}")
    if not os.path.exists(CHECKPOINT_PROTO):
        raise UsageError(f"no checkpoint schema at {CHECKPOINT_PROTO}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "checkpoint.desc")
        r = subprocess.run([protoc, f"--proto_path={os.path.dirname(CHECKPOINT_PROTO)}",
                            f"--descriptor_set_out={out}", os.path.basename(CHECKPOINT_PROTO)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise UsageError(f"protoc failed on {CHECKPOINT_PROTO}: {r.stderr.strip()}")
        with open(out, "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    desc = pool.FindMessageTypeByName(f"{fds.file[0].package}.Checkpoint")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)  # protobuf 3.x, 4.21


def read_checkpoint(path):
    """{tag: numpy array} of a .ckpt's tensors (strings and unsupported types are skipped):
    MindSpore's rules as docs/formats.md "Reading" has them — the CRC trailer stripped, adjacent
    chunks with one tag joined, dims [] and [0] both 0-d, sizes checked."""
    Checkpoint = _checkpoint_message_class()
    with open(path, "rb") as f:
        data = f.read()
    if len(data) >= 17 and data[-17:-10] == b"crc_num":
        data = data[:-17]
    if len(data) >= 4 and int.from_bytes(data[:4], "little") in (0x7F3A5ED8, 0x7F3A5ED9,
                                                                  0x7F3A5EDA):
        raise UsageError(f"{path}: the checkpoint is encrypted; only plain files are read")
    msg = Checkpoint()
    try:
        msg.ParseFromString(data)
    except Exception as e:  # google.protobuf.message.DecodeError
        raise UsageError(f"{path}: not a MindSpore checkpoint ({e})") from None
    chunks = {}  # tag -> (dims, type, [bytes])
    order = []
    last = None
    for v in msg.value:
        if v.WhichOneof("value") != "tensor":
            raise UsageError(f"{path}: entry '{v.tag}' is not a tensor (map tensors are not "
                                 "read)")
        t = v.tensor
        if v.tag == last:
            dims, ttype, parts = chunks[v.tag]
            if list(t.dims) != dims or t.tensor_type != ttype:
                raise UsageError(f"{path}: chunks of '{v.tag}' disagree on dims or type")
            parts.append(t.tensor_content)
            continue
        if v.tag in chunks:
            raise UsageError(f"{path}: the tag '{v.tag}' appears twice")
        chunks[v.tag] = (list(t.dims), t.tensor_type, [t.tensor_content])
        order.append(v.tag)
        last = v.tag
    out = {}
    for tag in order:
        dims, ttype, parts = chunks[tag]
        if ttype not in _CKPT_DTYPES:
            continue  # str entries, BFloat16 (no numpy dtype): not weights of these networks
        shape = () if dims in ([], [0]) else tuple(dims)
        raw = b"".join(parts)
        dt = np.dtype(_CKPT_DTYPES[ttype]).newbyteorder("<")
        n = int(np.prod(shape)) if shape else 1
        if len(raw) != n * dt.itemsize:
            raise UsageError(f"{path}: '{tag}' has {len(raw)} bytes, expected {n} x "
                                 f"{dt.itemsize} for {ttype}{list(shape)}")
        out[tag] = np.frombuffer(raw, dtype=dt).reshape(shape).astype(dt.newbyteorder("="))
    return out


_DUMP_FILE = re.compile(r"^([^.]+)\.(.+)\.(\d+)\.(\d+)\.(\d+)\.(input|output)\.(\d+)\.([^.]+)\.npy$")


def iteration_folder(dump, graph, iteration, rank=None):
    """The {net}/{graph}/{iteration} folder of a dump given as {path} or {path}/rank_{r}."""
    dump = os.path.normpath(dump)
    if re.fullmatch(r"rank_\d+", os.path.basename(dump)):
        rank_dirs = [dump]
    else:
        pattern = f"rank_{rank}" if rank is not None else "rank_*"
        rank_dirs = sorted(d for d in glob.glob(os.path.join(dump, pattern)) if os.path.isdir(d))
    if not rank_dirs:
        raise UsageError(f"{dump}: no rank_* folder (not a dump in MindSpore's layout?)")
    if len(rank_dirs) > 1:
        raise UsageError(f"{dump}: several ranks ({', '.join(map(os.path.basename, rank_dirs))})"
                             "; choose one with --rank")
    found = [d for d in glob.glob(os.path.join(rank_dirs[0], "*", str(graph), str(iteration)))
             if os.path.isdir(d) and os.path.basename(os.path.dirname(os.path.dirname(d))) not in
             ("graphs", "execution_order", ".dump_metadata")]
    if len(found) != 1:
        have = sorted(os.path.relpath(d, rank_dirs[0])
                      for d in glob.glob(os.path.join(rank_dirs[0], "*", "*", "*")))
        raise UsageError(f"{rank_dirs[0]}: expected one {{net}}/{graph}/{iteration} folder, "
                             f"found {len(found)} (it has: {', '.join(have[:10]) or 'none'})")
    return found[0]


def read_dump_parameters(folder):
    """{name: numpy array} of the Parameter.{name} files in an iteration folder."""
    out = {}
    for f in sorted(os.listdir(folder)):
        m = _DUMP_FILE.match(f)
        if m and m.group(1) == "Parameter":
            name = m.group(2)
            if name in out:
                raise UsageError(f"{folder}: Parameter.{name} appears twice")
            out[name] = np.load(os.path.join(folder, f))
    if not out:
        raise UsageError(f"{folder}: no Parameter.* files (a dump of a training step writes "
                             "its weights and batch as Parameter files)")
    return out


# --------------------------------------------------------------------------------------------
# The dump writer and the hooks.


class DumpWriter:
    """Writes tensors in loom's dump layout with strictly increasing timestamps and keeps the
    execution order (one row per module call and role)."""

    def __init__(self, out, rank, net, graph, iteration, save_float32):
        self.rank_dir = os.path.join(out, f"rank_{rank}")
        if os.path.exists(self.rank_dir):
            raise UsageError(f"{self.rank_dir} exists; write the reference into a new folder")
        self.graph = graph
        self.folder = os.path.join(self.rank_dir, net, str(graph), str(iteration))
        os.makedirs(self.folder)
        self.save_float32 = save_float32
        self.last_ts = 0
        self.keys = set()
        self.rows = []  # execution order: (op_type, op_name, scope, role, forward)
        self.row_names = set()

    def write(self, op_type, op_name, io, slot, tensor):
        key = (op_type, op_name, io, slot)
        if key in self.keys:
            raise RuntimeError(f"dumped twice: {op_type}.{op_name} {io} {slot}")
        self.keys.add(key)
        a = tensor.detach().cpu().numpy() if isinstance(tensor, torch.Tensor) else tensor
        if self.save_float32 and a.dtype == np.float64:
            a = a.astype(np.float32)
        a = np.array(a, order="C", copy=True)  # (ascontiguousarray makes 0-d arrays 1-d)
        ts = max(int(time.time() * 1e6), self.last_ts + 1)
        self.last_ts = ts
        name = f"{op_type}.{op_name}.0.0.{ts}.{io}.{slot}.DefaultFormat.npy"
        np.save(os.path.join(self.folder, name), a)

    def row(self, op_type, op_name, scope, role, forward=""):
        if op_name not in self.row_names:
            self.row_names.add(op_name)
            self.rows.append((op_type, op_name, scope, role, forward))

    def finish(self, metadata):
        order_dir = os.path.join(self.rank_dir, "execution_order")
        os.makedirs(order_dir, exist_ok=True)
        with open(os.path.join(order_dir, f"ms_execution_order_graph_{self.graph}.csv"), "w") as f:
            f.write("index,op_type,op_name,full_name,scope,file,line,role,forward,depth,graph\n")
            for i, (op_type, op_name, scope, role, forward) in enumerate(self.rows):
                full = f"{scope}/{op_name}" if scope else op_name
                f.write(f"{i},{op_type},{op_name},{full},{scope},,0,{role},{forward},0,"
                        "torch_reference\n")
        meta_dir = os.path.join(self.rank_dir, ".dump_metadata")
        os.makedirs(meta_dir, exist_ok=True)
        with open(os.path.join(meta_dir, "reference_run.json"), "w") as f:
            json.dump(metadata, f, indent=1)
            f.write("\n")


class Recorder:
    """Forward pre-/post-hooks on the modules, tensor hooks for the gradients.

    Each call's tensor arguments are replaced by views (x.view_as(x)) made in the pre-hook, so a
    hook on the view sees the gradient w.r.t. this call's argument alone, even when the tensor
    feeds several calls (a residual block's input). A registry of the tensors seen (kept alive so
    that ids stay unique) records, for each call's arguments, which forward output produced them
    and which key holds their total gradient; reference_run.json keeps that data flow for
    make_mapping.py."""

    def __init__(self, writer, inputs_too):
        self.w = writer
        self.inputs_too = inputs_too
        self.counts = {}
        self.stack = []
        self.handles = []
        self.registry = {}  # id(tensor) -> (tensor, forward key, total-gradient key)
        self.calls = []     # data flow, in forward order
        self.call_by_name = {}

    def install(self, modules):
        for path, m in modules:
            self.handles.append(m.register_forward_pre_hook(self._pre(path)))
            self.handles.append(m.register_forward_hook(self._post(path)))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def _grad_hook(self, op_type, op_name, io, slot, scope, forward_name):
        def hook(g):
            self.w.row(op_type, op_name, scope, "backward", forward_name)
            self.w.write(op_type, op_name, io, slot, g)
        return hook

    def _pre(self, path):
        def hook(module, inputs):
            n = self.counts.get(path, 0)
            self.counts[path] = n + 1
            op_type = type(module).__name__
            name = f"{path}.{n}"
            scope = path.replace(".", "/")
            self.stack.append(name)
            self.w.row(op_type, f"{name}.forward", scope, "forward")
            call = {"module": path, "call": n, "op_type": op_type, "op_name": f"{name}.forward",
                    "inputs": [], "outputs": []}
            new_inputs = list(inputs)
            for k, x in enumerate(inputs):
                if not isinstance(x, torch.Tensor):
                    call["inputs"].append(None)
                    continue
                entry = self.registry.get(id(x))
                call["inputs"].append({
                    "slot": k, "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""),
                    "from": entry[1] if entry else None,
                    "grad_of_source": entry[2] if entry else None})
                if self.inputs_too:
                    self.w.write(op_type, f"{name}.forward", "input", k, x)
                if x.requires_grad:
                    v = x.view_as(x)
                    v.register_hook(self._grad_hook(op_type, f"{name}.backward", "output", k,
                                                    scope, f"{name}.forward"))
                    self.registry[id(v)] = (v, entry[1] if entry else None,
                                            f"{name}.backward.output.{k}")
                    new_inputs[k] = v
            extra = [t for _, t in module.named_parameters(recurse=False)] + \
                [t for _, t in module.named_buffers(recurse=False) if t.is_floating_point()]
            for j, t in enumerate(extra):
                slot = len(inputs) + j
                call["inputs"].append({"slot": slot, "shape": list(t.shape),
                                       "dtype": str(t.dtype).replace("torch.", ""),
                                       "parameter": self._tensor_name(module, t)})
                if self.inputs_too:
                    self.w.write(op_type, f"{name}.forward", "input", slot, t)
            call["n_args"] = len(inputs)
            self.calls.append(call)
            self.call_by_name[name] = (call, module)
            return tuple(new_inputs)
        return hook

    @staticmethod
    def _tensor_name(module, t):
        for n, p in list(module.named_parameters(recurse=False)) + \
                list(module.named_buffers(recurse=False)):
            if p is t:
                return n
        return None

    def _post(self, path):
        def hook(module, inputs, output):
            name = self.stack.pop()
            call, _ = self.call_by_name[name]
            op_type = type(module).__name__
            scope = path.replace(".", "/")
            outs = output if isinstance(output, (tuple, list)) else (output,)
            if isinstance(module, nn.BatchNorm2d) and module.training:
                outs = tuple(outs) + self._batch_norm_statistics(module, inputs[0])
            for k, y in enumerate(outs):
                if not isinstance(y, torch.Tensor):
                    continue
                call["outputs"].append({"slot": k, "shape": list(y.shape)})
                self.w.write(op_type, f"{name}.forward", "output", k, y)
                if id(y) not in self.registry:  # the innermost producer names it
                    self.registry[id(y)] = (y, f"{name}.forward.output.{k}",
                                            f"{name}.backward.input.{k}")
                    if y.requires_grad:
                        y.register_hook(self._grad_hook(op_type, f"{name}.backward", "input", k,
                                                        scope, f"{name}.forward"))
        return hook

    @staticmethod
    def _batch_norm_statistics(module, x):
        """A training BatchNorm2d's other results, in the order of MindSpore's BatchNorm outputs
        1-4: the moving mean and variance after this call's update (PyTorch's running_mean /
        running_var: momentum and the unbiased variance as PyTorch applies them), and the batch
        mean and inverse standard deviation saved for the gradient (torch.native_batch_norm's
        save_mean / save_invstd, on copies of the running statistics)."""
        with torch.no_grad():
            _, save_mean, save_invstd = torch.native_batch_norm(
                x.detach(), module.weight.detach(), module.bias.detach(),
                module.running_mean.clone(), module.running_var.clone(), True, module.momentum,
                module.eps)
        return (module.running_mean.detach().clone(), module.running_var.detach().clone(),
                save_mean, save_invstd)

    def parameter_gradient_hooks(self):
        """After the forward pass: gradients of the parameters of modules called once, as their
        call's backward outputs (slots after the tensor arguments)."""
        for name, (call, module) in self.call_by_name.items():
            path = call["module"]
            if self.counts[path] != 1:
                continue
            op_type = call["op_type"]
            for j, (_, p) in enumerate(module.named_parameters(recurse=False)):
                if p.requires_grad:
                    self.handles.append(p.register_hook(self._grad_hook(
                        op_type, f"{name}.backward", "output", call["n_args"] + j,
                        path.replace(".", "/"), f"{name}.forward")))


class ReluMasks:
    """--relu-masks: every ReLU call passes exactly the elements that loom's passed (loom's output
    of that call > 0, read from the loom dump through the mapping file, PyTorch key -> loom key),
    instead of the elements whose input here is > 0. An input within float32 rounding of zero
    can be positive on one side and negative on the other; the gradients behind that ReLU then
    differ by far more than rounding. Following loom's pattern keeps the comparison about the
    arithmetic; `flips` counts the elements whose sign here disagreed with loom's."""

    def __init__(self, mapping_file, folder):
        with open(mapping_file) as f:
            self.mapping = json.load(f)
        self.files = {}
        for name in os.listdir(folder):
            m = _DUMP_FILE.match(name)
            if m:
                self.files[f"{m.group(2)}.{m.group(6)}.{m.group(7)}"] = os.path.join(folder, name)
        self.counts = {}
        self.calls = 0
        self.flips = 0
        self.handles = []

    def install(self, net):
        for path, m in hooked_modules(net):
            if isinstance(m, nn.ReLU):
                self.handles.append(m.register_forward_hook(self._hook(path)))

    def remove(self):
        for h in self.handles:
            h.remove()

    def _hook(self, path):
        def hook(module, inputs, output):
            n = self.counts.get(path, 0)
            self.counts[path] = n + 1
            key = f"{path}.{n}.forward.output.0"
            loom_key = self.mapping.get(key)
            if loom_key is None or loom_key not in self.files:
                raise UsageError(f"--relu-masks: no loom tensor for {key} (mapping: "
                                     f"{loom_key or 'none'})")
            passed = torch.from_numpy(np.load(self.files[loom_key]) > 0)
            x = inputs[0]
            if tuple(passed.shape) != tuple(x.shape):
                raise UsageError(f"--relu-masks: {loom_key} has shape {list(passed.shape)}, "
                                     f"{key} {list(x.shape)}")
            self.calls += 1
            self.flips += int(((x > 0) != passed).sum())
            return x * passed.to(x.dtype)
        return hook


def hooked_modules(net):
    """The modules dumped: every named module except the root and the Sequential containers."""
    return [(name, m) for name, m in net.named_modules()
            if name and not isinstance(m, nn.Sequential)]


# --------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Run one training step of a loom network in PyTorch on loom's weights and "
                    "batch, and write its tensors as a dump in loom's layout (for loom compare).")
    p.add_argument("--model", required=True, choices=["lenet", "resnet18"])
    w = p.add_mutually_exclusive_group(required=True)
    w.add_argument("--ckpt", help="weights from a loom/MindSpore .ckpt")
    w.add_argument("--weights-from-dump", metavar="DIR",
                   help="weights from the Parameter files of a loom dump (its --graph and "
                        "--iteration)")
    p.add_argument("--loom-dump", required=True, metavar="DIR",
                   help="the loom dump whose Parameter.data / Parameter.label are the batch")
    p.add_argument("--graph", type=int, default=0, help="graph id in the loom dump (default 0)")
    p.add_argument("--iteration", type=int, default=0,
                   help="iteration in the loom dump (default 0, the first training step)")
    p.add_argument("--rank", type=int, default=None, help="rank folder of the loom dump")
    p.add_argument("--data-name", default="data", help="the batch's Parameter name (data)")
    p.add_argument("--label-name", default="label", help="the labels' Parameter name (label)")
    p.add_argument("--out", required=True, help="the reference dump's folder (new)")
    p.add_argument("--net-name", default=None, help="{net} folder name (default: the model)")
    p.add_argument("--float64", action="store_true",
                   help="compute in float64 (weights and batch widened from float32)")
    p.add_argument("--save-float32", action="store_true",
                   help="with --float64: save the tensors rounded to float32")
    p.add_argument("--outputs-only", action="store_true",
                   help="do not dump the forward inputs (outputs and gradients only)")
    p.add_argument("--perturb", metavar="NAME[:SCALE]",
                   help="multiply one weight (loom or PyTorch name) by 1+SCALE (default 1e-2)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    p.add_argument("--relu-masks", metavar="MAPPING",
                   help="every ReLU passes the elements loom's passed (its output in --loom-dump, "
                        "found through this mapping file), not those positive here")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)  # nothing is random in a step; set for safety
    dtype = torch.float64 if args.float64 else torch.float32

    batch_dir = iteration_folder(args.loom_dump, args.graph, args.iteration, args.rank)
    batch = read_dump_parameters(batch_dir)
    for n in (args.data_name, args.label_name):
        if n not in batch:
            raise UsageError(f"{batch_dir}: no Parameter.{n} file (the batch); it has "
                                 f"{', '.join(sorted(batch))}")
    data_np, label_np = batch[args.data_name], batch[args.label_name]

    if args.ckpt:
        weights = read_checkpoint(args.ckpt)
        source = {"ckpt": os.path.abspath(args.ckpt)}
    else:
        wdir = iteration_folder(args.weights_from_dump, args.graph, args.iteration, args.rank)
        weights = read_dump_parameters(wdir)
        source = {"dump": os.path.abspath(wdir)}

    net = build_model(args.model, weights)
    names = torch_to_mindspore_names(net)
    state = {}
    missing = []
    for tname, ms in names.items():
        if ms not in weights:
            missing.append(ms)
            continue
        ref = net.state_dict()[tname]
        a = weights[ms]
        if tuple(a.shape) != tuple(ref.shape):
            raise UsageError(f"'{ms}': shape {list(a.shape)} in the weights, the {args.model} "
                                 f"network needs {list(ref.shape)}")
        if a.dtype != np.float32:
            raise UsageError(f"'{ms}': dtype {a.dtype} in the weights, expected float32")
        state[tname] = torch.from_numpy(a.copy())
    if missing:
        raise UsageError(f"the weights lack {len(missing)} of the {args.model} network's "
                             f"tensors: {', '.join(missing[:6])}")
    net.load_state_dict(state, strict=False)

    perturbed = None
    if args.perturb:
        pname, _, scale = args.perturb.partition(":")
        try:
            scale = float(scale) if scale else 1e-2
        except ValueError:
            raise UsageError(f"--perturb {args.perturb}: expected NAME[:SCALE], SCALE a "
                                 "number") from None
        inverse = {v: k for k, v in names.items()}
        tname = pname if pname in names else inverse.get(pname)
        if tname is None:
            raise UsageError(f"--perturb: no weight '{pname}' in {args.model} (loom names: "
                                 f"{', '.join(names.values())})")
        with torch.no_grad():
            net.state_dict()[tname].mul_(1.0 + scale)
        perturbed = {"name": names[tname], "torch_name": tname, "scale": scale}

    net = net.to(dtype)
    net.train()
    loss_fn = nn.CrossEntropyLoss()  # loom's WithLossCell._loss_fn: softmax cross-entropy, mean
    x = torch.from_numpy(np.ascontiguousarray(data_np)).to(dtype)
    if not np.issubdtype(label_np.dtype, np.integer):
        raise UsageError(f"Parameter.{args.label_name}: expected integer labels, got "
                             f"{label_np.dtype}")
    label = torch.from_numpy(label_np.astype(np.int64))
    expected_in = tuple(net.conv1.weight.shape[1:2])
    if x.dim() != 4 or tuple(x.shape[1:2]) != expected_in or x.shape[0] != label.shape[0]:
        raise UsageError(f"batch: data {list(x.shape)} and labels {list(label.shape)} do "
                             f"not fit {args.model} with {expected_in[0]} input channel(s)")

    writer = DumpWriter(args.out, args.rank or 0, args.net_name or args.model, args.graph,
                        args.iteration, args.save_float32)
    # The parameters as run (after --perturb) and the batch, as loom writes them before a step.
    for tname, ms in names.items():
        writer.write("Parameter", tname, "output", 0, net.state_dict()[tname])
    writer.write("Parameter", args.data_name, "output", 0, data_np)
    writer.write("Parameter", args.label_name, "output", 0, label_np)

    masks = None
    if args.relu_masks:  # installed first: the recorder then sees the masked outputs
        masks = ReluMasks(args.relu_masks, batch_dir)
        masks.install(net)
    rec = Recorder(writer, inputs_too=not args.outputs_only)
    rec.install(hooked_modules(net) + [("loss_fn", loss_fn)])
    logits = net(x)
    loss = loss_fn(logits, label)
    rec.parameter_gradient_hooks()
    loss.backward()
    rec.remove()
    if masks:
        masks.remove()

    for tname, p in net.named_parameters():
        if p.grad is None:
            raise RuntimeError(f"no gradient for {tname}")
        writer.write("Gradient", tname, "output", 0, p.grad)

    metadata = {
        "tool": "debug/reference/torch_reference.py",
        "model": args.model,
        "torch": torch.__version__,
        "dtype": "float64" if args.float64 else "float32",
        "saved_dtype": "float64" if args.float64 and not args.save_float32 else "float32",
        "weights": source,
        "batch": os.path.abspath(batch_dir),
        "graph": args.graph,
        "iteration": args.iteration,
        "perturb": perturbed,
        "relu_masks": {"calls": masks.calls, "sign_flips": masks.flips} if masks else None,
        "loss": float(loss.item()),
        "names": {"torch_to_loom": names},
        "calls": rec.calls,
    }
    writer.finish(metadata)
    print(f"torch_reference: {args.model}, {'float64' if args.float64 else 'float32'}, loss "
          f"{loss.item():.6f}, {len(writer.keys)} tensors in {writer.folder}"
          + (f" ({perturbed['name']} x (1+{perturbed['scale']:g}))" if perturbed else "")
          + (f"; loom's ReLU patterns in {masks.calls} calls, {masks.flips} element(s) of "
             "another sign here" if masks else ""))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (UsageError, OSError) as e:
        print(f"torch_reference: {e}", file=sys.stderr)
        sys.exit(2)
