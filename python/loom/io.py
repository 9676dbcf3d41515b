"""Checkpoints and MindIR files, with MindSpore's functions and arguments.

    loom.save_checkpoint(net, "lenet.ckpt")                 # every parameter of a Cell
    params = loom.load_checkpoint("lenet.ckpt")             # {name: Tensor}, in file order
    param_not_load, ckpt_not_load = loom.load_param_into_net(net, params)

    loom.export(net, loom.Tensor(x), file_name="lenet", file_format="MINDIR")   # lenet.mindir
    graph = loom.load("lenet.mindir")
    y = loom.nn.GraphCell(graph)(loom.Tensor(x))

Checkpoints are MindSpore's .ckpt files (written atomically, ".ckpt" appended to a name without
it, read-only afterwards); MindIR files are MindSpore's, loadable by MindSpore 2.x, and loom.load
reads MindSpore's own. A corrupt file is a loom.LoomFormatError (a ValueError) naming the file
and what is wrong.
"""
import numbers

from loom import _loom
from loom._loom import GraphCell, MindIRGraph, Tensor  # noqa: F401


def _as_tensor(value, what):
    if isinstance(value, Tensor):
        return value
    if isinstance(value, _loom.Parameter):  # a Cell's parameter (net.fc1.weight)
        return value.value
    data = getattr(value, "data", None)      # loom.nn.Parameter before registration
    if isinstance(data, Tensor):
        return data
    try:
        return Tensor(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what}: expected a Tensor, got a {type(value).__name__}") from e


def _append_entry(name, value):
    """append_dict's values: str as MindSpore's string entries, numbers as rank-0 tensors
    (bool Bool, int Int64, float Float32, as MindSpore writes them), tensors as they are."""
    if isinstance(value, str):
        return (name, value)
    if isinstance(value, bool):
        return (name, Tensor(value))
    if isinstance(value, numbers.Integral):
        return (name, Tensor(int(value)))
    if isinstance(value, numbers.Real):
        return (name, Tensor(float(value)))
    return (name, _as_tensor(value, f"save_checkpoint: append_dict['{name}']"))


def _entries_of(save_obj):
    if isinstance(save_obj, _loom._Cell):
        return [(name, p.value) for name, p in save_obj.parameters_and_names()]
    if isinstance(save_obj, dict):
        return [(name, _as_tensor(v, f"save_checkpoint: '{name}'")) for name, v in save_obj.items()]
    if isinstance(save_obj, (list, tuple)):
        entries = []
        for item in save_obj:
            if not isinstance(item, dict) or "name" not in item or "data" not in item:
                raise TypeError("save_checkpoint: expected a list of {'name': str, 'data': "
                                f"Tensor}} dicts, got an item {item!r}")
            entries.append((item["name"], _as_tensor(item["data"],
                                                     f"save_checkpoint: '{item['name']}'")))
        return entries
    raise TypeError("save_checkpoint: expected a Cell, a list of {'name', 'data'} dicts or a "
                    f"dict of tensors, got a {type(save_obj).__name__}")


def save_checkpoint(save_obj, ckpt_file_name, integrated_save=True, async_save=False,
                    append_dict=None, enc_key=None, enc_mode="AES-GCM", choice_func=None,
                    crc_check=False, format="ckpt"):
    """MindSpore's save_checkpoint: save_obj is a Cell (every parameter, in
    parameters_and_names order), a list of {"name": str, "data": Tensor} dicts or a dict name ->
    Tensor; append_dict adds str, number and Tensor entries; choice_func(name) -> bool keeps a
    parameter. Device tensors are copied to the host. crc_check appends MindSpore 2.3's CRC
    trailer. The file is ckpt_file_name, with ".ckpt" appended when it lacks it; written
    atomically (a failed save leaves the previous file). async_save writes before returning all
    the same; integrated_save has no meaning on one process."""
    del integrated_save, async_save, enc_mode
    if enc_key is not None:
        raise ValueError("save_checkpoint: expected no enc_key (loom writes no encrypted "
                         "checkpoints), got one")
    if format != "ckpt":
        raise ValueError(f"save_checkpoint: expected format 'ckpt', got '{format}'")
    if not isinstance(ckpt_file_name, str):
        raise TypeError("save_checkpoint: expected ckpt_file_name to be a str, got a "
                        f"{type(ckpt_file_name).__name__}")
    entries = _entries_of(save_obj)
    if choice_func is not None:
        entries = [(name, t) for name, t in entries if choice_func(name)]
    for name, value in (append_dict or {}).items():
        entries.append(_append_entry(name, value))
    _loom.save_checkpoint(entries, ckpt_file_name, crc_check)


def _prefixes(prefix, what):
    if prefix is None:
        return ()
    prefixes = (prefix,) if isinstance(prefix, str) else tuple(prefix)
    if not prefixes or not all(isinstance(p, str) and p for p in prefixes):
        raise ValueError(f"load_checkpoint: expected {what} to be a non-empty str or a list of "
                         f"them, got {prefix!r}")
    return prefixes


def load_checkpoint(ckpt_file_name, net=None, strict_load=False, filter_prefix=None,
                    dec_key=None, dec_mode="AES-GCM", specify_prefix=None, choice_func=None,
                    crc_check=False):
    """MindSpore's load_checkpoint: a dict name -> Tensor in file order (string entries, from
    append_dict, as str after the tensors). specify_prefix keeps only names starting with one
    of its prefixes, filter_prefix drops those starting with one of its, choice_func(name) ->
    bool keeps a name; with net the result is also loaded into it (load_param_into_net).
    crc_check verifies MindSpore 2.3's CRC trailer when the file has one. A missing file is a
    ValueError, a corrupt one a LoomFormatError (a ValueError) naming the file and the entry."""
    del dec_mode
    if dec_key is not None:
        raise ValueError("load_checkpoint: expected no dec_key (loom reads no encrypted "
                         "checkpoints), got one")
    if not isinstance(ckpt_file_name, str):
        raise TypeError("load_checkpoint: expected ckpt_file_name to be a str, got a "
                        f"{type(ckpt_file_name).__name__}")
    keep = _prefixes(specify_prefix, "specify_prefix")
    drop = _prefixes(filter_prefix, "filter_prefix")
    params = {}
    for name, value in _loom.load_checkpoint(ckpt_file_name, crc_check):
        if keep and not name.startswith(keep):
            continue
        if drop and name.startswith(drop):
            continue
        if choice_func is not None and not choice_func(name):
            continue
        params[name] = value
    if net is not None:
        load_param_into_net(net, params, strict_load)
    return params


def load_param_into_net(net, parameter_dict, strict_load=False):
    """MindSpore 2.x's load_param_into_net: copies each tensor into net's parameter of the same
    name (in place, on the parameter's device) and returns (param_not_load, ckpt_not_load): the
    net's parameters that got no value, the dict's tensors that matched no parameter. Without
    strict_load a parameter also matches a name ending in "." + its name and float/int dtypes
    convert. A shape or dtype mismatch is a ValueError naming the parameter, and then nothing is
    loaded. String entries (append_dict's) are skipped."""
    if not isinstance(net, _loom._Cell):
        raise TypeError(f"load_param_into_net: expected a Cell, got a {type(net).__name__}")
    if not isinstance(parameter_dict, dict):
        raise TypeError("load_param_into_net: expected parameter_dict to be a dict, got a "
                        f"{type(parameter_dict).__name__}")
    params = [(name, _as_tensor(v, f"load_param_into_net: '{name}'"))
              for name, v in parameter_dict.items() if not isinstance(v, str)]
    param_not_load, ckpt_not_load = _loom.load_param_into_net(net, params, strict_load)
    return list(param_not_load), list(ckpt_not_load)


def export(net, *inputs, file_name, file_format="MINDIR", **kwargs):
    """MindSpore's export for file_format "MINDIR": traces net (in inference mode) on the example
    inputs' dtypes and shapes and writes its graph and weights to file_name, with ".mindir"
    appended when it lacks it. Returns None."""
    if file_format != "MINDIR":
        raise ValueError(f"export: expected file_format 'MINDIR', got '{file_format}' (loom "
                         "writes no AIR or ONNX)")
    if kwargs:
        raise TypeError(f"export: unexpected keyword arguments {sorted(kwargs)}")
    if not isinstance(net, _loom._Cell):
        raise TypeError(f"export: expected a Cell, got a {type(net).__name__}")
    if not isinstance(file_name, str):
        raise TypeError(f"export: expected file_name to be a str, got a {type(file_name).__name__}")
    if not file_name.endswith(".mindir"):
        file_name += ".mindir"
    tensors = [_as_tensor(x, f"export: input {i}") for i, x in enumerate(inputs)]
    _loom.export_mindir(net, tensors, file_name)


def load(file_name, **kwargs):
    """MindSpore's load: reads a MindIR file (loom's or MindSpore's), or an ONNX file (a name
    ending in ".onnx": PyTorch's torch.onnx.export, loom's export), into a graph that
    loom.nn.GraphCell runs (loom.nn.GraphNet(file_name) is the trainable form). A name ending in
    neither or a missing file is a ValueError, a file that is not MindIR or ONNX a
    LoomFormatError (a ValueError) naming it."""
    if kwargs:
        raise TypeError(f"load: unexpected keyword arguments {sorted(kwargs)} (loom reads no "
                        "encrypted MindIR)")
    if not isinstance(file_name, str):
        raise ValueError(f"load: expected file_name to be a str, got a {type(file_name).__name__}")
    if file_name.endswith(".onnx"):
        return _loom.load_onnx(file_name)
    if not file_name.endswith(".mindir"):
        raise ValueError(f"load: expected a file name ending in .mindir or .onnx, got "
                         f"'{file_name}'")
    return _loom.load_mindir(file_name)


__all__ = ["save_checkpoint", "load_checkpoint", "load_param_into_net", "export", "load",
           "GraphCell", "MindIRGraph"]
