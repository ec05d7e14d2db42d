"""The vocabulary every front end shares: reduce operators and element types, valued as the
native module (``dtcomm._dtcomm``) takes them, with the conversions from numpy, torch,
``torch.distributed`` and Horovod.

numpy and torch stay optional: only the conversion that needs one imports it.
"""

from __future__ import annotations

import enum
import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch


class ReduceOp(enum.IntEnum):
    """How a reduction combines elements. ``AVG`` is a sum divided by the world size
    (integer division for integer dtypes). ``BAND``/``BOR``/``BXOR`` are bitwise, for integer
    and bool buffers only; complex buffers have no ``MIN``/``MAX`` and bool ones no ``AVG``
    (the engine refuses those on every rank before anything is sent)."""

    # The value is the engine's number (``Communicator.all_reduce(op=...)``).
    SUM = 1
    PROD = 2
    MIN = 3
    MAX = 4
    AVG = 5
    BAND = 6
    BOR = 7
    BXOR = 8

    @property
    def engine_name(self) -> str:
        """The engine's name of the operator (``"sum"``, ``"prod"``, ``"min"``, ``"max"``,
        ``"avg"``, ``"band"``, ``"bor"``, ``"bxor"``): what ``Negotiator.submit(op=...)``
        takes."""
        return self.name.lower()

    @property
    def is_bitwise(self) -> bool:
        """Whether this is ``BAND``, ``BOR`` or ``BXOR``."""
        return self in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)

    @property
    def horovod(self) -> int:
        """Horovod's number of the operator (``hvd.Sum`` ...; ``AVG`` is ``hvd.Average``).
        Raises ``ValueError`` for the bitwise ones, which Horovod does not have."""
        code = _TO_HOROVOD.get(self)
        if code is None:
            raise ValueError(f"Horovod has no reduce op {self.name}")
        return code

    @classmethod
    def from_horovod(cls, code: int) -> ReduceOp:
        """The operator of Horovod's number ``code`` (``hvd.Average``: ``AVG``). Raises
        ``NotImplementedError`` for ``hvd.Adasum``, ``ValueError`` for an unknown number."""
        if code == HOROVOD_ADASUM:
            raise NotImplementedError("Adasum is not supported by dtcomm's Horovod API")
        op = _FROM_HOROVOD.get(code)
        if op is None:
            raise ValueError(f"unknown reduce op {code}")
        return op

    @classmethod
    def from_torch(cls, op: Any) -> ReduceOp:
        """The operator of a ``torch.distributed.ReduceOp`` (or ``RedOpType``). Raises
        ``ValueError`` for the others (``PREMUL_SUM``)."""
        for theirs, ours in _torch_ops():
            if op == theirs:
                return ours
        raise ValueError(f"dtcomm does not support reduce op {op} (PREMUL_SUM is NCCL-only)")


SUM, PROD, MIN, MAX, AVG = ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG

#: Horovod's number of Adasum, which has no operator here.
HOROVOD_ADASUM = 2
# Horovod's numbers (``horovod.common.basics``): Average 0, Sum 1, Adasum 2, Min 3, Max 4,
# Product 5.
_TO_HOROVOD: dict[ReduceOp, int] = {AVG: 0, SUM: 1, MIN: 3, MAX: 4, PROD: 5}
_FROM_HOROVOD: dict[int, ReduceOp] = {code: op for op, code in _TO_HOROVOD.items()}


@functools.cache
def _torch_ops() -> tuple[tuple[Any, ReduceOp], ...]:
    """``torch.distributed.ReduceOp``'s operators and ours (torch imported on first use)."""
    import torch.distributed as dist

    theirs = dist.ReduceOp
    return (
        (theirs.SUM, SUM),
        (theirs.PRODUCT, PROD),
        (theirs.MIN, MIN),
        (theirs.MAX, MAX),
        (theirs.AVG, AVG),
        (theirs.BAND, ReduceOp.BAND),
        (theirs.BOR, ReduceOp.BOR),
        (theirs.BXOR, ReduceOp.BXOR),
    )


class DType(enum.Enum):
    """An element type the engine carries. The value is the engine's name of it (what
    ``Negotiator.submit(dtype=...)`` and ``Communicator.all_reduce_algo`` take), which is also
    the name of the numpy and torch dtypes (numpy has no bfloat16). Complex numbers are two
    floats, real part first; a bool is one byte, 0 or 1."""

    FLOAT32 = "float32"
    FLOAT64 = "float64"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    INT8 = "int8"
    UINT8 = "uint8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    COMPLEX64 = "complex64"
    COMPLEX128 = "complex128"
    BOOL = "bool"

    @classmethod
    def from_numpy(cls, dtype: Any) -> DType:
        """The element type of a numpy dtype (or anything ``numpy.dtype`` takes). Raises
        ``ValueError`` for one the engine does not carry."""
        import numpy as np

        dt = np.dtype(dtype)
        try:
            return cls(dt.name)
        except ValueError:
            raise ValueError(f"unsupported numpy dtype {dt}") from None

    @classmethod
    def from_torch(cls, dtype: torch.dtype) -> DType:
        """The element type of a torch dtype. Raises ``ValueError`` (``unsupported tensor dtype
        ...``) for one the engine does not carry."""
        try:
            return _from_torch()[dtype]
        except KeyError:
            raise ValueError(f"unsupported tensor dtype {dtype}") from None

    @property
    def torch_dtype(self) -> torch.dtype:
        """The torch dtype (torch imported on first use)."""
        import torch

        dt: torch.dtype = getattr(torch, self.value)
        return dt

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        """The numpy dtype whose elements hold this type's bytes: the same type, or int16 for
        bfloat16 (numpy has none; view the torch tensor made from it as bfloat16)."""
        import numpy as np

        return np.dtype(np.int16 if self is DType.BFLOAT16 else self.value)


@functools.cache
def _from_torch() -> dict[torch.dtype, DType]:
    import torch

    return {getattr(torch, d.value): d for d in DType}
