#!/usr/bin/env python3
"""Builds the mapping `loom compare --mapping` reads ({"<PyTorch key>": "<loom key>"}) from the
structure of the two runs — never from their values — and lists the loom tensors it leaves out
with the reason.

Inputs: a loom dump of one training step (its execution-order CSV, IR text and tensor files) and
the PyTorch reference's dump of the same step (torch_reference.py: its tensor files and
.dump_metadata/reference_run.json, the calls' data flow). Outputs: the mapping JSON (sorted, only
mapping entries: loom compare reads every key as a PyTorch key) and, with --notes, a JSON object
{"<loom key or node>": "<why it has no PyTorch counterpart>"}.

Rules (debug/reference/README.md):
  forward node   its Cell path (scope without WithLossCell/_backbone and the op) names the
                 PyTorch module; the node is that module's next call in execution order (a
                 function in the network's own scope — loom's ResNet stem relu and ReduceMean —
                 is the module named in ROOT_FUNCTIONS). Outputs map to the call's outputs; a
                 node with a fused activation (MatMulBiasAct act relu) maps its output to the
                 ReLU call that consumes the product in PyTorch. Inputs map slot by slot when the
                 call's inputs line up (count, shapes, float dtypes): Conv2D (x, w), MatMulBiasAct
                 (x, w, b) as Linear, BatchNorm (x, gamma, beta, mean, variance).
  backward node  the PyTorch call is the forward call of its Cell that one of its IR inputs maps
                 to (through TupleGetItem), else the Cell's only call. Its output maps to the
                 call's gradient w.r.t. the forward input of the same shape (BatchNormGrad: slot
                 by slot; a square MatMul: the data gradient when it reads a parameter). A
                 gradient written by several nodes maps to the last (the earlier ones are
                 partial: the loss gradient before the sensitivity multiply). An Add in the
                 backward accumulates the contributions to one forward tensor: it maps to that
                 tensor's total gradient (a residual block's input).
  Gradient.{n}   to PyTorch's Gradient file of the same weight (state_dict name).
  Parameter.data / .label   to the reference's. The weights' Parameter files are not mapped:
                 each weight is compared as the input of the node that consumes it, so that a
                 wrong weight is reported at that node (loom compare orders Parameter files
                 before every launch).

Usage:
  python3 debug/reference/make_mapping.py --loom-dump L --torch-dump T \\
      --out debug/reference/lenet_torch_map.json --notes debug/reference/lenet_torch_map.notes.json
  --check FILE: exit 1 when the mapping built now differs from FILE (the committed one is stale).
"""
import argparse
import json
import os
import re
import sys

import numpy as np

# loom functions called in a network's own scope (no Cell of their own) -> the PyTorch module
# torch_reference.py gives them.
ROOT_FUNCTIONS = {"ReLU": "relu", "ReduceMean": "mean"}
# loom forward ops whose inputs line up slot by slot with the PyTorch call's recorded inputs.
INPUT_ALIGNED = {"Conv2D": "Conv2d", "MatMulBiasAct": "Linear", "BatchNorm": "BatchNorm2d",
                 "ReLU": "ReLU", "MaxPool": "MaxPool2d", "Flatten": "Flatten",
                 "ReduceMean": "ReduceMean", "SparseSoftmaxCrossEntropyWithLogits":
                 "CrossEntropyLoss"}
# Fused activations: the act attribute -> the PyTorch module type consuming the product.
FUSED_ACT = {"relu": "ReLU"}

_FILE = re.compile(r"^([^.]+)\.(.+)\.(\d+)\.(\d+)\.(\d+)\.(input|output)\.(\d+)\.([^.]+)\.npy$")


class MappingError(Exception):
    pass


def iteration_folder(dump, graph, iteration):
    rank_dirs = [dump] if re.fullmatch(r"rank_\d+", os.path.basename(os.path.normpath(dump))) \
        else sorted(os.path.join(dump, d) for d in os.listdir(dump) if d.startswith("rank_"))
    if len(rank_dirs) != 1:
        raise MappingError(f"{dump}: expected one rank_* folder, got {len(rank_dirs)}")
    rank = rank_dirs[0]
    found = []
    for net in os.listdir(rank):
        if net in ("graphs", "execution_order", ".dump_metadata"):
            continue
        d = os.path.join(rank, net, str(graph), str(iteration))
        if os.path.isdir(d):
            found.append(d)
    if len(found) != 1:
        raise MappingError(f"{rank}: expected one {{net}}/{graph}/{iteration} folder, got "
                           f"{len(found)}")
    return rank, found[0]


def tensor_files(folder):
    """{key: (shape, dtype kind)} of an iteration folder, keys as loom compare builds them."""
    out = {}
    for f in os.listdir(folder):
        m = _FILE.match(f)
        if not m:
            continue
        op_type, op_name, io, slot = m.group(1), m.group(2), m.group(6), m.group(7)
        key = f"{op_name}.{io}.{slot}"
        if op_type in ("Parameter", "Gradient"):
            key = f"{op_type}.{key}"
        a = np.load(os.path.join(folder, f), mmap_mode="r")
        out[key] = (tuple(a.shape), a.dtype.kind)
    return out


def read_execution_order(rank, graph):
    import csv
    path = os.path.join(rank, "execution_order", f"ms_execution_order_graph_{graph}.csv")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def split_args(text):
    """Top-level comma-separated arguments of an IR call."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


_NODE = re.compile(r"^\s*%(\S+) = ([A-Za-z0-9_]+)\(")


def read_ir(rank, graph):
    """{label: {"op", "inputs": [label or '%param' names], "attrs": text}} of the top graph."""
    path = os.path.join(rank, "graphs", f"ms_output_trace_code_graph_{graph}.ir")
    nodes = {}
    with open(path) as f:
        for line in f:
            m = _NODE.match(line)
            if not m:
                continue
            label, op = m.group(1), m.group(2)
            i = m.end()  # after "Op("
            depth, j = 1, i
            while depth and j < len(line):
                depth += {"(": 1, ")": -1}.get(line[j], 0)
                j += 1
            args = split_args(line[i:j - 1])
            rest = line[j:]
            attrs = rest[rest.index("{"):rest.index("}") + 1] if rest.lstrip().startswith("{") \
                else ""
            nodes[label] = {"op": op, "inputs": [a[1:] if a.startswith("%") else None
                                                 for a in args], "attrs": attrs}
    if not nodes:
        raise MappingError(f"{path}: no nodes")
    return nodes


def cell_path(scope):
    """(Cell path, PyTorch module) of a loom scope: "Gradients/WithLossCell/_backbone/layer1/0/
    conv1/Conv2D" -> "layer1.0.conv1"; the loss's scope -> "loss_fn"."""
    parts = scope.split("/")
    if parts and parts[0] == "Gradients":
        parts = parts[1:]
    if parts[:2] == ["WithLossCell", "_backbone"]:
        return ".".join(parts[2:-1])
    if parts[:2] == ["WithLossCell", "_loss_fn"]:
        return "loss_fn"
    return None


def build(loom_dump, torch_dump, graph, iteration):
    rank, loom_folder = iteration_folder(loom_dump, graph, iteration)
    _, torch_folder = iteration_folder(torch_dump, graph, iteration)
    trank = os.path.dirname(os.path.dirname(os.path.dirname(torch_folder)))
    with open(os.path.join(trank, ".dump_metadata", "reference_run.json")) as f:
        meta = json.load(f)
    A = tensor_files(loom_folder)
    B = tensor_files(torch_folder)
    rows = [r for r in read_execution_order(rank, graph) if r["depth"] == "0"]
    ir = read_ir(rank, graph)

    calls = {c["op_name"][:-len(".forward")]: c for c in meta["calls"]}  # "relu.2" -> call
    queues = {}
    for c in meta["calls"]:
        queues.setdefault(c["module"], []).append(c["op_name"][:-len(".forward")])

    mapping = {}   # B key -> A key
    notes = {}     # A key or node -> reason
    fwd = {}       # loom label -> {module: torch call name}

    def add(b, a, why_not=None):
        if a not in A:
            notes[a] = f"not dumped by loom ({why_not or 'missing'})"
            return
        if b not in B:
            notes[a] = f"no PyTorch tensor {b}" + (f" ({why_not})" if why_not else "")
            return
        if A[a][0] != B[b][0]:
            raise MappingError(f"{a} {A[a][0]} and {b} {B[b][0]}: the rules paired tensors of "
                               "different shapes (a rule is wrong for this network)")
        mapping[b] = a

    def node_keys(op_name, io):
        return sorted((k for k in A if k.startswith(op_name + f".{io}.")),
                      key=lambda k: int(k.rsplit(".", 1)[1]))

    def source_label(label):
        while label in ir and ir[label]["op"] == "TupleGetItem":
            label = ir[label]["inputs"][0]
        return label

    last_writer = {}  # B key -> A key (backward: the last node writing a gradient wins)
    for r in rows:
        op, name, role = r["op_type"], r["op_name"], r["role"]
        m = re.fullmatch(r"(.+)-op(\S+)", name)
        label = m.group(2) if m else None
        node = ir.get(label)
        cell = cell_path(r["scope"])
        if role == "optimizer":
            notes[name] = ("the optimizer's update (inputs and outputs): the reference makes no "
                           "optimizer step")
            continue
        if cell is None:
            notes[name] = ("outside the network's Cells (the sensitivity, ones, seeding the "
                           "backward): no PyTorch tensor")
            continue
        if role == "forward":
            module = cell if cell else ROOT_FUNCTIONS.get(op)
            if not module or not queues.get(module):
                notes[name] = f"no PyTorch call of module '{module or cell}' left to pair with"
                continue
            call = queues[module].pop(0)
            out_call = call
            act = re.search(r'act: "(\w+)"', node["attrs"]) if node else None
            if act and act.group(1) != "none":
                want = FUSED_ACT.get(act.group(1))
                consumers = [c for c in meta["calls"]
                             if c["op_type"] == want and c["inputs"] and c["inputs"][0] and
                             c["inputs"][0].get("from") == f"{call}.forward.output.0"]
                if len(consumers) != 1:
                    notes[name] = (f"fused {act.group(1)}: no single PyTorch {want} call "
                                   f"consuming {call}'s output")
                    continue
                out_call = consumers[0]["op_name"][:-len(".forward")]
                queues[consumers[0]["module"]].remove(out_call)
            fwd[label] = {calls[call]["module"]: call, calls[out_call]["module"]: out_call}
            for a in node_keys(name, "output"):
                add(f"{out_call}.forward.output.{a.rsplit('.', 1)[1]}", a)
            c = calls[call]
            ins = node_keys(name, "input")
            aligned = INPUT_ALIGNED.get(op) == c["op_type"] and len(ins) == len(c["inputs"])
            for a in ins:
                k = int(a.rsplit(".", 1)[1])
                b = f"{call}.forward.input.{k}"
                if not aligned:
                    notes[a] = (f"{op}'s inputs do not line up with {c['op_type']} {call}'s "
                                f"({len(ins)} vs {len(c['inputs'])}: a fused node)")
                elif b in B and B[b][1] != A[a][1]:
                    notes[a] = f"dtype kind {A[a][1]} in loom, {B[b][1]} in PyTorch"
                else:
                    add(b, a)
            for a in node_keys(name, "output"):
                if a not in mapping.values() and a not in notes:
                    notes[a] = f"{op} output with no counterpart in {out_call}"
            continue
        # backward
        fcell = cell_path(r["forward"]) if r["forward"] else cell
        module = fcell if fcell else ROOT_FUNCTIONS.get(r["forward"].rsplit("/", 1)[-1])
        call = None
        for i in (node["inputs"] if node else []):
            s = source_label(i) if i else None
            if s in fwd and module in fwd[s]:
                call = fwd[s][module]
                break
        if call is None:
            own = [n for n, c in calls.items() if c["module"] == module]
            if len(own) == 1:
                call = own[0]
        if call is None:
            notes[name] = f"backward of '{module}': which PyTorch call it differentiates is unclear"
            continue
        outs = node_keys(name, "output")
        if op == "Add":
            c = calls[call]
            src = c["inputs"][0].get("grad_of_source") if c["inputs"] and c["inputs"][0] else None
            if len(outs) == 1 and src:
                b = src
                prev = last_writer.get(b)
                if prev:
                    notes[prev] = f"superseded by {outs[0]} (a partial sum of {b})"
                    mapping.pop(next(k for k, v in mapping.items() if v == prev), None)
                add(b, outs[0])
                last_writer[b] = outs[0]
                continue
        for a in outs:
            k = int(a.rsplit(".", 1)[1])
            shape = A[a][0]
            grads = {int(b.rsplit(".", 1)[1]): b for b in B
                     if b.startswith(f"{call}.backward.output.")}
            if len(outs) > 1:
                cand = [k] if k in grads and B[grads[k]][0] == shape else []
            else:
                cand = sorted(s for s, b in grads.items() if B[b][0] == shape)
                if len(cand) > 1:  # square weight: the data gradient reads the weight
                    reads_param = any(i and not re.fullmatch(r"\d+", i)
                                      for i in node["inputs"])
                    cand = [0] if reads_param and 0 in cand else [s for s in cand if s != 0]
            if len(cand) != 1:
                notes[a] = (f"an intermediate of {call}'s gradient (shape {list(shape)} is no "
                            "gradient PyTorch records)")
                continue
            b = grads[cand[0]]
            prev = last_writer.get(b)
            if prev:
                notes[prev] = f"superseded by {a}, which writes the same gradient later ({b})"
                mapping.pop(next(kk for kk, v in mapping.items() if v == prev), None)
            add(b, a)
            last_writer[b] = a

    # Gradients, the batch.
    for tname, ms in meta["names"]["torch_to_loom"].items():
        g = f"Gradient.{ms}.output.0"
        if g in A:
            add(f"Gradient.{tname}.output.0", g)
    for n in ("data", "label"):
        add(f"Parameter.{n}.output.0", f"Parameter.{n}.output.0")
    weights = {f"Parameter.{ms}.output.0" for ms in meta["names"]["torch_to_loom"].values()}
    if any(a in A for a in weights):
        notes["Parameter.{every weight and moving statistic}.output.0"] = (
            "not mapped: each is compared as the input of the node consuming it (Conv2D input 1, "
            "MatMulBiasAct inputs 1-2, BatchNorm inputs 1-4), so that a wrong weight is "
            "reported at that node; loom compare orders Parameter files before every launch")
    others = sorted(a for a in A if a.startswith("Parameter.") and a not in weights and
                    a not in mapping.values())
    if others:
        notes["Parameter.{" + ", ".join(a[len("Parameter."):-len(".output.0")]
                                        for a in others) + "}.output.0"] = (
            "optimizer states and the learning rate: the reference makes no optimizer step")
    for r in rows:
        name = r["op_name"]
        if r["role"] == "backward" and name not in notes and node_keys(name, "input"):
            notes[f"{name}.input.*"] = ("a gradient node's inputs are other nodes' outputs "
                                        "(compared there) or forward values")
    explained = set(mapping.values()) | set(notes)
    for a in A:
        node = a.rsplit(".", 2)[0]
        if a in explained or node in notes or f"{node}.input.*" in notes and ".input." in a:
            continue
        if a.startswith("Parameter."):
            continue
        notes[a] = "no rule pairs it"
    return mapping, notes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--loom-dump", required=True)
    p.add_argument("--torch-dump", required=True)
    p.add_argument("--graph", type=int, default=0)
    p.add_argument("--iteration", type=int, default=0)
    p.add_argument("--out", help="write the mapping here")
    p.add_argument("--notes", help="write the unmapped loom tensors and why here")
    p.add_argument("--check", metavar="FILE",
                   help="compare with a committed mapping; exit 1 when it differs")
    args = p.parse_args(argv)
    try:
        mapping, notes = build(args.loom_dump, args.torch_dump, args.graph, args.iteration)
    except (MappingError, OSError, KeyError) as e:
        print(f"make_mapping: {e}", file=sys.stderr)
        return 2
    text = json.dumps(dict(sorted(mapping.items())), indent=1) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.notes:
        with open(args.notes, "w") as f:
            json.dump(dict(sorted(notes.items())), f, indent=1)
            f.write("\n")
    print(f"make_mapping: {len(mapping)} entries; {len(notes)} loom tensors or nodes unmapped")
    if args.check:
        with open(args.check) as f:
            committed = json.load(f)
        if committed != mapping:
            gone = sorted(set(committed.items()) - set(mapping.items()))
            new = sorted(set(mapping.items()) - set(committed.items()))
            print(f"make_mapping: {args.check} is out of date for this loom build: "
                  f"{len(gone)} entries differ or are gone (e.g. {gone[:3]}), {len(new)} new "
                  f"(e.g. {new[:3]}); regenerate it (debug/reference/README.md)", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
