"""dtcomm: collective communication for distributed training.

``dtcomm.init()`` joins the group (rank, world size and rendezvous from the launcher's
environment: dtrun, torchrun, Horovod / Open MPI / PMI, OCI); every collective takes numpy
arrays or CPU torch tensors in place, zero copy, with the GIL released, synchronously or with
``async_op=True``. ``torch.distributed.init_process_group("dtcomm")`` uses the same engine as a
torch backend (see ``dtcomm.torch_backend``), and ``dtrun`` launches jobs.
"""

from __future__ import annotations

from ._api import (
    all_gather,
    all_reduce,
    all_to_all,
    barrier,
    broadcast,
    communicator,
    gather,
    init,
    is_initialized,
    local_rank,
    local_size,
    rank,
    recv,
    reduce,
    reduce_scatter,
    scatter,
    send,
    shutdown,
    size,
)
from ._config import ConfigError
from ._dtcomm import (
    CommTimeoutError,
    Communicator,
    DtcommError,
    MismatchError,
    PeerLostError,
    RdzvServer,
    SetupError,
    ShutdownError,
    StoreClient,
    __version__,
)
from ._ops import AVG, MAX, MIN, PROD, SUM, ReduceOp
from ._work import Work

__all__ = [
    "AVG",
    "MAX",
    "MIN",
    "PROD",
    "SUM",
    "CommTimeoutError",
    "Communicator",
    "ConfigError",
    "DtcommError",
    "MismatchError",
    "PeerLostError",
    "RdzvServer",
    "ReduceOp",
    "SetupError",
    "ShutdownError",
    "StoreClient",
    "Work",
    "__version__",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "barrier",
    "broadcast",
    "communicator",
    "gather",
    "init",
    "is_initialized",
    "local_rank",
    "local_size",
    "rank",
    "recv",
    "reduce",
    "reduce_scatter",
    "scatter",
    "send",
    "shutdown",
    "size",
]
