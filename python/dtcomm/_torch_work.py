"""The Work objects the torch backend hands to ``torch.distributed``.

``torch.distributed`` wraps whatever a Python backend returns and forwards only ``wait()`` and
``get_future()`` (``shared/reference/torch-backend.md``). So: ``wait(timeout)`` raises the
collective's error (a timeout of 0 means the engine's own deadline), and ``get_future()``
returns a future chained on a private base future with ``then``. Completing the base with an
exception makes the chained future a real error for every C++ consumer (DDP's reducer), where
``Future.set_exception`` alone would look like success to them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import OpType  # type: ignore[attr-defined, unused-ignore]

from . import _dtcomm

# Type checking: torch's stub lacks `OpType` and `Work._get_op_type` (both exist at run time),
# and `Work`'s methods are replaced on purpose (patch_work_is_completed). The `type: ignore`s
# name `unused-ignore` too: where torch is not installed, mypy sees it as Any.


def torch_words(exc: BaseException) -> BaseException:
    """``exc`` as torch users match it: a timeout reads " Timed out " (torch's own code and
    users match ``(Timed out|closed|timeout)`` between spaces), keeping dtcomm's detail (rank,
    call, sequence number, the ranks not heard from). Same exception type; the original is
    the cause."""
    if isinstance(exc, _dtcomm.CommTimeoutError) and " Timed out " not in str(exc):
        new = type(exc)(f"dtcomm: Timed out ({exc})")
        new.__cause__ = exc
        return new
    return exc


class DtcommWork(dist._Work):
    """One or more native calls; done when all of them are.

    On CUDA tensors (`stream`: torch's current stream when the call was made) the caller's
    stream is ordered after the native calls already, so ``wait()`` does not block the host
    unless a finishing step (copies out of a temporary) must run first; that step runs on
    `stream`."""

    def __init__(self, result: list[torch.Tensor], rank: int, op: str, stream: Any = None) -> None:
        super().__init__()
        self._stream = stream
        self._result = result
        self._rank = rank
        self._op = op
        self._base: torch.futures.Future[Any] = torch.futures.Future()
        self._fut: torch.futures.Future[Any] = self._base.then(lambda f: f.value())
        self._natives: list[_dtcomm.Work] = []
        self._left = 0
        self._error: BaseException | None = None
        self._finish: Callable[[], None] | None = None

    def expect(self, n: int, finish: Callable[[], None] | None = None) -> None:
        """`n` native calls will report through :meth:`callback`; `finish` runs (on the
        completing thread, before the future completes) once all of them succeeded."""
        self._left = n
        self._finish = finish
        if n == 0:
            self._complete()

    def add(self, native: _dtcomm.Work | None) -> None:
        if native is not None:
            self._natives.append(native)

    def on_done(self, fn: Callable[[BaseException | None], None]) -> None:
        """Calls ``fn(error or None)`` once this Work completed (at once if it has)."""

        def done(fut: torch.futures.Future[Any]) -> None:
            fn(self._error)

        self._fut.add_done_callback(done)

    def callback(self, exc: BaseException | None) -> None:
        """Called by dtcomm's worker thread (with the GIL) when one native call ended."""
        if exc is not None and self._error is None:
            self._error = torch_words(exc)
        self._left -= 1
        if self._left == 0:
            self._complete()

    def _complete(self) -> None:
        if self._error is None and self._finish is not None:
            try:
                if self._stream is not None:
                    with torch.cuda.stream(self._stream):
                        self._finish()
                else:
                    self._finish()
            except BaseException as e:  # noqa: BLE001 - reported through the future
                self._error = e
        if self._error is not None:
            self._base.set_exception(self._error)
        else:
            self._base.set_result(self._result)

    def wait(self, timeout: timedelta | float | None = timedelta(0)) -> bool:
        secs = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout or 0)
        if self._stream is not None and self._finish is None:
            # The stream is ordered after the calls: nothing to wait for on the host. An error
            # known by now is raised; a later one fails the communicator's next call.
            if self._error is not None:
                raise self._error
            return True
        try:
            for n in self._natives:
                n.wait(secs if secs > 0 else None)
        except BaseException as e:
            raise torch_words(e) from e
        # The native calls are done; the future completes right after, on the worker thread.
        self._fut.wait()
        return True

    @property
    def stream(self) -> Any:
        """torch's CUDA stream the call was made on (None for CPU tensors)."""
        return self._stream

    def is_completed(self) -> bool:
        return self._fut.done()

    def get_future(self) -> torch.futures.Future[Any]:
        return self._fut

    def exception(self) -> BaseException | None:
        return self._error

    def __repr__(self) -> str:
        return f"<DtcommWork {self._op} rank {self._rank} done={self._fut.done()}>"


_work_is_completed = dist.Work.is_completed


def _is_completed(self: dist.Work) -> bool:
    """``Work.is_completed`` that also sees a Python backend's completion. torch wraps the Work
    a Python backend returns in a holder that forwards only ``wait`` and ``get_future``
    (``PyWorkHolder``), so the holder's own flag stays False forever; its future is the
    backend's, done exactly when the call completed. Only consulted when torch says False."""
    if _work_is_completed(self):
        return True
    if _op_type(self) != _UNKNOWN_OP:
        return False  # a C++ backend's Work (gloo, nccl) knows its own state
    try:
        return bool(self.get_future().done())
    except RuntimeError:
        return False  # a Work without a future


def _op_type(work: dist.Work) -> int:
    """The Work's ``OpType`` as an int (``UNKNOWN`` for a Python backend's Work)."""
    return int(work._get_op_type())  # type: ignore[attr-defined, unused-ignore]


_UNKNOWN_OP = int(OpType.UNKNOWN)


_SOURCE = "_dtcomm_source"


def set_source(t: torch.Tensor, src: int | None) -> None:
    """Records on the tensor a receive from any source filled which rank sent it."""
    setattr(t, _SOURCE, src)


_work_source_rank = dist.Work._source_rank


def _source_rank(self: dist.Work) -> int:
    """``Work._source_rank`` that also answers for a Python backend's receive from any source:
    torch's holder does not forward ``sourceRank()``, but its future is the backend's, whose
    value is the received tensor, on which the backend recorded the sender (`set_source`)."""
    try:
        return int(_work_source_rank(self))
    except RuntimeError:
        if _op_type(self) != _UNKNOWN_OP:
            raise
        try:
            fut = self.get_future()
        except RuntimeError:
            raise RuntimeError("sourceRank(): not a receive from any source") from None
        value = fut.value() if fut.done() else None
        src = getattr(value[0], _SOURCE, None) if isinstance(value, list) and value else None
        if src is None:
            raise
        return int(src)


def patch_work_is_completed() -> None:
    """Installs :func:`_is_completed` as ``torch.distributed.Work.is_completed`` and
    :func:`_source_rank` as ``Work._source_rank`` / ``source_rank`` (idempotent)."""
    if dist.Work.is_completed is not _is_completed:
        dist.Work.is_completed = _is_completed  # type: ignore[method-assign, unused-ignore]
    if dist.Work._source_rank is not _source_rank:
        dist.Work._source_rank = _source_rank  # type: ignore[method-assign, unused-ignore]
        dist.Work.source_rank = _source_rank  # type: ignore[method-assign, unused-ignore]
