"""``import dtcomm.horovod.torch as hvd``: Horovod's torch API on dtcomm's engine.

See ``docs/horovod.md`` for what is covered and what is not yet. While initialised, the
Horovod layer owns dtcomm's group: do not call ``dtcomm.*`` collectives beside it.
"""

# The order matters (later star imports replace earlier names): not sorted.
# isort: off
from ._core import *  # noqa: F401,F403
from ._core import __all__ as _core_all
from .compression import Compression

# The differentiable forms replace _core's plain collectives of the same names.
from .functions import *  # noqa: F401,F403,E402
from .functions import __all__ as _functions_all
from .optimizer import DistributedOptimizer, broadcast_optimizer_state
from .sparse import sparse_allreduce_async
from .sync_batch_norm import SyncBatchNorm

from . import elastic  # noqa: E402  (after the names it uses)
# isort: on

__all__ = [*_core_all, *(n for n in _functions_all if n not in _core_all), "Compression",
           "DistributedOptimizer", "broadcast_optimizer_state", "SyncBatchNorm",
           "sparse_allreduce_async", "elastic"]
