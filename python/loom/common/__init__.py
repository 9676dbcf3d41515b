"""mindspore.common's counterparts: initializers (loom.common.initializer)."""
from loom.common import initializer  # noqa: F401
