"""Per-rank data and numpy's answers for the collective tests (imported by worker scripts)."""

from __future__ import annotations

import numpy as np

DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int32", "int64"]
OPS = {1: "sum", 2: "prod", 3: "min", 4: "max", 5: "avg"}
# Counts: empty, one element, fewer than ranks, odd, above the tree threshold (ring path).
COUNTS = [0, 1, 2, 7, 9001]


def data(rank: int, n: int, dtype: str, seq: int = 0) -> np.ndarray:
    """Small non-negative integers, so every reduction is exact in every dtype and order."""
    rng = np.random.default_rng(1000 * rank + seq)
    return rng.integers(0, 3, size=n).astype(dtype)


def reduced(world: int, n: int, dtype: str, op: int, seq: int = 0) -> np.ndarray:
    xs = np.stack([data(r, n, dtype, seq) for r in range(world)])
    d = np.dtype(dtype)
    if op == 1:
        return np.add.reduce(xs, axis=0, dtype=d)
    if op == 2:
        return np.multiply.reduce(xs, axis=0, dtype=d)
    if op == 3:
        return xs.min(axis=0)
    if op == 4:
        return xs.max(axis=0)
    s = np.add.reduce(xs, axis=0, dtype=d)
    if d.kind in "iu":
        return (s // world).astype(d)
    return (s / world).astype(d)
