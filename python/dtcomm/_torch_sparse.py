"""Sparse COO ``all_reduce`` for the torch backend, as gloo does it: gathered and coalesced."""

from __future__ import annotations

import math

import torch

from . import _dtcomm


def sparse_sum(comm: _dtcomm.Communicator, size: int, t: torch.Tensor) -> torch.Tensor:
    """The sum over the ranks of the coalesced sparse COO tensor ``t`` (blocking calls)."""
    idx, val = t.indices().contiguous(), t.values().contiguous()
    nnz = torch.tensor([idx.shape[1]], dtype=torch.int64)
    all_nnz = torch.empty(size, dtype=torch.int64)
    comm.all_gather(nnz, all_nnz)
    counts = [int(n) for n in all_nnz]
    per_idx = idx.shape[0]
    per_val = math.prod(val.shape[1:])
    idx_out = torch.empty(per_idx * sum(counts), dtype=idx.dtype)
    comm.all_gather(idx.reshape(-1), idx_out, [c * per_idx for c in counts])
    val_out = torch.empty(per_val * sum(counts), dtype=val.dtype)
    comm.all_gather(val.reshape(-1), val_out, [c * per_val for c in counts])
    # each rank's indices arrive as its own (sparse_dim, nnz) block
    blocks = [b.view(per_idx, -1) for b in idx_out.split([c * per_idx for c in counts])]
    indices = torch.cat(blocks, dim=1) if blocks else idx
    values = val_out.view(sum(counts), *val.shape[1:])
    return torch.sparse_coo_tensor(indices, values, t.shape).coalesce()
