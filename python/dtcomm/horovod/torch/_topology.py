"""Where this rank is (``rank``, ``size``, ``local_*``, ``cross_*``, ``is_homogeneous``) and
what this build of Horovod's API has (``mpi_built`` ... ``rocm_built``)."""

from __future__ import annotations

import dtcomm

from ._state import _Cross, _n, rt


def rank() -> int:
    """This process's rank."""
    _n()
    return dtcomm.rank()


def size() -> int:
    """Ranks in the job."""
    _n()
    return dtcomm.size()


def local_rank() -> int:
    """Rank among the processes of this host."""
    _n()
    return dtcomm.local_rank()


def local_size() -> int:
    """Processes on this host."""
    _n()
    return dtcomm.local_size()


def _x() -> _Cross:
    _n()
    if rt.cross is None:
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    return rt.cross


def cross_rank() -> int:
    """This rank's index among the ranks of the same local rank (one per host)."""
    return _x().rank


def cross_size() -> int:
    """Ranks of this rank's local rank across hosts (the hosts, when every host runs as many)."""
    return _x().size


def is_homogeneous() -> bool:
    """Whether every host runs the same number of processes."""
    return _x().homogeneous


def mpi_built() -> bool:
    """False: dtcomm does not use MPI."""
    return False


def mpi_enabled() -> bool:
    """False: dtcomm does not use MPI."""
    return False


def mpi_threads_supported() -> bool:
    """False: dtcomm does not use MPI."""
    return False


def gloo_built() -> bool:
    """True: CPU collectives (dtcomm's TCP and shared-memory engine take gloo's place)."""
    return True


def gloo_enabled() -> bool:
    """True: CPU collectives run on dtcomm's engine."""
    return True


def nccl_built() -> int:
    """0: CUDA tensors are not carried by this front end yet."""
    return 0


def ddl_built() -> bool:
    """False."""
    return False


def ccl_built() -> bool:
    """False."""
    return False


def cuda_built() -> bool:
    """False: CUDA tensors are not carried by this front end yet."""
    return False


def rocm_built() -> bool:
    """False."""
    return False
