"""Data pipelines with MindSpore's vocabulary: sources, then map / shuffle / batch / repeat.

    import loom.dataset as ds
    import loom.dataset.vision as vision
    import loom.dataset.transforms as transforms

    train = ds.MnistDataset("/usr/share/datasets/fashion-mnist", usage="train")
    train = train.map([vision.Rescale(1 / 255, 0), vision.HWC2CHW()], input_columns="image")
    train = train.shuffle().batch(32, drop_remainder=True)

    arrays = ds.NumpySlicesDataset((x, y), column_names=["image", "label"]).batch(16)
    rows = ds.GeneratorDataset(source, column_names=["image", "label"])  # source[i], len(source)

Rows are random access and reproducible: the shuffle and the random transforms draw from the
pipeline's Philox streams under loom.set_seed. ds[i] is row i (epoch 0) as a tuple of tensors.
"""
from loom._loom import Cifar10Dataset, Dataset, GeneratorDataset, MnistDataset  # noqa: F401
from loom._loom import NumpySlicesDataset as _slices


def NumpySlicesDataset(data, column_names=None):  # noqa: N802  (MindSpore's name)
    """Rows from arrays sliced along their first axis: a tuple / list of arrays (columns named
    by column_names, else column_0...) or a dict name -> array."""
    return _slices(data, list(column_names or []))


__all__ = ["Dataset", "NumpySlicesDataset", "GeneratorDataset", "MnistDataset", "Cifar10Dataset",
           "vision",
           "transforms"]

from loom.dataset import transforms, vision  # noqa: E402,F401
