"""dtcomm as a ``torch.distributed`` backend for CPU and CUDA tensors.

``init_process_group("dtcomm")`` finds it through the ``torch.distributed.backends`` entry
point (``register``), so scripts need no ``import dtcomm``. Each process group (WORLD and every
``new_group``) gets its own native communicator, built through the store torch hands the
creator. Every call is queued to dtcomm's worker thread in order and returns a
:class:`DtcommWork`; the tensors are used in place (DLPack, zero copy).

CUDA tensors go to the engine's device path (NCCL when every rank can use it, else host
staging; ``docs/device-buffers.md``) on torch's current stream: the call is ordered after the
work queued on it, and work queued on it afterwards sees the result, without the host waiting.
Nothing here calls ``torch.cuda`` unless a tensor is on a CUDA device.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend

from . import _dtcomm, _progress, _threads
from . import _torch_lists as lists
from ._threads import fit_torch_threads
from ._torch_batch import P2pBatch
from ._torch_flight import name_group
from ._torch_monitored import monitored_barrier
from ._torch_sparse import sparse_sum
from ._torch_work import DtcommWork, patch_work_is_completed, set_source, torch_words
from ._vocab import ReduceOp

NAME = "dtcomm"
DEVICES = ["cpu", "cuda"]
_TORCH_DEFAULT_TIMEOUT = timedelta(minutes=30)
#: Longest ``shutdown()`` waits for the other ranks to leave too.
FAREWELL = 5.0


def _redop(rank: int, op: Any) -> ReduceOp:
    """The engine's operator (the engine refuses one the tensor's dtype does not have)."""
    try:
        return ReduceOp.from_torch(op)
    except ValueError as e:
        raise ValueError(f"rank {rank}: {e}") from None


def cuda_stream(tensors: list[torch.Tensor]) -> Any:
    """torch's current stream of the first CUDA tensor's device, or None for CPU tensors (so
    ``torch.cuda`` is only touched when a tensor is on a CUDA device)."""
    for t in tensors:
        if t.device.type == "cuda":
            return torch.cuda.current_stream(t.device)
    return None


def _rank0_hosts(store: Any) -> bool:
    """Whether ``store`` is a client of the TCPStore that rank 0's process hosts by torch's
    ``env://`` rule (``MASTER_ADDR``/``MASTER_PORT``, no torchrun agent store): gone when
    rank 0 destroys its group, new at its next init."""
    from . import _config, _torch_rendezvous

    try:
        under = store
        while isinstance(under, dist.PrefixStore):
            under = under.underlying_store
        if not isinstance(under, dist.TCPStore) or under.port in _torch_rendezvous.met_ports:
            return False
        cfg = _config.resolve()
    except Exception:  # noqa: BLE001 - launch variables that do not resolve: no such rule
        return False
    return bool(cfg.rank0_hosts.value and cfg.rank0_hosts.source == "rank 0 of env://"
                and str(under.port) == os.environ.get("MASTER_PORT", "").strip())


def _await_close(store: Any, limit: float) -> None:
    """Waits (at most ``limit`` seconds, 20 ms between looks) until rank 0 closed the store
    ``store`` talks to, so that this rank's next ``init_process_group`` reaches the new one."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            store.check(["dtcomm/farewell"])
        except Exception:  # noqa: BLE001 - closed: what we wait for
            return
        time.sleep(0.02)


class DtcommBackend(_C10dBackend):
    """The c10d backend. Construction connects this rank to the group (blocks until all
    ranks joined, or the group's timeout)."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        secs: float | None = timeout.total_seconds()
        if timeout == _TORCH_DEFAULT_TIMEOUT and os.environ.get("DTCOMM_TIMEOUT"):
            secs = None  # torch's default was not the user's choice: DTCOMM_TIMEOUT decides
        _dtcomm.init_logging()
        self._comm = _dtcomm.Communicator.from_store(store, rank, size, timeout=secs)
        # A new_group records as itself, with global ranks, not as group 0.
        name_group(self._comm, store, rank, size)
        fit_torch_threads(self._comm.host_ranks, rank)
        self._store = store
        self._timeout = timeout
        self._rank = rank
        self._size = size
        self._seq = 0
        self._monitored = 0
        self._batch: P2pBatch | None = None
        # The world group (built before torch counts itself initialised) tells the store what
        # this rank is doing, for `dt-rdzv status --hang --store` (docs/hang.md).
        self._progress: _progress.Publisher | None = None
        if not dist.is_initialized() and os.environ.get("DTCOMM_PUBLISH_PROGRESS", "1") != "0":
            self._progress = _progress.Publisher(store, rank, size).start()

    # --- identity and capabilities (torch 2.15 recurses unless these are defined) ----------
    @property
    def supports_coalescing(self) -> bool:
        # batch_isend_irecv brackets its ops with start/end_coalescing (see P2pBatch)
        return True

    @property
    def supports_splitting(self) -> bool:
        return False

    @property
    def supports_shrinking(self) -> bool:
        return False

    @property
    def supports_reconfigure(self) -> bool:
        return False

    @property
    def supports_window(self) -> bool:
        return False

    @property
    def _supports_time_estimate(self) -> bool:
        return False

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return NAME

    def _get_sequence_number_for_group(self) -> int:
        return self._seq

    @property
    def communicator(self) -> _dtcomm.Communicator:
        """The native communicator of this group."""
        return self._comm

    def shutdown(self) -> None:
        """``destroy_process_group``: the ranks leave together (a barrier of at most
        :data:`FAREWELL` seconds), as gloo's teardown makes them. Under ``env://`` rank 0's
        process hosts torch's store and hosts a new one at the next init: a rank that left
        first could reach the old one while rank 0 closes it ("Failed to recv ... Connection
        was likely closed") at its next ``init_process_group``."""
        c = self._comm
        if self._size > 1 and not c.is_shutdown and c.failure() is None:
            try:
                w = c.barrier(async_op=True)
                if w is not None and not w.wait(timeout=FAREWELL):
                    c.abort(f"rank {self._rank}: destroy_process_group: the farewell barrier "
                            f"passed {FAREWELL}s")
            except Exception:  # noqa: BLE001 - a peer already gone: leave anyway
                pass
        if self._progress is not None:
            self._progress.stop()
        c.shutdown()
        _LIVE.discard(self)
        if self._rank != 0 and self._size > 1 and _rank0_hosts(self._store):
            _await_close(self._store, FAREWELL)

    def abort(self) -> None:
        """Ends every call in flight at once (``RoundEndedError`` within 20 ms) and leaves."""
        c = self._comm
        if not c.is_shutdown:
            c.arm_abort()
            c.abort(f"rank {self._rank}: the process group was aborted")
        if self._progress is not None:
            self._progress.stop(wait=0)  # an abort waits on nothing (the store may be gone)
        c.shutdown()
        _LIVE.discard(self)

    # --- plumbing ----------------------------------------------------------------------------
    def _work(self, op: str, result: list[torch.Tensor], batched: bool = False) -> DtcommWork:
        self._seq += 1
        if _threads._deferred is not None:
            _threads.apply_deferred_fit()  # this group was built off the main thread
        w = DtcommWork(result, self._rank, op, cuda_stream(result))
        if self._batch is not None and not batched:
            # a collective inside a coalescing region (torch's functional collectives wait
            # only on end_coalescing's Work): that Work covers it
            self._batch.others.append(w)
        return w

    def _one(
        self, op: str, result: list[torch.Tensor], start: Any, finish: Any = None, opts: Any = None
    ) -> DtcommWork:
        """One native call: `start(callback)` submits it. A blocking torch call
        (``opts.asyncOp`` False) runs it here, without the GIL, and raises its error at once."""
        w = self._work(op, result)
        if opts is not None and not opts.asyncOp and w.stream is None:
            try:
                start(None)
            except BaseException as e:
                raise torch_words(e) from e
            w.expect(0, finish)
            return w
        w.expect(1, finish)
        w.add(start(w.callback))
        return w

    # --- collectives ------------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> DtcommWork:
        """gloo's all_reduce: every tensor of every rank reduced into one result, which every
        tensor receives (a list is folded locally into one staging buffer first)."""
        op = _redop(self._rank, opts.reduceOp)
        lists.alike(self._rank, "all_reduce", tensors)
        if tensors[0].is_sparse:
            return self.allreduce_sparse(tensors, opts)
        lists.no_overlap(self._rank, "all_reduce", tensors, "tensors")
        if len(tensors) == 1:
            t, back = lists.staged(tensors[0])
            return self._one("all_reduce", tensors,
                             lambda cb: self._comm.all_reduce(t, op, callback=cb), back, opts)
        lists.reduction(self._rank, "all_reduce", op, tensors)
        if op is ReduceOp.AVG:
            raise lists.refuse(self._rank, "all_reduce", f"AVG of {len(tensors)} tensors per "
                               "call refused (gloo has no AVG): use SUM and divide")
        acc = tensors[0].detach().clone(memory_format=torch.contiguous_format)
        lists.fold(op, acc, tensors[1:])
        return self._one("all_reduce", tensors,
                         lambda cb: self._comm.all_reduce(acc, op, callback=cb),
                         lambda: lists.spread(acc, tensors), opts)

    def allreduce_sparse(self, tensors: list[torch.Tensor], opts: Any) -> DtcommWork:
        """Sum of sparse COO tensors, as gloo does it: this rank's tensors are summed, every
        rank's indices and values are gathered, concatenated and coalesced; the result
        replaces every tensor's contents."""
        lists.alike(self._rank, "all_reduce", tensors)
        if _redop(self._rank, opts.reduceOp) is not ReduceOp.SUM:
            raise ValueError(f"rank {self._rank}: sparse all_reduce supports SUM only, "
                             f"got {opts.reduceOp}")
        mine = tensors[0].detach()
        for t in tensors[1:]:
            mine = mine + t.detach()
        w = self._work("all_reduce", tensors)
        try:
            total = sparse_sum(self._comm, self._size, mine.coalesce())
        except BaseException as e:
            raise torch_words(e) from e
        with torch.no_grad():
            for t in tensors:
                t.copy_(total)
        w.expect(0)
        return w

    def allgather_coalesced(
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any
    ) -> DtcommWork:
        """One all_gather of every input's bytes, concatenated (dtypes may differ):
        ``outputs[r][i]`` receives rank r's ``inputs[i]``."""
        if len(outputs) != self._size or any(len(o) != len(inputs) for o in outputs):
            raise ValueError(
                f"rank {self._rank}: allgather_coalesced: needs {self._size} output lists of "
                f"{len(inputs)} tensors, got {[len(o) for o in outputs]}"
            )
        parts = [t.detach().contiguous().reshape(-1).view(torch.uint8) for t in inputs]
        sizes = [p.numel() for p in parts]
        flat = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)
        out = torch.empty(flat.numel() * self._size, dtype=torch.uint8, device=flat.device)

        def finish() -> None:
            rows = out.split(flat.numel()) if flat.numel() else [out] * self._size
            for lst, row in zip(outputs, rows, strict=True):
                for o, part in zip(lst, row.split(sizes), strict=True):
                    o.detach().copy_(part.clone().view(o.dtype).view_as(o))

        result = [o for lst in outputs for o in lst]
        return self._one("all_gather", result,
                         lambda cb: self._comm.all_gather(flat, out, callback=cb), finish,
                         opts=opts)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> DtcommWork:
        op = _redop(self._rank, opts.reduceOp)
        if len({t.dtype for t in tensors}) > 1:
            raise ValueError(f"rank {self._rank}: allreduce_coalesced needs one dtype")
        flat = torch.cat([t.detach().reshape(-1) for t in tensors])

        def finish() -> None:
            off = 0
            for t in tensors:
                n = t.numel()
                t.detach().copy_(flat[off : off + n].view_as(t))
                off += n

        return self._one(
            "all_reduce", tensors, lambda cb: self._comm.all_reduce(flat, op, callback=cb), finish
        )

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> DtcommWork:
        """gloo's broadcast: the root's ``tensors[opts.rootTensor]`` into every tensor of
        every rank."""
        lists.alike(self._rank, "broadcast", tensors)
        k, pick = len(tensors), opts.rootTensor
        if not 0 <= pick < k:
            raise lists.refuse(self._rank, "broadcast", f"rootTensor {pick} is not an index "
                               f"of the {k} tensors")
        lists.no_overlap(self._rank, "broadcast", tensors, "tensors")
        root = opts.rootRank
        t, back = lists.staged(tensors[pick])
        finish = back if k == 1 else (lambda: lists.spread(t, tensors))
        return self._one("broadcast", tensors,
                         lambda cb: self._comm.broadcast(t, root, callback=cb), finish, opts)

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> DtcommWork:
        lists.one(self._rank, "reduce", tensors)
        root = opts.rootRank
        op = _redop(self._rank, opts.reduceOp)
        t, back = lists.staged(tensors[0])
        lists.no_overlap(self._rank, "reduce", tensors, "tensors")
        finish = back if self._rank == root else None
        return self._one("reduce", tensors,
                         lambda cb: self._comm.reduce(t, op, root, callback=cb), finish, opts)

    def allgather(
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any
    ) -> DtcommWork:
        """gloo's all_gather: with ``k`` inputs per rank each of the ``k`` output lists gets
        ``world * k`` tensors, rank-major (``outputs[i][r * k + j]`` is rank r's
        ``inputs[j]``)."""
        r, n = self._rank, self._size
        lists.alike(r, "all_gather", inputs, "inputs")
        k = len(inputs)
        if len(outputs) != k or any(len(o) != n * k for o in outputs):
            raise lists.refuse(r, "all_gather", f"{k} inputs need {k} output lists of {n * k} "
                               f"tensors (world {n} x {k}), got {[len(o) for o in outputs]}")
        outs = [o for lst in outputs for o in lst]
        lists.alike(r, "all_gather", outs, "outputs", shape=False)
        if outs[0].dtype != inputs[0].dtype:
            raise lists.refuse(r, "all_gather", f"outputs have dtype {outs[0].dtype} but "
                               f"inputs {inputs[0].dtype}: they must match")
        lists.no_overlap(r, "all_gather", outs)
        if k == 1:
            x = lists.dense_input(inputs[0])
            counts = [o.numel() for o in outs]
        else:
            x = torch.cat([i.detach().reshape(-1) for i in inputs])
            counts = [inputs[0].numel()] * (n * k)
            if any(o.numel() != counts[0] for o in outs):
                raise lists.refuse(r, "all_gather", f"every output needs {counts[0]} elements "
                                   f"(one input's), got {[o.numel() for o in outs]}")
        flat = torch.empty(sum(counts), dtype=x.dtype, device=x.device)
        per_rank = [sum(counts[p * k:(p + 1) * k]) for p in range(n)]

        def finish() -> None:
            parts = flat.split(counts[: n * k])
            for lst in outputs:
                for o, part in zip(lst, parts, strict=True):
                    o.detach().copy_(part.view_as(o))

        return self._one(
            "all_gather",
            outs,
            lambda cb: self._comm.all_gather(x, flat, per_rank, callback=cb),
            finish,
        )

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> DtcommWork:
        lists.no_overlap(self._rank, "all_gather_into_tensor", [output], "output")
        (o, back), i = lists.staged(output), lists.dense_input(input)
        return self._one("all_gather", [output],
                         lambda cb: self._comm.all_gather(i, o, callback=cb), back, opts)

    def allgather_into_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any
    ) -> DtcommWork:
        return self.all_gather_single_coalesced(outputs, inputs, opts)

    def all_gather_single_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any
    ) -> DtcommWork:
        w = self._work("all_gather", list(outputs))
        w.expect(len(outputs))
        for o, i in zip(outputs, inputs, strict=False):
            w.add(self._comm.all_gather(i.detach(), o.detach(), callback=w.callback))
        return w

    def reduce_scatter_single(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any
    ) -> DtcommWork:
        op = _redop(self._rank, opts.reduceOp)
        lists.no_overlap(self._rank, "reduce_scatter_tensor", [output], "output")
        (o, back), i = lists.staged(output), lists.dense_input(input)
        return self._one("reduce_scatter", [output],
                         lambda cb: self._comm.reduce_scatter(i, o, op, callback=cb), back, opts)

    def reduce_scatter_single_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any
    ) -> DtcommWork:
        op = _redop(self._rank, opts.reduceOp)
        w = self._work("reduce_scatter", list(outputs))
        w.expect(len(outputs))
        for o, i in zip(outputs, inputs, strict=False):
            w.add(self._comm.reduce_scatter(i.detach(), o.detach(), op, callback=w.callback))
        return w

    def reduce_scatter_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any
    ) -> DtcommWork:
        return self.reduce_scatter_single_coalesced(outputs, inputs, opts)

    def reduce_scatter(
        self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any
    ) -> DtcommWork:
        lists.one(self._rank, "reduce_scatter", outputs, "output")
        op = _redop(self._rank, opts.reduceOp)
        lists.no_overlap(self._rank, "reduce_scatter", outputs)
        (out, back), ins = lists.staged(outputs[0]), inputs[0]
        if len(ins) != self._size or any(i.numel() != out.numel() for i in ins):
            raise ValueError(
                f"rank {self._rank}: reduce_scatter: needs {self._size} inputs of {out.numel()} "
                f"elements, got {[i.numel() for i in ins]}"
            )
        flat = torch.cat([i.detach().reshape(-1) for i in ins])
        return self._one("reduce_scatter", outputs,
                         lambda cb: self._comm.reduce_scatter(flat, out, op, callback=cb),
                         back, opts)

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any,
    ) -> DtcommWork:
        lists.no_overlap(self._rank, "all_to_all_single", [output], "output")
        (o, back), i = lists.staged(output), lists.dense_input(input)
        if not output_split_sizes and not input_split_sizes:
            return self._one("all_to_all", [output],
                             lambda cb: self._comm.all_to_all(i, o, callback=cb), back, opts)
        n = self._size
        in_row = i.numel() // i.size(0) if i.dim() and i.size(0) else 1
        out_row = o.numel() // o.size(0) if o.dim() and o.size(0) else 1
        isz = list(input_split_sizes) or [i.size(0) // n] * n
        osz = list(output_split_sizes) or [o.size(0) // n] * n
        sc = [s * in_row for s in isz]
        rc = [s * out_row for s in osz]
        return self._one("all_to_all", [output],
                         lambda cb: self._comm.all_to_all(i, o, sc, rc, callback=cb), back, opts)

    def alltoall(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any
    ) -> DtcommWork:
        sc = [t.numel() for t in inputs]
        rc = [t.numel() for t in outputs]
        src = torch.cat([t.detach().reshape(-1) for t in inputs])
        dst = torch.empty(sum(rc), dtype=src.dtype, device=src.device)

        def finish() -> None:
            for o, part in zip(outputs, dst.split(rc), strict=True):
                o.detach().copy_(part.view_as(o))

        return self._one("all_to_all", outputs,
                         lambda cb: self._comm.all_to_all(src, dst, sc, rc, callback=cb), finish)

    def gather(
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any
    ) -> DtcommWork:
        lists.one(self._rank, "gather", inputs, "input")
        x, root = lists.dense_input(inputs[0]), opts.rootRank
        if self._rank != root:
            return self._one("gather", [],
                             lambda cb: self._comm.gather(x, None, root, callback=cb), opts=opts)
        lists.one(self._rank, "gather", outputs, "output")
        outs = outputs[0]
        if len(outs) != self._size:
            raise lists.refuse(self._rank, "gather", f"{len(outs)} outputs for a world of "
                               f"{self._size}")
        lists.no_overlap(self._rank, "gather", outs)
        flat = torch.empty(x.numel() * self._size, dtype=x.dtype, device=x.device)

        def finish() -> None:
            for o, part in zip(outs, flat.split(x.numel()), strict=False):
                o.detach().copy_(part.view_as(o))

        return self._one("gather", outs,
                         lambda cb: self._comm.gather(x, flat, root, callback=cb), finish)

    def scatter(
        self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any
    ) -> DtcommWork:
        lists.one(self._rank, "scatter", outputs, "output")
        lists.no_overlap(self._rank, "scatter", outputs)
        (out, back), root = lists.staged(outputs[0]), opts.rootRank
        src = torch.cat([t.detach().reshape(-1) for t in inputs[0]]) if self._rank == root else None
        return self._one("scatter", outputs,
                         lambda cb: self._comm.scatter(src, out, root, callback=cb), back, opts)

    def barrier(self, opts: Any = None) -> DtcommWork:
        return self._one("barrier", [], lambda cb: self._comm.barrier(callback=cb), opts=opts)

    def monitored_barrier(self, opts: Any, wait_all_ranks: bool = False) -> None:
        """gloo's monitored barrier: rank 0 names the ranks that did not arrive within
        ``opts.timeout`` (all of them with ``wait_all_ranks``), the others learn its verdict.
        Goes through the group's store, so a missing rank cannot stall the engine's queue."""
        timeout = opts.timeout if opts.timeout.total_seconds() >= 0 else self._timeout
        n = self._monitored
        self._monitored += 1
        monitored_barrier(self._store, n, self._rank, self._size, timeout, self._timeout,
                          wait_all_ranks)

    def start_coalescing(self) -> None:
        """Starts a batch of isend/irecv (``batch_isend_irecv``); see :class:`P2pBatch`."""
        if self._batch is not None:
            raise RuntimeError(f"rank {self._rank}: start_coalescing while a batch is open")
        self._batch = P2pBatch(self._rank)

    def end_coalescing(self) -> DtcommWork:
        """Issues the batch in an order no peer can disagree with; one Work for all of it."""
        batch, self._batch = self._batch, None
        if batch is None:
            raise RuntimeError(f"rank {self._rank}: end_coalescing without start_coalescing")
        w = self._work("batch_isend_irecv", batch.tensors(), batched=True)
        batch.issue(self._comm, w)
        return w

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> DtcommWork:
        lists.one(self._rank, "send", tensors)
        t = tensors[0].detach()
        if self._batch is not None:
            return self._batch.add("send", t, dst, tag, self._work("send", tensors, batched=True))
        return self._one("send", tensors, lambda cb: self._comm.send(t, dst, callback=cb))

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> DtcommWork:
        lists.one(self._rank, "recv", tensors)
        t = tensors[0].detach()
        if self._batch is not None:
            return self._batch.add("recv", t, src, tag, self._work("recv", tensors, batched=True))
        return self._one("recv", tensors, lambda cb: self._comm.recv(t, src, callback=cb))

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> DtcommWork:
        """Receives the next send to this rank from whichever peer's arrives first; the
        Work's ``_source_rank()`` names it (``dist.recv(t)`` without ``src`` returns it)."""
        lists.one(self._rank, "recv", tensors)
        t = tensors[0].detach()
        natives: list[Any] = []

        def start(cb: Any) -> Any:
            w = self._comm.recv_any(t, callback=cb)
            natives.append(w)
            return w

        def finish() -> None:
            # torch hands our Work back wrapped (only wait/get_future reach it), so the sender
            # travels with the received tensor, where `Work._source_rank` looks (_torch_work.py).
            set_source(tensors[0], natives[0].source)

        return self._one("recv", tensors, start, finish=finish)


# torch keeps only the C++ half of a Python backend: once the last Python reference goes, a
# group's calls reach the C++ base class ("getBackendName is not implemented" on a subgroup,
# whose backend object nothing else holds). The Python objects live here until shutdown.
_LIVE: set[DtcommBackend] = set()


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> DtcommBackend:
    try:
        backend = DtcommBackend(store, rank, size, timeout)
    except TypeError as e:
        if "No constructor defined" not in str(e):
            raise
        # torch before 2.15 gives its Backend base class no Python constructor (first seen
        # with torch 2.11 on a GPU machine): say what to install instead of torch's riddle.
        raise RuntimeError(
            f"rank {rank}: dtcomm's torch backend needs torch >= 2.15 (its Backend base class "
            f"has a Python constructor from then on); this is torch {torch.__version__}. "
            "Install dtcomm[torch], or use dtcomm's own API (import dtcomm) with this torch"
        ) from e
    _LIVE.add(backend)
    return backend


def register() -> None:
    """Registers ``dtcomm`` with ``torch.distributed`` for CPU and CUDA tensors (idempotent).
    The ``torch.distributed.backends`` entry point calls this. Also registers the
    ``dtcomm://`` rendezvous (``init_method="dtcomm://"``: ranks and the store by dtcomm's
    launch rules, e.g. under ``srun`` with no ``MASTER_ADDR``)."""
    from ._torch_rendezvous import register as register_rendezvous

    register_rendezvous()
    patch_work_is_completed()
    if getattr(dist.Backend, NAME.upper(), None) is not None:
        return
    dist.Backend.register_backend(NAME, _create, devices=DEVICES)


# `import dtcomm.torch_backend` (and `import dtcomm` once torch.distributed is loaded) leaves
# torch fully aware of the backend: `Backend.backend_type_map` and `backend_capability` know
# dtcomm before any group is built, so a first group whose backend comes from torch's default
# device map (`Backend.default_device_backend_map`) finds its backend type (issue 44), and
# `init_method="dtcomm://"` is available (see dtcomm._torch_rendezvous).
register()
