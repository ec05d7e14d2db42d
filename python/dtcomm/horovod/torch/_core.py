"""``import dtcomm.horovod.torch as hvd``: Horovod's torch API on dtcomm's engine, gathered
from the modules that hold it (this module keeps the names it always had):

* ``_state``: what the layer holds between calls (negotiation, process sets, handles);
  ``HorovodInternalError``;
* ``_setup``: ``init``/``shutdown``/``is_initialized``, process-set registration, the timeline,
  the elastic move to a new round;
* ``_topology``: ``rank``, ``size``, ``local_*``, ``cross_*``, ``is_homogeneous``, build probes;
* ``_collectives``: the reduce ops, ``allreduce`` (``_async``, ``_``, ``_async_``) with
  ``prescale_factor``/``postscale_factor``, ``allgather`` (first dimension per rank),
  ``broadcast`` (in place and not), ``alltoall``, ``reducescatter``, the grouped forms,
  ``poll``/``synchronize`` on integer handles, ``barrier``, ``join``;
* ``_objects``: ``broadcast_parameters``, ``broadcast_object``, ``allgather_object``.

The helpers the modules beside this one use (``_group``, ``_splits``, ``started``, ...) are
here too, under the names they had. Process sets (``process_sets.py``): every operation takes
``process_set=``. The rest of
Horovod's API is not built yet (``docs/horovod.md``).

While initialised, the Horovod layer owns dtcomm's group: do not call ``dtcomm.*``
collectives beside it.
"""

from __future__ import annotations

from ._collectives import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    synchronize,
)
from ._collectives import _group_names as _group_names
from ._collectives import _lend_allreduce as _lend_allreduce
from ._collectives import _splits as _splits
from ._objects import allgather_object, broadcast_object, broadcast_parameters
from ._setup import _elastic_reset as _elastic_reset
from ._setup import (
    add_process_set,
    init,
    is_initialized,
    remove_process_set,
    shutdown,
    start_timeline,
    stop_timeline,
)
from ._setup import started as started
from ._state import HorovodInternalError
from ._state import _group as _group
from ._state import _set_state as _set_state
from ._state import cross_of as cross_of
from ._topology import (
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    is_homogeneous,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    size,
)
from .process_sets import ProcessSet, global_process_set

__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "HorovodInternalError",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "mpi_built", "mpi_enabled", "gloo_built",
    "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "mpi_threads_supported", "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "allgather", "allgather_async", "broadcast", "broadcast_async", "broadcast_",
    "broadcast_async_", "poll", "synchronize", "barrier", "broadcast_parameters",
    "broadcast_object", "allgather_object", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_",
    "grouped_allreduce_async_", "grouped_allgather", "grouped_allgather_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "join", "start_timeline",
    "stop_timeline", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set",
]
