"""``hvd.sparse_allreduce_async``: a sparse COO tensor "allreduced" as Horovod does it, by
allgathering every rank's indices and values (names ``<name>.indices`` / ``<name>.values``).
The result holds every rank's entries (uncoalesced: an index present on several ranks appears
once per rank, so it sums when coalesced); with ``Average`` the values are divided by the
number of ranks (of the process set, when one is given)."""

from __future__ import annotations

import torch

from . import _core
from .process_sets import ProcessSet


class SparseAllreduceHandle:
    """What :func:`sparse_allreduce_async` returns: call it (or pass it to
    ``hvd.synchronize``) for the reduced sparse tensor; ``hvd.poll`` works on it."""

    def __init__(self, tensor: torch.Tensor, indices: int, values: int, op: int,
                 ranks: int) -> None:
        self._ranks = ranks
        self._size = tensor.size()
        self._dtype = tensor.dtype
        self._indices = indices
        self._values = values
        self._op = op
        self._result: torch.Tensor | None = None

    def poll(self) -> bool:
        """Whether both allgathers have completed."""
        if self._result is not None:
            return True
        return _core.poll(self._indices) and _core.poll(self._values)

    def __call__(self) -> torch.Tensor:
        """Waits for both allgathers; the sparse tensor of every rank's entries."""
        if self._result is None:
            values = _core.synchronize(self._values)
            indices = _core.synchronize(self._indices)
            if self._op == _core.Average:
                values = values / self._ranks
            self._result = torch.sparse_coo_tensor(indices.transpose(0, 1), values, self._size,
                                                   check_invariants=True)
        return self._result


def sparse_allreduce_async(tensor: torch.Tensor, name: str | None, op: int | None,
                           process_set: ProcessSet | None = None) -> SparseAllreduceHandle:
    """Starts the allgathers of ``tensor``'s indices and values (``op``: ``Average``, the
    default, or ``Sum``); returns a callable handle."""
    if not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async needs a sparse COO tensor")
    o = _core.Average if op is None else op
    if o not in (_core.Average, _core.Sum):
        raise ValueError("sparse_allreduce_async supports only Average and Sum")
    base = name if name is not None else _core._group_names("sparse", None, 1, process_set)[0]
    # Allgather concatenates along dimension 0: indices travel as (nnz, sparse_dims).
    hi = _core.allgather_async(tensor._indices().transpose(0, 1).contiguous(),
                               name=f"{base}.indices", process_set=process_set)
    hv = _core.allgather_async(tensor._values().contiguous(), name=f"{base}.values",
                               process_set=process_set)
    return SparseAllreduceHandle(tensor, hi, hv, o, _core._group(process_set).size)
