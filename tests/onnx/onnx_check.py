"""ONNX export against onnx's checker and ONNX Runtime (run by onnx_check.sh).

For LeNet-5, ResNet-18 (32x32) and ResNet-50 (224x224, the ImageNet layout), `loom export MODEL
--output M.onnx --batch 2` writes the zoo network (its initial weights, seed 1); the file must
pass onnx.checker.check_model(full_check=True) (which also runs ONNX's shape inference), declare
IR version 8 and opset 17, and take any batch size: ONNX Runtime runs it on 5 images, and its
outputs equal `loom run` of the same network's MindIR export on those images to 1e-5 of the
output's scale (max(1, max |y|)).
"""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort

TOL = 1e-5
MODELS = [("lenet", [], (1, 32, 32)), ("resnet18", [], (1, 32, 32)),
          ("resnet50", ["--dataset", "fake-imagenet"], (3, 224, 224))]


def loom(tool, *args):
    r = subprocess.run([tool, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("FAILED: loom %s: %s" % (" ".join(args), r.stderr.strip()))
    return r.stdout


def main():
    tool, tmp = sys.argv[1], sys.argv[2]
    print("onnx", onnx.__version__, "onnxruntime", ort.__version__)
    ok = True
    rng = np.random.default_rng(0)
    for name, flags, shape in MODELS:
        path = os.path.join(tmp, name + ".onnx")
        out = loom(tool, "export", name, *flags, "--output", path, "--batch", "2")
        ok &= "to " + path in out
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        opsets = {o.domain: o.version for o in model.opset_import}
        ok &= model.ir_version == 8 and opsets == {"": 17} and model.producer_name == "loom"
        x = rng.standard_normal((5,) + shape).astype(np.float32)
        xp = os.path.join(tmp, name + "_x.npy")
        np.save(xp, x)
        mindir = os.path.join(tmp, name + ".mindir")
        loom(tool, "export", name, *flags, "--output", mindir, "--batch", "5")
        yp = os.path.join(tmp, name + "_y.npy")
        loom(tool, "run", mindir, "--input", xp, "--output", yp)
        want = np.load(yp)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = session.run(None, {session.get_inputs()[0].name: x})[0]
        scale = max(1.0, float(np.max(np.abs(want))))
        d = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) / scale
        good = got.shape == want.shape and d <= TOL
        ops = sorted({n.op_type for n in model.graph.node})
        print("%-9s %s checked; ONNX Runtime on %s: max |diff| / scale %.3g %s (ops: %s)"
              % (name, os.path.basename(path), got.shape, d, "ok" if good else "FAILED",
                 ", ".join(ops)))
        ok &= good
    if not ok:
        raise SystemExit("FAILED")
    print("PASSED")


if __name__ == "__main__":
    main()
