"""Checkpoint interoperability between loom and MindSpore itself.

Usage (inside a virtual environment with mindspore and numpy<2):
    python mindspore_check.py TOOL

TOOL is loom's ckpt_interop_tool (tests/checkpoint/interop/ckpt_interop_tool.cc). Checks:
  1. MindSpore -> loom: a MindSpore LeNet5 saved by mindspore.save_checkpoint is read by loom
     (every tensor's dtype, shape and CRC-32 of its bytes as loom holds it), resaved by loom and read
     back by mindspore.load_checkpoint: identical names, order, dtypes, shapes and values. loom's
     LeNet5 loaded from it (strictly) gives MindSpore's logits on 100 inputs (1e-5).
  2. loom -> MindSpore: a loom LeNet5 checkpoint loads with mindspore.load_checkpoint +
     load_param_into_net(strict_load=True) into MindSpore's LeNet5 with no parameter left unloaded
     and gives loom's logits on the same inputs (1e-5).
  3. A checkpoint written by loom's training (ModelCheckpoint: optimizer moments, learning_rate,
     global_step, epoch_num, step_num, loom.*) loads in mindspore.load_checkpoint: the extras come
     back as extra entries with MindSpore's dtypes and shapes, and load_param_into_net leaves
     exactly them unloaded.
  4. A MindSpore checkpoint with the CRC trailer (crc_check=True), 0-d scalars, a bool, strings
     (one empty) and a tensor of every other dtype loom has (append_dict) loads in loom with its CRC checked: scalars 0-d; a corrupted copy is
     refused. loom's resave (with and without loom's own CRC trailer) loads back in MindSpore
     (crc_check=True) identically; a corrupted loom CRC file is refused by MindSpore.
Prints one line per check and "OK" at the end; exits 1 on the first failure.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import mindspore as ms
from mindspore import nn, ops

TOOL = sys.argv[1]
N = 100
TOL = 1e-5


class LeNet5(nn.Cell):
    """MindSpore model zoo: models/official/cv/lenet/src/lenet.py."""

    def __init__(self, num_class=10, num_channel=1):
        super().__init__()
        self.conv1 = nn.Conv2d(num_channel, 6, 5, pad_mode='valid')
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode='valid')
        self.fc1 = nn.Dense(16 * 5 * 5, 120)
        self.fc2 = nn.Dense(120, 84)
        self.fc3 = nn.Dense(84, num_class)
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()

    def construct(self, x):
        x = self.max_pool2d(self.relu(self.conv1(x)))
        x = self.max_pool2d(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


def fail(msg):
    print("FAILED: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def tool(*args, ok=True):
    r = subprocess.run([TOOL, *args], capture_output=True, text=True)
    if ok and r.returncode != 0:
        fail(f"ckpt_interop_tool {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r


def loom_dump(path, crc_check=False):
    """loom's view of a checkpoint: [(kind, name, dtype, shape, crc or utf8)] in file order."""
    out = tool("dump", path, *(["--crc-check"] if crc_check else [])).stdout
    rows = []
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "tensor":
            shape = tuple(int(d) for d in f[3].split(",")) if f[3] else ()
            rows.append(("tensor", f[1], f[2], shape, int(f[4], 16)))
        else:
            rows.append(("str", f[1], None, None, bytes.fromhex(f[2]).decode("utf-8")))
    return rows


def ms_view(param_dict):
    """The same view of mindspore.load_checkpoint's result."""
    rows = []
    for name, v in param_dict.items():
        if isinstance(v, str):
            rows.append(("str", name, None, None, v))
        else:
            a = v.asnumpy()
            rows.append(("tensor", name, str(v.dtype), tuple(a.shape),
                         zlib.crc32(np.ascontiguousarray(a).tobytes())))
    return rows


def kinds_apart(rows):
    """Tensors in file order, then strings in file order: loom's Checkpoint keeps the two kinds in
    separate lists, so a file with strings between tensors is resaved with the strings last."""
    return [r for r in rows if r[0] == "tensor"] + [r for r in rows if r[0] == "str"]


def same_view(a, b, what):
    a, b = kinds_apart(a), kinds_apart(b)
    check([r[1] for r in a] == [r[1] for r in b],
          f"{what}: names differ:\n  {[r[1] for r in a]}\n  {[r[1] for r in b]}")
    for x, y in zip(a, b):
        check(x == y, f"{what}: entry '{x[1]}' differs: {x[2:]} vs {y[2:]}")


def same_arrays(pa, pb, what):
    """Two load_checkpoint results: same names in order (strings apart, see kinds_apart), dtypes,
    shapes, values bit for bit."""
    order = lambda p: [n for n in p if not isinstance(p[n], str)] + [n for n in p if isinstance(p[n], str)]
    check(order(pa) == order(pb), f"{what}: names differ: {list(pa)} vs {list(pb)}")
    for name in pa:
        a, b = pa[name], pb[name]
        if isinstance(a, str) or isinstance(b, str):
            check(a == b, f"{what}: string '{name}': {a!r} vs {b!r}")
            continue
        check(a.dtype == b.dtype, f"{what}: '{name}' dtype {a.dtype} vs {b.dtype}")
        x, y = a.asnumpy(), b.asnumpy()
        check(x.shape == y.shape, f"{what}: '{name}' shape {x.shape} vs {y.shape}")
        check(x.tobytes() == y.tobytes(), f"{what}: '{name}' values differ")


def loom_forward(ckpt, x_path, tmp):
    out = os.path.join(tmp, "logits.bin")
    tool("forward", ckpt, x_path, out, str(N))
    return np.fromfile(out, dtype=np.float32).reshape(N, 10)


def corrupt_copy(src, dst, offset=40):
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o600)
    with open(dst, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def optimizer_states_both_ways(tmp):
    """Optimizer states under MindSpore's names, both ways: MindSpore trains LeNet-5 two steps
    with each optimizer and saves; loom loads every parameter and optimizer entry of that file,
    trains two more steps and saves; its losses and every entry equal MindSpore's own two more
    steps; and MindSpore's load_param_into_net takes loom's file whole (every parameter of the
    MindSpore optimizer found) and continues as it would have."""
    rng = np.random.default_rng(1)
    b = 8
    bx = rng.standard_normal((b, 1, 32, 32)).astype(np.float32)
    by = (np.arange(b) * 3 % 10).astype(np.int32)
    bx_path, by_path = os.path.join(tmp, "bx.bin"), os.path.join(tmp, "by.bin")
    bx.tofile(bx_path)
    by.tofile(by_path)
    xb, yb = ms.Tensor(bx), ms.Tensor(by)
    makers = {
        "momentum": lambda p: nn.Momentum(p, learning_rate=0.01, momentum=0.9),
        "sgd": lambda p: nn.SGD(p, learning_rate=0.01, momentum=0.9),
        "adam": lambda p: nn.Adam(p, learning_rate=0.001),
        "adamw": lambda p: nn.AdamWeightDecay(p, learning_rate=0.001, weight_decay=0.01),
    }

    def step_cell(make):
        net = LeNet5()
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        return nn.TrainOneStepCell(nn.WithLossCell(net, loss), make(net.trainable_params()))

    worst = {}
    for name, make in makers.items():
        ms.set_seed(1)
        train = step_cell(make)
        for _ in range(2):
            train(xb, yb)
        first = os.path.join(tmp, f"ms_{name}_2.ckpt")
        ms.save_checkpoint(train, first)
        ms_losses = [float(train(xb, yb).asnumpy()) for _ in range(2)]
        ms_file = os.path.join(tmp, f"ms_{name}_4.ckpt")
        ms.save_checkpoint(train, ms_file)
        # MindSpore -> loom.
        loom_file = os.path.join(tmp, f"loom_{name}_4.ckpt")
        r = tool("continue", name, first, bx_path, by_path, str(b), "2", loom_file)
        loom_losses = [float(v) for v in r.stdout.split()]
        for i, (a, c) in enumerate(zip(ms_losses, loom_losses)):
            check(abs(a - c) <= 1e-5 * max(1.0, abs(a)),
                  f"{name}: loss of step {3 + i}: MindSpore {a}, loom {c}")
        want, got = ms.load_checkpoint(ms_file), ms.load_checkpoint(loom_file)
        check(set(want) == set(got), f"{name}: entries differ: {sorted(set(want) ^ set(got))}")
        for k in want:
            wa, ga = want[k].asnumpy(), got[k].asnumpy()
            check(wa.dtype == ga.dtype and wa.shape == ga.shape,
                  f"{name}: '{k}' is {ga.dtype} {ga.shape} in loom's file, {wa.dtype} {wa.shape} "
                  f"in MindSpore's")
            d = float(np.max(np.abs(wa.astype(np.float64) - ga.astype(np.float64)))) if wa.size else 0.0
            scale = max(1.0, float(np.max(np.abs(wa.astype(np.float64)))) if wa.size else 1.0)
            check(d <= 1e-5 * scale, f"{name}: '{k}' differs by {d:.3g} (scale {scale:.3g})")
            worst[name] = max(worst.get(name, 0.0), d / scale)
        # loom -> MindSpore: a fresh MindSpore step loads loom's file into every parameter of its
        # network and optimizer, and its next step equals the original run's.
        train2 = step_cell(make)
        param_not_load, _ = ms.load_param_into_net(train2, got)
        check(not param_not_load, f"{name}: MindSpore left {param_not_load} unloaded from loom's file")
        l_ms = float(train(xb, yb).asnumpy())
        l_from_loom = float(train2(xb, yb).asnumpy())
        check(abs(l_ms - l_from_loom) <= 1e-5 * max(1.0, abs(l_ms)),
              f"{name}: step 5 from loom's file {l_from_loom}, MindSpore's own {l_ms}")
    print("optimizer states both ways (Momentum, SGD, Adam, AdamWeightDecay): loom continues "
          "MindSpore's checkpoints and MindSpore loom's; every entry by MindSpore's names; worst "
          "relative difference after 2 more steps " +
          ", ".join(f"{k} {v:.2g}" for k, v in worst.items()))


def main():
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    tmp = tempfile.mkdtemp(prefix="loom_ms_ckpt_")
    try:
        x = np.random.default_rng(0).standard_normal((N, 1, 32, 32)).astype(np.float32)
        x_path = os.path.join(tmp, "x.bin")
        x.tofile(x_path)
        xt = ms.Tensor(x)

        # 1. MindSpore -> loom.
        ms.set_seed(1)
        net = LeNet5()
        want = net(xt).asnumpy()
        ms_file = os.path.join(tmp, "ms_lenet.ckpt")
        ms.save_checkpoint(net, ms_file)
        ms_params = ms.load_checkpoint(ms_file)
        check(len(ms_params) == 8, f"MindSpore's LeNet5 has {len(ms_params)} parameters, not 8")
        same_view(loom_dump(ms_file), ms_view(ms_params), "loom reading MindSpore's LeNet5")
        resaved = os.path.join(tmp, "loom_resaved.ckpt")
        tool("resave", ms_file, resaved)
        same_arrays(ms.load_checkpoint(resaved), ms_params, "MindSpore reading loom's resave")
        with open(ms_file, "rb") as f1, open(resaved, "rb") as f2:
            identical = f1.read() == f2.read()
        got = loom_forward(ms_file, x_path, tmp)
        d1 = float(np.max(np.abs(got - want)))
        check(d1 <= TOL, f"loom's forward with MindSpore's weights differs by {d1:.3g} > {TOL}")
        print(f"ms->loom: 8 tensors identical (loom's view and after resave; resave byte-identical "
              f"to MindSpore's file: {identical}); logits on {N} inputs max |diff| = {d1:.3g}")

        # 2. loom -> MindSpore.
        loom_file = os.path.join(tmp, "loom_lenet.ckpt")
        tool("save-lenet", loom_file, "7")
        loom_params = ms.load_checkpoint(loom_file)
        same_view(ms_view(loom_params), loom_dump(loom_file), "MindSpore reading loom's LeNet5")
        net2 = LeNet5()
        param_not_load, ckpt_not_load = ms.load_param_into_net(net2, loom_params, strict_load=True)
        check(not param_not_load and not ckpt_not_load,
              f"load_param_into_net: param_not_load={param_not_load} ckpt_not_load={ckpt_not_load}")
        for name, p in net2.parameters_and_names():
            check(p.asnumpy().tobytes() == loom_params[name].asnumpy().tobytes(),
                  f"'{name}' in MindSpore's net differs from the checkpoint")
        want2 = loom_forward(loom_file, x_path, tmp)
        got2 = net2(xt).asnumpy()
        d2 = float(np.max(np.abs(got2 - want2)))
        check(d2 <= TOL, f"MindSpore's forward with loom's weights differs by {d2:.3g} > {TOL}")
        print(f"loom->ms: 8 parameters loaded (none left), logits max |diff| = {d2:.3g}")

        # 3. A loom training checkpoint (ModelCheckpoint) in MindSpore.
        train_dir = os.path.join(tmp, "train")
        os.mkdir(train_dir)
        train_file = tool("train-lenet", train_dir, "5").stdout.strip()
        tp = ms.load_checkpoint(train_file)
        same_view(ms_view(tp), loom_dump(train_file), "MindSpore reading loom's training checkpoint")
        param_names = [n for n, _ in LeNet5().parameters_and_names()]
        extras = {
            "learning_rate": ("Float32", ()),
            "momentum": ("Float32", ()),
            "global_step": ("Int32", (1,)),
            "epoch_num": ("Int64", ()),
            "step_num": ("Int64", ()),
            "loom.seed": ("Int64", ()),
            "loom.data_epoch": ("Int64", ()),
            "loom.data_index": ("Int64", ()),
        }
        for n in param_names:
            extras["moments." + n] = ("Float32", tuple(tp[n].shape))
        strings = {"loom.optimizer": "Momentum"}
        check(set(tp) == set(param_names) | set(extras) | set(strings),
              f"training checkpoint entries: "
              f"{sorted(set(tp) ^ (set(param_names) | set(extras) | set(strings)))}")
        for n, v in strings.items():
            check(tp[n] == v, f"'{n}' = {tp[n]!r}, expected {v!r}")
        for n, (dtype, shape) in extras.items():
            check((str(tp[n].dtype), tuple(tp[n].shape)) == (dtype, shape),
                  f"'{n}': {tp[n].dtype} {tp[n].shape}, expected {dtype} {shape}")
        values = {n: tp[n].asnumpy().item() for n in extras if not n.startswith("moments.")}
        expected = {"global_step": 8, "epoch_num": 2, "step_num": 8, "loom.seed": 5,
                    "loom.data_epoch": 2, "loom.data_index": 0}
        for n, v in expected.items():
            check(values[n] == v, f"'{n}' = {values[n]}, expected {v}")
        check(abs(values["learning_rate"] - 0.01) < 1e-9, f"learning_rate = {values['learning_rate']}")
        check(abs(values["momentum"] - 0.9) < 1e-7, f"momentum = {values['momentum']}")
        net3 = LeNet5()
        param_not_load, ckpt_not_load = ms.load_param_into_net(net3, tp)
        check(not param_not_load, f"training checkpoint: param_not_load = {param_not_load}")
        check(sorted(ckpt_not_load) == sorted(set(extras) | set(strings)),
              f"training checkpoint: ckpt_not_load = {sorted(ckpt_not_load)}")
        print(f"training ckpt: {len(tp)} entries load in MindSpore; {len(extras)} extras "
              f"(moments.*, learning_rate, momentum, global_step, epoch_num, step_num, loom.*) "
              f"left unloaded "
              f"with the expected dtypes, shapes and values")

        # 4. Optimizer states, both ways.
        optimizer_states_both_ways(tmp)

        # 5. MindSpore's CRC trailer, 0-d scalars, bool and string entries in loom.
        crc_file = os.path.join(tmp, "ms_crc.ckpt")
        append = {"epoch_num": 3, "lr": 0.5, "flag": True, "note": "héllo ✓ loom", "empty": "",
                  "step": ms.Tensor(np.array(12, dtype=np.int32)),
                  "f16": ms.Tensor(np.arange(6, dtype=np.float16).reshape(2, 3) / 3),
                  "f64": ms.Tensor(np.linspace(0, 1, 5)),
                  "bf16": ms.Tensor(np.array([1.5, -2.25, 3.0], np.float32), ms.bfloat16),
                  "u8": ms.Tensor(np.arange(7, dtype=np.uint8)),
                  "i64": ms.Tensor(np.arange(6, dtype=np.int64).reshape(3, 2) - 3),
                  "mask": ms.Tensor(np.array([True, False, True]))}
        ms.save_checkpoint(net, crc_file, append_dict=append, crc_check=True)
        with open(crc_file, "rb") as f:
            raw = f.read()
        check(raw[-17:-10] == b"crc_num", "MindSpore wrote no CRC trailer")
        ms_crc = ms.load_checkpoint(crc_file, crc_check=True)
        view = loom_dump(crc_file, crc_check=True)
        same_view(view, ms_view(ms_crc), "loom reading MindSpore's CRC checkpoint")
        scalars = {r[1]: (r[2], r[3]) for r in view if r[0] == "tensor" and not r[3]}
        check(scalars == {"epoch_num": ("Int64", ()), "lr": ("Float32", ()),
                          "flag": ("Bool", ()), "step": ("Int32", ())},
              f"loom's 0-d entries: {scalars}")
        for k in ("note", "empty"):
            check(("str", k, None, None, append[k]) in view, f"the string entry '{k}' in loom")
        bad = os.path.join(tmp, "ms_crc_bad.ckpt")
        corrupt_copy(crc_file, bad)
        r = tool("dump", bad, "--crc-check", ok=False)
        check(r.returncode != 0 and "CRC" in r.stderr,
              f"loom accepted a corrupted CRC checkpoint: rc={r.returncode} {r.stderr.strip()}")
        for flags, what in (([], "plain"), (["--crc"], "with loom's CRC trailer")):
            out = os.path.join(tmp, f"loom_crc_resave{len(flags)}.ckpt")
            tool("resave", crc_file, out, "--crc-check", *flags)
            same_arrays(ms.load_checkpoint(out, crc_check=bool(flags)), ms_crc,
                        f"MindSpore reading loom's resave ({what})")
        bad2 = os.path.join(tmp, "loom_crc_bad.ckpt")
        corrupt_copy(out, bad2)
        try:
            ms.load_checkpoint(bad2, crc_check=True)
            fail("MindSpore accepted a corrupted loom CRC checkpoint")
        except ValueError as e:  # MindSpore rewraps the CRC error; the cause names it
            check("crc" in str(e.__cause__ or e).lower(), f"MindSpore refused for another reason: {e!r}")
        print(f"crc + scalars: MindSpore's CRC file ({len(ms_crc)} entries: 0-d Int64/Float32/Bool/"
              f"Int32, Float16/Float64/BFloat16/UInt8/Int64/Bool tensors, strings incl. \"\") reads in loom with the CRC checked, a corrupted copy is refused; loom's "
              f"resaves (plain and CRC) read back identically in MindSpore, a corrupted one is refused")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"OK (MindSpore {ms.__version__})")


if __name__ == "__main__":
    main()
