"""``dtcomm.cuda_status()``: whether this process can use a GPU, and if not, why.

The probe is the engine's (``dtcomm::cuda::cuda_status``, see ``docs/cuda.md``): the CUDA
driver ``libcuda.so.1`` (opened, ``cuDriverGetVersion``, ``cuInit``, ``cuDeviceGetCount``) and
NCCL ``libnccl.so.2`` (``dtcomm-nccl-sys``'s search: ``DTCOMM_NCCL_LIBRARY``, the one already
loaded by torch, ``DTCOMM_NCCL_SEARCH_PATH``, ``$VIRTUAL_ENV`` or else ``sys.prefix``, the
system). Nothing is imported from torch.
"""

from __future__ import annotations

import sys
from typing import TypedDict, cast

from . import _dtcomm

__all__ = ["CudaStatus", "LibStatus", "cuda_status"]


class LibStatus(TypedDict):
    """What was found of one library (``"driver"``: ``libcuda.so.1``; ``"nccl"``)."""

    found: bool
    """Loaded (for the driver: opened and has the functions dtcomm calls)."""
    path: str | None
    """The file it was mapped from."""
    version: str | None
    """NCCL's ``"2.30.7"``; the driver's newest supported CUDA, ``"12.8"``."""
    source: str | None
    """How it was found: ``"DTCOMM_NCCL_LIBRARY"``, ``"already loaded"``,
    ``"DTCOMM_NCCL_SEARCH_PATH"``, ``"VIRTUAL_ENV"``, ``"python prefix"``, ``"system"``."""
    error: str | None
    """Why it is not usable: the load error, or a failed driver call."""
    features: list[str]
    """NCCL's optional functions this library has (``"ncclCommSplit"``, ...)."""
    tried: list[str]
    """NCCL: the places tried before the one that worked (or all of them), ``step: place: why``."""


class CudaStatus(TypedDict):
    """The answer of :func:`cuda_status`."""

    usable: bool
    """A driver, at least one device, and NCCL."""
    reason: str | None
    """Why not usable: every problem found, joined by ``"; "``."""
    device_count: int | None
    """``cuDeviceGetCount``; ``0`` when the driver sees no GPU, ``None`` when not asked."""
    built_with_cuda: bool
    """The native module was built with the cargo feature ``cuda`` (wheels are)."""
    cuda_api: str | None
    """The CUDA driver API version dtcomm was built against (``"12.8"``)."""
    driver: LibStatus
    nccl: LibStatus


def _lib(reason: str) -> LibStatus:
    return {
        "found": False,
        "path": None,
        "version": None,
        "source": None,
        "error": reason,
        "features": [],
        "tried": [],
    }


def _failed(reason: str) -> CudaStatus:
    return {
        "usable": False,
        "reason": reason,
        "device_count": None,
        "built_with_cuda": False,
        "cuda_api": None,
        "driver": _lib(reason),
        "nccl": _lib(reason),
    }


def cuda_status() -> CudaStatus:
    """Whether this process can use a GPU through dtcomm, and everything found on the way.

    Returns a dict (see :class:`CudaStatus`), for example on a machine without a GPU::

        {"usable": False,
         "reason": "libcuda.so.1 not found: no NVIDIA driver on this machine (dlopen: ...)",
         "device_count": None, "built_with_cuda": True, "cuda_api": "12.8",
         "driver": {"found": False, "error": "libcuda.so.1 not found: ...", ...},
         "nccl": {"found": True, "version": "2.30.7", "source": "VIRTUAL_ENV",
                  "path": ".../site-packages/nvidia/nccl/lib/libnccl.so.2",
                  "features": ["ncclCommSplit", ...], ...}}

    Never raises: whatever goes wrong is in ``reason`` and the libraries' ``error``. Each call
    probes again (cheap; the libraries stay loaded once found).
    """
    try:
        # The engine's dict has CudaStatus's keys (the stub can only say dict[str, Any]).
        return cast(CudaStatus, _dtcomm.cuda_status(sys.prefix))
    except Exception as e:  # noqa: BLE001  (the contract is an answer, not an exception)
        return _failed(f"dtcomm.cuda_status failed: {type(e).__name__}: {e}")
