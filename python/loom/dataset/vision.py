"""Image transforms for Dataset.map (MindSpore's mindspore.dataset.vision names)."""
from loom._loom import (  # noqa: F401
    HWC2CHW,
    Normalize,
    Pad,
    RandomCrop,
    RandomHorizontalFlip,
    Rescale,
    Resize,
)

__all__ = ["HWC2CHW", "Normalize", "Pad", "RandomCrop", "RandomHorizontalFlip", "Rescale",
           "Resize"]
