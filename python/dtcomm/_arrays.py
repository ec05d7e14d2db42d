"""Output buffers of the same kind as the input: a numpy array for a numpy array, a torch
tensor for a torch tensor. Neither library is imported unless the caller already uses it."""

from __future__ import annotations

from typing import Any


def is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def plain(x: Any) -> Any:
    """A view the engine can export: torch tensors that require grad are detached (same
    memory); everything else as is."""
    if getattr(x, "requires_grad", False):
        return x.detach()
    return x


def empty(like: Any, shape: tuple[int, ...]) -> Any:
    """An uninitialised buffer of `like`'s kind, dtype and device with `shape`."""
    if is_torch(like):
        import torch

        return torch.empty(shape, dtype=like.dtype, device=like.device)
    import numpy as np

    return np.empty(shape, dtype=like.dtype)


def shape(x: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in x.shape)
