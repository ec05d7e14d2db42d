"""The torch backend's tensor lists and strided tensors, with gloo's rules (issue 44).

* Several tensors per rank in one call, as ``ProcessGroupGloo`` takes them: ``all_reduce``
  reduces every tensor of every rank into one result that every tensor receives;
  ``broadcast`` sends the root's ``tensors[opts.rootTensor]`` into every tensor of every rank;
  ``all_gather`` with ``k`` inputs fills each of its ``k`` output lists with ``world * k``
  tensors, rank-major; sparse ``all_reduce`` sums them all. ``reduce``, ``gather``,
  ``scatter``, ``send`` and ``recv`` take one tensor, as gloo does.
* Strided (non-contiguous) tensors go through one contiguous staging buffer, and the result is
  copied back into the view; a contiguous tensor is used as it is.
* Bad input is refused before anything is sent, naming the rank, the call, the tensor and the
  rule: a list whose tensors differ in dtype, device or shape, outputs that overlap (each other
  or themselves), a reduction the dtype does not have. The checks look only at this rank's
  own arguments, so ranks that pass alike refuse alike and no peer is left waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._vocab import ReduceOp

#: ``torch._debug_has_internal_overlap``'s answer for a tensor some of whose elements share
#: memory (an ``expand``ed tensor); 2 ("too hard") is a strided view that may not.
_OVERLAP_YES = 1


def refuse(rank: int, op: str, what: str) -> ValueError:
    """The error of a refused call: ``rank R: OP: WHAT``."""
    return ValueError(f"rank {rank}: {op}: {what}")


def one(rank: int, op: str, tensors: Sequence[Any], what: str = "tensor") -> None:
    """gloo's rule for the calls that take a single tensor."""
    if len(tensors) != 1:
        raise refuse(rank, op, f"takes a single-element {what} list (as gloo), got "
                     f"{len(tensors)}")


def alike(rank: int, op: str, tensors: Sequence[torch.Tensor], name: str = "tensors",
          shape: bool = True) -> None:
    """Every tensor of one call has the first one's dtype, device and (with ``shape``)
    shape; the list is not empty."""
    if not tensors:
        raise refuse(rank, op, f"{name} is empty: needs at least one tensor")
    t0 = tensors[0]
    for i, t in enumerate(tensors[1:], 1):
        for rule, mine, first in (("dtype", t.dtype, t0.dtype), ("device", t.device, t0.device),
                                  ("shape", tuple(t.shape), tuple(t0.shape))):
            if rule == "shape" and not shape:
                continue
            if mine != first:
                raise refuse(rank, op, f"{name}[{i}] has {rule} {mine} but {name}[0] has "
                             f"{first}: every tensor of one call must have one {rule}")


def reduction(rank: int, op: str, redop: ReduceOp, tensors: Sequence[torch.Tensor]) -> None:
    """The reductions a dtype lacks, refused here too (a list is reduced locally first):
    complex ``MIN``/``MAX``, bitwise ops on floating or complex tensors, ``AVG`` of bool."""
    dt = tensors[0].dtype
    bad = None
    if dt.is_complex and redop in (ReduceOp.MIN, ReduceOp.MAX):
        bad = "complex numbers have no order"
    elif redop.is_bitwise and (dt.is_floating_point or dt.is_complex):
        bad = "bitwise reductions take integer and bool tensors only"
    elif dt == torch.bool and redop is ReduceOp.AVG:
        bad = "bool tensors have no average"
    if bad is not None:
        raise refuse(rank, op, f"{redop.name} of tensors[0] ({dt}) refused: {bad}")


def no_overlap(rank: int, op: str, outputs: Sequence[torch.Tensor],
               name: str = "outputs") -> None:
    """No output shares memory with itself (an ``expand``ed view) or with another output:
    the result of writing into it would depend on the order of the copies. Outputs on
    distinct storages (the usual case) cost one dictionary entry each; views of one storage
    are compared element by element."""
    by_storage: dict[tuple[str, int], list[int]] = {}
    for i, t in enumerate(outputs):
        if t.is_sparse or t.numel() == 0:
            continue
        if torch._debug_has_internal_overlap(t) == _OVERLAP_YES:
            raise refuse(rank, op, f"{name}[{i}] overlaps itself (shape {tuple(t.shape)}, "
                         f"strides {t.stride()}): an output must not share memory")
        key = (str(t.device), t.untyped_storage().data_ptr())
        by_storage.setdefault(key, []).append(i)
    for idx in by_storage.values():
        if len(idx) > 1:
            _shared_storage(rank, op, [outputs[i] for i in idx], idx, name)


def _shared_storage(rank: int, op: str, views: list[torch.Tensor], idx: list[int],
                    name: str) -> None:
    """Views of one storage. Contiguous ones are byte ranges (sorted and compared with their
    neighbours); with a strided one among them, each view marks its own elements in a table
    of owners over the storage (work in proportion to the storage and the views' sizes)."""
    sizes = {v.element_size() for v in views}
    if all(v.is_contiguous() for v in views):
        spans = sorted((v.storage_offset() * v.element_size(),
                        (v.storage_offset() + v.numel()) * v.element_size(), i)
                       for v, i in zip(views, idx, strict=True))
        for (_, end, i), (start, _, j) in zip(spans, spans[1:], strict=False):
            if start < end:
                raise refuse(rank, op, f"{name}[{j}] overlaps {name}[{i}]: outputs must not "
                             "share memory")
        return
    unit = sizes.pop() if len(sizes) == 1 else 1  # table entries: elements, or bytes
    owner = torch.full((views[0].untyped_storage().nbytes() // unit,), -1, dtype=torch.int32,
                       device=views[0].device)
    for v, i in zip(views, idx, strict=True):
        per = v.element_size() // unit
        shape, stride = tuple(v.shape), tuple(x * per for x in v.stride())
        if per > 1:
            shape, stride = (*shape, per), (*stride, 1)
        mine = owner.as_strided(shape, stride, v.storage_offset() * per)
        taken = mine[mine >= 0]
        if taken.numel():
            raise refuse(rank, op, f"{name}[{i}] overlaps {name}[{int(taken[0])}]: outputs "
                         "must not share memory")
        mine.fill_(i)


def staged(t: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None] | None]:
    """``t``'s contiguous form and the copy back into ``t`` that finishes the call (None, and
    ``t`` itself, when ``t`` is contiguous already)."""
    d = t.detach()
    if d.is_contiguous():
        return d, None
    s = d.contiguous()

    def back() -> None:
        d.copy_(s)

    return s, back


def dense_input(t: torch.Tensor) -> torch.Tensor:
    """``t`` as the engine reads it: contiguous (one copy when strided)."""
    d = t.detach()
    return d if d.is_contiguous() else d.contiguous()


def fold(redop: ReduceOp, acc: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    """Reduces ``tensors`` into ``acc`` in place with ``redop`` (gloo's local step before the
    ranks exchange: bool ``SUM`` is logical or, ``PROD`` logical and)."""
    boolean = acc.dtype == torch.bool
    for t in tensors:
        x = t.detach().reshape(acc.shape)
        if redop in (ReduceOp.SUM, ReduceOp.AVG):
            acc.logical_or_(x) if boolean else acc.add_(x)
        elif redop is ReduceOp.PROD:
            acc.logical_and_(x) if boolean else acc.mul_(x)
        elif redop is ReduceOp.MIN:
            torch.minimum(acc, x, out=acc)
        elif redop is ReduceOp.MAX:
            torch.maximum(acc, x, out=acc)
        elif redop is ReduceOp.BAND:
            acc.bitwise_and_(x)
        elif redop is ReduceOp.BOR:
            acc.bitwise_or_(x)
        else:
            acc.bitwise_xor_(x)


def spread(src: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    """Copies ``src`` (contiguous, ``tensors[0]``'s element count) into every tensor,
    strided ones included."""
    for t in tensors:
        d = t.detach()
        if d.data_ptr() != src.data_ptr() or not d.is_contiguous():
            d.copy_(src.view(d.shape))
