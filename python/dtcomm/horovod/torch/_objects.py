"""Whole objects over the collectives: ``broadcast_parameters`` (a state dict or named
parameters, in place), ``broadcast_object`` and ``allgather_object`` (dtcomm's code-free
format, never pickles)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from dtcomm import _state_codec

from ._collectives import allgather, broadcast_, broadcast_async_, synchronize
from ._topology import rank
from .process_sets import ProcessSet


def broadcast_parameters(params: dict[str, Any] | Iterable[tuple[str, Any]], root_rank: int,
                         prefix: str | None = None,
                         process_set: ProcessSet | None = None) -> None:
    """Broadcasts a ``state_dict()`` or ``named_parameters()`` from ``root_rank`` in place."""
    items: Iterable[tuple[str, Any]]
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or hasattr(params, "__iter__"):
        items = list(params)
    else:
        raise ValueError(f"invalid params of type: {type(params)}")
    handles = []
    for name, p in items:
        if isinstance(p, torch.Tensor):
            t = p.data if isinstance(p, torch.nn.Parameter) else p
            handles.append(broadcast_async_(t, root_rank, name=f"{prefix or ''}{name}",
                                            process_set=process_set))
    for h in handles:
        synchronize(h)


_TENSOR = "__dtcomm_torch_tensor__"


def _to_wire(v: Any) -> Any:
    """Torch tensors as tagged numpy arrays (the state codec carries numpy, not torch)."""
    if isinstance(v, torch.Tensor):
        t = v.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return (_TENSOR, "bfloat16", t.view(torch.int16).numpy())
        return (_TENSOR, str(t.dtype), t.numpy())
    if isinstance(v, dict):
        return {k: _to_wire(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        out = [_to_wire(x) for x in v]
        return out if isinstance(v, list) else tuple(out)
    return v


def _from_wire(v: Any) -> Any:
    """The inverse of :func:`_to_wire`."""
    if isinstance(v, tuple) and len(v) == 3 and v[0] == _TENSOR:
        t = torch.from_numpy(np.array(v[2]))
        return t.view(torch.bfloat16) if v[1] == "bfloat16" else t
    if isinstance(v, dict):
        return {k: _from_wire(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        out = [_from_wire(x) for x in v]
        return out if isinstance(v, list) else tuple(out)
    return v


def _encode(obj: Any) -> bytes:
    """``obj`` in dtcomm's code-free format."""
    # Never pickle: what other ranks send is only parsed (dtcomm._state_codec: JSON with numpy
    # arrays, bytes and tuples), so a payload cannot run code.
    return _state_codec.encode(_to_wire(obj))


def _decode(data: bytes) -> Any:
    """The object :func:`_encode` made ``data`` of."""
    return _from_wire(_state_codec.decode(data))


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None,
                     process_set: ProcessSet | None = None) -> Any:
    """Returns ``root_rank``'s ``obj`` on every rank. Objects travel in dtcomm's code-free
    format (None, numbers, strings, bytes, lists, tuples, sets, dicts, numpy arrays, torch
    tensors), never as pickles."""
    name = name or type(obj).__name__
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(_encode(obj)), dtype=torch.uint8)
        sz = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        sz = torch.tensor([0], dtype=torch.int64)
    sz = broadcast_(sz, root_rank, name=f"{name}.sz", process_set=process_set)
    if rank() != root_rank:
        payload = torch.zeros(int(sz.item()), dtype=torch.uint8)
    payload = broadcast_(payload, root_rank, name=f"{name}.t", process_set=process_set)
    return _decode(payload.numpy().tobytes())


def allgather_object(obj: Any, name: str | None = None,
                     process_set: ProcessSet | None = None) -> list[Any]:
    """Every rank's ``obj``, in rank order (same format as :func:`broadcast_object`)."""
    name = name or type(obj).__name__
    data = _encode(obj)
    sizes = allgather(torch.tensor([len(data)], dtype=torch.int64), name=f"{name}.sz",
                      process_set=process_set).tolist()
    blob = allgather(torch.frombuffer(bytearray(data), dtype=torch.uint8), name=f"{name}.t",
                     process_set=process_set)
    out, at = [], 0
    for sz in sizes:
        out.append(_decode(blob[at:at + sz].numpy().tobytes()))
        at += sz
    return out
