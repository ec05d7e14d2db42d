"""``import dtcomm.horovod.torch as hvd``: Horovod's torch API on dtcomm's engine.

See ``docs/horovod.md`` for what is covered and what is not yet. While initialised, the
Horovod layer owns dtcomm's group: do not call ``dtcomm.*`` collectives beside it.
"""

from ._core import *  # noqa: F401,F403
from ._core import __all__ as _core_all
from .compression import Compression
from .optimizer import DistributedOptimizer, broadcast_optimizer_state

__all__ = [*_core_all, "Compression", "DistributedOptimizer", "broadcast_optimizer_state"]
