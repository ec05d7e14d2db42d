"""``hvd.elastic.TorchState``: a model, an optimizer, samplers and plain values that survive
a reset (Horovod's ``TorchState`` on ``dtcomm.elastic.State``).

``save()`` keeps a copy in memory (``commit()`` = save + ``check_host_updates()``),
``restore()`` goes back to it, ``sync()`` makes every rank's state rank 0's with this
module's collectives (``broadcast_parameters``, ``broadcast_optimizer_state``,
``broadcast_object``) and saves it. Plain values travel in dtcomm's code-free format (see
``broadcast_object``), never as pickles.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from dtcomm import _api
from dtcomm.elastic import HostsUpdatedInterrupt, State

from .. import _core
from ..optimizer import broadcast_optimizer_state
from .sampler import ElasticSampler


class StateHandler:
    """Saves, restores and syncs one kind of value."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.save()

    def save(self) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError

    def sync(self, name: str) -> None:
        raise NotImplementedError

    def set_value(self, value: Any) -> None:
        self.value = value
        self.save()


class _StateDictHandler(StateHandler):
    def save(self) -> None:
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(copy.deepcopy(self._saved))


class ModelStateHandler(_StateDictHandler):
    """A ``torch.nn.Module``: its ``state_dict``, broadcast in place."""

    def sync(self, name: str) -> None:
        _core.broadcast_parameters(self.value.state_dict(), root_rank=0,
                                   prefix=f"elastic.{name}.")


class OptimizerStateHandler(_StateDictHandler):
    """A ``torch.optim.Optimizer``: its ``state_dict``."""

    def sync(self, name: str) -> None:
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(_StateDictHandler):
    """An :class:`ElasticSampler`: epoch and processed samples."""

    def sync(self, name: str) -> None:
        self.value.load_state_dict(_core.broadcast_object(
            self.value.state_dict(), root_rank=0, name=f"elastic.{name}"))


_handler_registry: list[tuple[type, type[StateHandler]]] = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry() -> list[tuple[type, type[StateHandler]]]:
    """The (type, handler class) pairs :class:`TorchState` picks handlers from, in order."""
    return _handler_registry


def set_handler_registry(registry: list[tuple[type, type[StateHandler]]]) -> None:
    global _handler_registry
    _handler_registry = registry


def _handler(value: Any) -> StateHandler | None:
    for kind, cls in _handler_registry:
        if isinstance(value, kind):
            return cls(value)
    return None


class TorchState(State):
    """``TorchState(model=None, optimizer=None, **kwargs)``: every keyword becomes an
    attribute; modules, optimizers and ``ElasticSampler`` s are handled by their
    ``state_dict``, other values are copied. Assigning a new model/optimizer/sampler to an
    attribute saves it."""

    #: The handler of each attribute that has one (modules, optimizers, samplers).
    _handlers: dict[str, StateHandler]
    #: The last saved copy of the other attributes.
    _saved_state: dict[str, Any]

    def __init__(self, model: torch.nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None, **kwargs: Any) -> None:
        super().__init__()
        values = {**kwargs, "model": model, "optimizer": optimizer}
        handlers: dict[str, StateHandler] = {}
        plain: dict[str, Any] = {}
        for k, v in values.items():
            h = _handler(v) if v is not None else None
            if h is not None:
                handlers[k] = h
            elif v is not None or k in kwargs:
                plain[k] = v
        object.__setattr__(self, "_handlers", handlers)
        object.__setattr__(self, "_saved_state", copy.deepcopy(plain))
        for k, h in handlers.items():
            object.__setattr__(self, k, h.value)
        for k, v in plain.items():
            object.__setattr__(self, k, v)
        if model is None:
            object.__setattr__(self, "model", None)
        if optimizer is None:
            object.__setattr__(self, "optimizer", None)

    def __setattr__(self, name: str, value: Any) -> None:
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)

    def save(self) -> None:
        for h in self._handlers.values():
            h.save()
        self._saved_state = copy.deepcopy({k: getattr(self, k) for k in self._saved_state})

    def restore(self) -> None:
        for h in self._handlers.values():
            h.restore()
        for k, v in copy.deepcopy(self._saved_state).items():
            object.__setattr__(self, k, v)

    def sync(self) -> None:
        """Every rank takes rank 0's state (the saved copy of plain values, as Horovod), then
        saves it."""
        for name in sorted(self._handlers):
            self._handlers[name].sync(name)
        if self._saved_state:
            values = _core.broadcast_object(self._saved_state, root_rank=0,
                                            name="elastic.values")
            for k, v in values.items():
                object.__setattr__(self, k, v)
        self.save()

    def reset(self) -> None:
        """Runs after a reset, before the state is synced (Horovod's hook; nothing here)."""

    def on_reset(self) -> None:
        self.reset()
        super().on_reset()

    def check_host_updates(self) -> None:
        """Raises ``HostsUpdatedInterrupt`` on every rank at once if any rank saw the
        rendezvous end this round (members joined or left): the ranks agree with a Max
        allreduce, as Horovod agrees with a broadcast."""
        local = 1 if _api._round_changed() else 0
        agreed = _core.allreduce(torch.tensor([local], dtype=torch.int32), op=_core.Max,
                                 name="elastic.check_host_updates")
        if int(agreed.item()):
            g = _api._group
            why = g.member.ended if g is not None and g.member is not None else None
            e = HostsUpdatedInterrupt(why or "another rank saw the round end")
            e.skip_sync = False
            raise e
