"""dtcomm: collective communication for distributed training.

``dtcomm.init()`` joins the group (rank, world size and rendezvous from the launcher's
environment: dtrun, torchrun, Horovod / Open MPI / PMI, OCI); every collective takes numpy
arrays or CPU torch tensors in place, zero copy, with the GIL released, synchronously or with
``async_op=True``. ``torch.distributed.init_process_group("dtcomm")`` uses the same engine as a
torch backend (see ``dtcomm.torch_backend``), and ``dtrun`` launches jobs.

With ``DTCOMM_RDZV_ENDPOINT`` on ``dt-rdzv serve``'s native port, ``init()`` joins the job over
the native protocol (``dtcomm._native``), ``dtcomm.elastic.run`` survives members coming and
going, and ``torchrun --rdzv-backend=dtcomm`` uses the same protocol
(``dtcomm.torchrun_handler``).

``dtcomm.get_include()`` and ``dtcomm.get_lib()`` are the directories of the C ABI's header
(``dtcomm.h``) and library (``libdtcomm_ffi.so``) in the wheel.

``dtcomm.cuda_status()`` says whether this process could use a GPU (the CUDA driver, NCCL,
the device count), and if not why.
"""

from __future__ import annotations

from . import (
    debug,  # dtcomm.debug.dump, entries, summary (the flight recorder)
    elastic,  # dtcomm.elastic.run, ObjectState, TorchState
)
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
    recv_any,
    reduce,
    reduce_scatter,
    scatter,
    send,
    shutdown,
    size,
)
from ._config import ConfigError
from ._cuda import cuda_status
from ._dtcomm import (
    CommTimeoutError,
    Communicator,
    DeviceError,
    DtcommError,
    MismatchError,
    NativeClient,
    PeerLostError,
    RdzvConnectError,
    RdzvError,
    RdzvEvent,
    RdzvJobEndedError,
    RdzvLostError,
    RdzvRefusedError,
    RdzvServer,
    RdzvTimeoutError,
    RoundEndedError,
    SetupError,
    ShutdownError,
    StoreClient,
    Welcome,
    __version__,
    job_token,
)
from ._install import get_include, get_lib
from ._install import warn_if_duplicated as _warn_if_duplicated
from ._vocab import AVG, MAX, MIN, PROD, SUM, ReduceOp
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
    "NativeClient",
    "PeerLostError",
    "RoundEndedError",
    "RdzvConnectError",
    "RdzvError",
    "RdzvEvent",
    "RdzvJobEndedError",
    "RdzvLostError",
    "RdzvRefusedError",
    "RdzvServer",
    "RdzvTimeoutError",
    "ReduceOp",
    "SetupError",
    "ShutdownError",
    "DeviceError",
    "StoreClient",
    "Welcome",
    "Work",
    "__version__",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "barrier",
    "broadcast",
    "communicator",
    "cuda_status",
    "debug",
    "elastic",
    "gather",
    "get_include",
    "get_lib",
    "init",
    "is_initialized",
    "job_token",
    "local_rank",
    "local_size",
    "rank",
    "recv",
    "recv_any",
    "reduce",
    "reduce_scatter",
    "scatter",
    "send",
    "shutdown",
    "size",
]

# A wheel and an editable build both on sys.path: name both (only the first is used).
_warn_if_duplicated()

# A torch script that imports dtcomm gets the `dtcomm://` rendezvous (init_process_group(...,
# init_method="dtcomm://"): ranks and store by dtcomm's launch rules, e.g. under srun). torch
# stays optional: only registered when torch.distributed is loaded already; importing
# dtcomm.torch_backend registers it too, with the backend itself (torch's device map and
# backend type tables know dtcomm from then on).
if "torch.distributed" in __import__("sys").modules:
    # the backend too (its device map and type in torch's tables) and the rendezvous
    from .torch_backend import register as _register_torch

    _register_torch()
