"""A torch ``new_group``'s identity in dtcomm's flight recorder (``docs/flight-recorder.md``).

A dtcomm group that torch builds for ``new_group`` would record as group 0 with group-local
ranks. :func:`name_group` tells the recorder what it is instead: each member's global rank
(exchanged once through the group's own store, before the group's first call) and a group id
every member derives alike: a hash of the sorted global ranks and of how many groups of those
ranks this process made before (torch makes every rank create groups in the same order), below
2^53 so that JSON readers keep it exact.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch.distributed as dist

from . import _dtcomm

#: Larger groups are left as they are (the exchange is one store read per member).
MAX_NAMED_GROUP = 4096

_made: dict[tuple[int, ...], int] = {}


def group_id(global_ranks: list[int], made_before: int) -> int:
    """The recorder's id of the ``made_before``-th earlier group of ``global_ranks`` (not 0,
    below 2^53)."""
    key = f"{sorted(global_ranks)}/{made_before}".encode()
    h = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
    return (h & ((1 << 53) - 1)) or 1


def name_group(comm: _dtcomm.Communicator, store: Any, rank: int, size: int) -> bool:
    """Names ``comm`` (rank ``rank`` of ``size`` of a torch subgroup, whose store is ``store``)
    in the recorder; returns whether it did. The world group (built before torch counts itself
    initialised) keeps group 0."""
    if not dist.is_initialized() or size > MAX_NAMED_GROUP or size < 1:
        return False
    store.set(f"dtcomm/flight/global/{rank}", str(dist.get_rank()))
    ranks = [int(store.get(f"dtcomm/flight/global/{r}")) for r in range(size)]
    key = tuple(sorted(ranks))
    made = _made.get(key, 0)
    _made[key] = made + 1
    return comm.set_flight_group(group_id(ranks, made), ranks)
