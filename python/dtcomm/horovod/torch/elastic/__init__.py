"""``hvd.elastic``: Horovod's elastic training on dtcomm's native rendezvous.

::

    state = hvd.elastic.TorchState(model=model, optimizer=opt, sampler=sampler, epoch=0)

    @hvd.elastic.run
    def train(state):
        ...                      # collectives raise HorovodInternalError when a peer is lost
        state.commit()           # save; HostsUpdatedInterrupt when the round changed

    train(state)

``run`` syncs the state from rank 0 and calls ``train``. When a collective fails because
the communicator failed (``HorovodInternalError`` caused by dtcomm's ``PeerLostError`` /
``RoundEndedError``: a member died or the server ended the round), the state is restored
from the last commit; on ``HostsUpdatedInterrupt`` it is kept. Either way the Horovod layer
moves to the rendezvous's next round (``dtcomm.elastic``'s renewal: survivors keep their
ranks, members that joined get theirs), the reset callbacks run, the state is synced from
rank 0 and ``train`` is called again. Horovod's ``shutdown(); init()`` would leave the job;
here the member stays in it.

Not retried (raised): a ``HorovodInternalError`` with no communicator failure behind it (the
ranks disagreed about an operation: a program error a new round would repeat), rendezvous
errors (the job ended, this member was removed), anything else.

Needs ``DTCOMM_RDZV_ENDPOINT`` on dt-rdzv's native port (``hvd.init()`` joins there).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from dtcomm import _api, _dtcomm
from dtcomm.elastic import HostsUpdatedInterrupt, _retryable

from .. import _core
from .sampler import ElasticSampler
from .state import StateHandler, TorchState, get_handler_registry, set_handler_registry

R = TypeVar("R")


def _retry_cause(e: BaseException) -> BaseException | None:
    """The communicator failure behind ``e`` when a new round can go on from it."""
    cause = e.__cause__ if isinstance(e, _core.HorovodInternalError) else e
    if isinstance(cause, _dtcomm.DtcommError) and _retryable(cause):
        return cause
    return None


def run(func: Callable[..., R]) -> Callable[..., R]:
    """Decorator: runs ``func(state, *args, **kwargs)`` elastically (see the module docs)."""

    @functools.wraps(func)
    def wrapper(state: TorchState, *args: Any, **kwargs: Any) -> R:
        if not _core.started():
            _core.init()
        if _api._g("hvd.elastic.run").member is None:
            raise _dtcomm.SetupError(
                "hvd.elastic.run needs the native rendezvous: set DTCOMM_RDZV_ENDPOINT to "
                "dt-rdzv's native port (and DTCOMM_RDZV_FINGERPRINT / DTCOMM_RDZV_TOKEN)")
        reason: str | None = None
        skip_sync = False
        while True:
            try:
                if reason is not None:
                    _core._elastic_reset(reason)
                    state.on_reset()
                if not skip_sync:
                    state.sync()
                result = func(state, *args, **kwargs)
                # Finish together: a rank that returned and shut down while another was still
                # in its last commit would look to that one like a lost member.
                _core.barrier()
                return result
            except HostsUpdatedInterrupt as e:
                skip_sync = bool(getattr(e, "skip_sync", False))
                reason = f"round changed: {e}"
            except (_core.HorovodInternalError, _dtcomm.DtcommError) as e:
                cause = _retry_cause(e)
                if cause is None:
                    raise
                state.restore()
                skip_sync = False
                reason = f"{type(cause).__name__}: {cause}"

    return wrapper


__all__ = ["run", "TorchState", "ElasticSampler", "HostsUpdatedInterrupt", "StateHandler",
           "get_handler_registry", "set_handler_registry"]
