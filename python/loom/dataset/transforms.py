"""General transforms for Dataset.map (MindSpore's mindspore.dataset.transforms names)."""
from loom._loom import TypeCast  # noqa: F401

__all__ = ["TypeCast"]
