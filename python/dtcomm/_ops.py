"""Reduction operators, numbered as the engine numbers them."""

from __future__ import annotations

import enum


class ReduceOp(enum.IntEnum):
    """How a reduction combines elements. ``AVG`` is a sum divided by the world size
    (integer division for integer dtypes)."""

    SUM = 1
    PROD = 2
    MIN = 3
    MAX = 4
    AVG = 5


SUM, PROD, MIN, MAX, AVG = ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG
