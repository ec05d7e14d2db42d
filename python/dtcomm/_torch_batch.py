"""``batch_isend_irecv`` for the torch backend: one order of a batch's point-to-point calls
that every pair of ranks agrees on.

dtcomm runs a group's calls one after the other, so a batch issued in the user's order can
hang: two ranks that both receive first wait for each other forever. torch brackets a batch
with ``start_coalescing``/``end_coalescing`` when the backend supports coalescing; the
backend records the batch and issues it at the end ordered by (peer, direction, tag, position):

* peers in ascending order: every rank walks the edges of the exchange graph in one global
  order (lower rank of the pair first), so no cycle of waits can form;
* with one peer, the lower rank sends first and the higher rank receives first;
* within one direction, by tag and then by position in the batch, so the n-th send of a tag
  meets the n-th receive of that tag (the engine's messages carry no tag).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import _dtcomm
from ._torch_work import DtcommWork


@dataclass
class _Op:
    kind: str  # "send" or "recv"
    tensor: torch.Tensor
    peer: int
    tag: int
    position: int
    work: DtcommWork


@dataclass
class P2pBatch:
    """The isend/irecv calls recorded between start and end of one batch."""

    rank: int
    ops: list[_Op] = field(default_factory=list)
    # Works of collectives issued inside the region (run at once, covered by the end's Work)
    others: list[DtcommWork] = field(default_factory=list)

    def add(self, kind: str, tensor: torch.Tensor, peer: int, tag: int,
            work: DtcommWork) -> DtcommWork:
        """Records one call; its Work completes when the batch issued it and it finished."""
        if peer == self.rank:
            raise ValueError(f"rank {self.rank}: batch_isend_irecv: {kind} with itself")
        self.ops.append(_Op(kind, tensor, peer, tag, len(self.ops), work))
        return work

    def tensors(self) -> list[torch.Tensor]:
        return [op.tensor for op in self.ops]

    def order(self) -> list[_Op]:
        """The order both ends of every pair agree on (see the module's docs)."""

        def key(op: _Op) -> tuple[int, int, int, int]:
            sends_first = self.rank < op.peer
            direction = 0 if (op.kind == "send") == sends_first else 1
            return (op.peer, direction, op.tag, op.position)

        return sorted(self.ops, key=key)

    def issue(self, comm: _dtcomm.Communicator, total: DtcommWork) -> None:
        """Queues every call in :meth:`order`; ``total`` completes when all of them did."""
        ops = self.order()
        total.expect(len(ops) + len(self.others))
        for other in self.others:
            other.on_done(total.callback)
        for op in ops:
            op.work.expect(1)

            def done(exc: BaseException | None, op: _Op = op) -> None:
                op.work.callback(exc)
                total.callback(exc)

            call = comm.send if op.kind == "send" else comm.recv
            native = call(op.tensor, op.peer, callback=done)
            op.work.add(native)
            total.add(native)
