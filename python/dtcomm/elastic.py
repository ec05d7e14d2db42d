"""Elastic training on the native rendezvous, like ``horovod.torch.elastic``.

::

    state = dtcomm.elastic.ObjectState(step=0, weights=w)   # or TorchState(model, optimizer)

    @dtcomm.elastic.run
    def train(state):
        while state.step < steps:
            dtcomm.all_reduce(grad)             # raises PeerLostError when a member dies
            ...
            state.step += 1
            state.commit()                      # saves; raises HostsUpdatedInterrupt on a
                                                # round change (a member joined or left)

    train(state)                                # or dtcomm.elastic.run(train, state)

When a member is lost (its process died: collectives fail with ``PeerLostError``), the state
is restored from the last ``commit()``; when the round changes without a failure (members
joined), the state is kept. Either way the communicator is rebuilt from the server's next
round (survivors keep their ranks), ``state.sync()`` broadcasts rank 0's state to every
member (newcomers included), the reset callbacks run, and ``train`` is called again.

A :class:`~dtcomm.MismatchError` (ranks called different collectives, counts or dtypes) is a
program error that a new round would repeat: ``run`` raises it instead of retrying.

State travels without ``pickle``: plain values as JSON (:mod:`dtcomm._state_codec`), torch
state dicts as ``torch.save`` bytes read back with ``torch.load(weights_only=True)``, so bytes
received from another member cannot run code.

Needs ``dtcomm.init()`` on the native rendezvous (``DTCOMM_RDZV_ENDPOINT`` on dt-rdzv's native
port); ``run`` calls it if it was not called. Every wait is bounded: a new round must form
within the job's join timeout, or ``RdzvTimeoutError``/``RdzvJobEndedError`` is raised.
"""

from __future__ import annotations

import array
import copy
import functools
import io
from collections.abc import Callable
from typing import Any, TypeVar

from . import _api, _dtcomm
from ._state_codec import StateCodecError, decode, encode

R = TypeVar("R")


class HostsUpdatedInterrupt(Exception):
    """The server started a new round (members joined or left) while training ran; raised by
    :meth:`State.commit` / :meth:`State.check_host_updates` so every member resets at the same
    step. The state is kept."""

    #: Horovod's flag (set by ``hvd.elastic``'s states): the reset may skip the state sync.
    skip_sync: bool


def broadcast_bytes(data: bytes | None, root: int = 0) -> bytes:
    """``root``'s ``data`` on every rank (two broadcasts: length, then bytes). A negative
    length from ``root`` means it could not produce the bytes: every rank raises
    :class:`StateCodecError`."""
    comm = _api.communicator()
    mine = comm.rank == root
    n = array.array("q", [(len(data) if data is not None else -1) if mine else 0])
    _api.broadcast(n, root)
    if n[0] < 0:
        raise StateCodecError(f"rank {root} could not encode its state (see its error)")
    buf = bytearray(data if data is not None else b"") if mine else bytearray(n[0])
    if n[0]:
        _api.broadcast(buf, root)
    return bytes(buf)


def broadcast_object(obj: Any, root: int = 0) -> Any:
    """``root``'s ``obj`` on every rank, as the JSON of :mod:`dtcomm._state_codec` (plain
    data and numpy arrays; nothing received is unpickled). An ``obj`` the codec cannot carry
    raises :class:`StateCodecError` on every rank."""
    comm = _api.communicator()
    data: bytes | None = None
    err: StateCodecError | None = None
    if comm.rank == root:
        try:
            data = encode(obj)
        except StateCodecError as e:
            err = e
    try:
        got = broadcast_bytes(data, root)
    except StateCodecError:
        if err is not None:
            raise err from None
        raise
    return obj if comm.rank == root else decode(got)


def _torch_blob(parts: dict[str, Any]) -> bytes:
    import torch

    b = io.BytesIO()
    torch.save({k: obj.state_dict() for k, obj in parts.items()}, b)
    return b.getvalue()


def _torch_unblob(blob: bytes) -> dict[str, Any]:
    """State dicts from :func:`_torch_blob`'s bytes, loaded with ``weights_only=True`` (tensors
    and plain containers only: a pickle that would run code is refused)."""
    import torch

    try:
        out = torch.load(io.BytesIO(blob), weights_only=True)
    except Exception as e:  # torch raises UnpicklingError/RuntimeError for refused content
        raise StateCodecError(f"refusing torch state: {type(e).__name__}: {e}") from None
    if not isinstance(out, dict):
        raise StateCodecError(f"torch state is a {type(out).__name__}, expected a dict")
    return out


class State:
    """Training state that survives round changes: ``commit()`` saves it (in memory) and
    checks for a round change, ``restore()`` goes back to the last commit, ``sync()`` makes
    every member's state rank 0's."""

    def __init__(self) -> None:
        self._reset_callbacks: list[Callable[[], None]] = []

    def register_reset_callbacks(self, callbacks: list[Callable[[], None]]) -> None:
        """Callables run after every reset (e.g. to rescale the learning rate to the new
        world size)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Runs the reset callbacks."""
        for cb in self._reset_callbacks:
            cb()

    def commit(self) -> None:
        """Saves the state, then raises :class:`HostsUpdatedInterrupt` if the round changed."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises :class:`HostsUpdatedInterrupt` if the server ended this round."""
        if _api._round_changed():
            member = _api._g("elastic").member  # (not None: its round changed)
            raise HostsUpdatedInterrupt(member.ended if member is not None else None)

    def save(self) -> None:
        """Saves a copy of the state in memory."""
        raise NotImplementedError

    def restore(self) -> None:
        """Goes back to the last saved copy."""
        raise NotImplementedError

    def sync(self) -> None:
        """Makes every member's state rank 0's."""
        raise NotImplementedError


class ObjectState(State):
    """Values as attributes: ``ObjectState(epoch=0, step=0, weights=array)``. ``sync()``
    carries them as JSON (:mod:`dtcomm._state_codec`): ``None``, bools, ints, floats, strings,
    bytes, lists, tuples, dicts with string keys, and numpy arrays of plain dtypes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self._keys = list(kwargs)
        for k, v in kwargs.items():
            setattr(self, k, v)
        self._saved: dict[str, Any] = {}
        self.save()

    def _values(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._keys}

    def save(self) -> None:
        self._saved = copy.deepcopy(self._values())

    def restore(self) -> None:
        for k, v in copy.deepcopy(self._saved).items():
            setattr(self, k, v)

    def sync(self) -> None:
        values = broadcast_object(self._values() if _api.rank() == 0 else None)
        for k, v in values.items():
            setattr(self, k, v)
        self.save()


class TorchState(ObjectState):
    """A torch ``model`` and ``optimizer`` (their ``state_dict``) plus plain values (see
    :class:`ObjectState`). State dicts travel as ``torch.save`` bytes and are read back with
    ``torch.load(weights_only=True)``."""

    def __init__(self, model: Any = None, optimizer: Any = None, **kwargs: Any) -> None:
        self.model = model
        self.optimizer = optimizer
        self._saved_torch: bytes | None = None
        super().__init__(**kwargs)

    def _torch_parts(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("model", "optimizer") if getattr(self, k) is not None}

    def _load(self, dicts: dict[str, Any]) -> None:
        for k, obj in self._torch_parts().items():
            if k in dicts:
                obj.load_state_dict(dicts[k])

    def save(self) -> None:
        parts = self._torch_parts()
        self._saved_torch = _torch_blob(parts) if parts else None
        super().save()

    def restore(self) -> None:
        if self._saved_torch is not None:
            self._load(_torch_unblob(self._saved_torch))
        super().restore()

    def sync(self) -> None:
        parts = self._torch_parts()
        if parts:
            blob = broadcast_bytes(_torch_blob(parts) if _api.rank() == 0 else None)
            if _api.rank() != 0:
                self._load(_torch_unblob(blob))
        super().sync()


def _retryable(e: BaseException) -> bool:
    # Rendezvous errors (job ended, refused, server lost) are final; so is a mismatch (ranks
    # called different collectives, counts or dtypes: a program error a new round repeats);
    # another collective failure (a peer lost, a deadline, a shut-down communicator) means the
    # round is over.
    # A round ended by the server for this member's own removal (it was declared lost while
    # frozen, or the job was stopped) is final too: the others went on without it.
    return (
        isinstance(e, _dtcomm.DtcommError)
        and not isinstance(e, (_dtcomm.RdzvError, _dtcomm.MismatchError))
        and not getattr(e, "removed", False)
    )


def run(fn: Callable[..., R], state: State | None = None, *args: Any, **kwargs: Any) -> Any:
    """Runs ``fn(state, *args, **kwargs)`` elastically (see the module docs). With only
    ``fn``, returns the wrapped function (a decorator, like ``hvd.elastic.run``)."""

    @functools.wraps(fn)
    def wrapper(state: State, *a: Any, **kw: Any) -> R:
        if not _api.is_initialized():
            _api.init()
        g = _api._g("elastic.run")
        if g.member is None:
            raise _dtcomm.SetupError(
                "dtcomm.elastic.run needs the native rendezvous: set DTCOMM_RDZV_ENDPOINT to "
                "dt-rdzv's native port (and DTCOMM_RDZV_FINGERPRINT / DTCOMM_RDZV_TOKEN)"
            )
        reason: str | None = None
        while True:
            try:
                if reason is not None:
                    _api._renew(reason)
                    state.on_reset()
                state.sync()
                result = fn(state, *a, **kw)
                # Finish together: a member that returned and left the job (shutdown) while a
                # peer was still in its last commit() would look like a round change to that
                # peer, which would then wait for a round that can no longer form.
                _api.barrier()
                return result
            except HostsUpdatedInterrupt as e:
                reason = f"round changed: {e}"
            except Exception as e:
                if not _retryable(e):
                    raise
                state.restore()
                reason = f"{type(e).__name__}: {e}"

    if state is None:
        return wrapper
    return wrapper(state, *args, **kwargs)
