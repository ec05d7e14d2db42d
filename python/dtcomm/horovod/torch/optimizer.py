"""``hvd.DistributedOptimizer`` and ``hvd.broadcast_optimizer_state``: gradients allreduced by
name as each one is ready (hooks), waited for in ``step()``."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, TypeVar, overload

import torch

from dtcomm._vocab import ReduceOp

from . import _core as hvd
from ._collectives import Handle
from ._state import rt
from .compression import Compression, Compressor
from .process_sets import ProcessSet
from .sparse import sparse_allreduce_async

T = TypeVar("T")
#: ``groups``: a number of groups, or lists of parameters reduced together.
Groups: TypeAlias = "int | list[list[torch.Tensor]]"

if TYPE_CHECKING:
    # For the checker, the mixin is the optimizer it is mixed into (its attributes and the
    # methods ``super()`` reaches); at run time it is a plain mixin.
    _OptimizerBase: TypeAlias = torch.optim.Optimizer
else:
    _OptimizerBase = object


def _split_list(items: list[T], n: int) -> list[list[T]]:
    """``items`` in ``n`` nearly equal consecutive chunks (the first ones one longer)."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def _check_groups(groups: object) -> None:
    """Raises ValueError unless ``groups`` is None, a positive number, or lists of distinct
    tensors."""
    if groups is None:
        return
    if not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "torch.Tensor.")
    if isinstance(groups, list):
        seen: set[int] = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor.")
                if id(p) in seen:
                    raise ValueError("A parameter can only appear once in groups.")
                seen.add(id(p))


# A submitted reduction: (handle, compression context).
_Pending: TypeAlias = "tuple[Handle, Any]"
# What ``_handles`` holds: ``id(p)`` -> (p, handle or None, context), or ``id(group)`` -> a
# _GroupEntry once the whole group was submitted.
_ParamEntry: TypeAlias = "tuple[torch.Tensor, Handle | None, Any]"


class _GroupEntry(NamedTuple):
    """A group of parameters whose reductions were submitted together."""

    params: tuple[torch.Tensor, ...]
    #: (handle, compression context) per parameter.
    pending: list[_Pending]


class _DistributedMixin(_OptimizerBase):
    """Mixed into the wrapped optimizer's class (as Horovod does)."""

    #: Set by :func:`DistributedOptimizer` before ``_hvd_setup``.
    _process_set: ProcessSet | None

    def _hvd_setup(self, named_parameters: Iterable[tuple[str, torch.Tensor]] | None,
                   compression: type[Compressor], backward_passes_per_step: int,
                   op: int, gradient_predivide_factor: float, groups: Groups | None,
                   sparse_as_dense: bool) -> None:
        """Checks the arguments, names every parameter and registers the gradient hooks."""
        if op == hvd.Adasum:
            raise NotImplementedError("Adasum is not supported by dtcomm's Horovod API")
        if gradient_predivide_factor != 1.0 and op != hvd.Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        if backward_passes_per_step <= 0:
            raise ValueError("backward_passes_per_step must be > 0")
        _check_groups(groups)
        self._compression = compression
        self._op = op
        self._predivide = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.backward_passes_per_step = backward_passes_per_step
        param_groups = self.param_groups
        params = [p for g in param_groups for p in g["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            if any(not isinstance(n, tuple) for n in named):
                raise ValueError("named_parameters should be a sequence of tuples "
                                 "(name, parameter)")
            names = [n for n, _ in named]
            if len(set(names)) != len(names):
                raise ValueError("Parameter names in named_parameters must be unique")
            self._names = {id(p): n for n, p in named}
            missing = [p for p in params if id(p) not in self._names]
            if missing:
                raise ValueError(
                    "named_parameters was specified, but one or more model parameters were not "
                    "named. Python object ids: " + ", ".join(str(id(p)) for p in missing))
        else:
            self._names = {id(p): f"allreduce.noname.{i}.{j}"
                           for i, g in enumerate(param_groups) for j, p in enumerate(g["params"])}
        # Per-parameter tables are keyed by ``id(p)``: a tensor's own ``__hash__`` is Python
        # code, paid several times per gradient per step otherwise.
        self._handles: dict[int, _ParamEntry | _GroupEntry] = {}
        self._delay = {id(p): backward_passes_per_step for p in params}
        self._requires_update = [p for p in params if p.requires_grad]
        self._should_sync = True
        self._synchronized = False
        self._groups = groups
        self._p_to_group: dict[int, tuple[torch.Tensor, ...]] = {}
        self._group_counts: dict[int, int] = {}  # by id(group)
        self._hooks = []
        # A rank outside the optimizer's process set steps on its own gradients (Horovod's
        # rule): no hooks, and synchronize() has nothing to wait for.
        self._member = hvd._set_state(self._process_set).set_rank is not None
        if self._member and (hvd._group(self._process_set).size > 1
                             or os.environ.get("HOROVOD_ELASTIC") == "1"):
            if groups is not None:
                self._form_groups(groups)
            for p in self._requires_update:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._hook))

    @property
    def _parameter_names(self) -> dict[torch.Tensor, str]:
        """Horovod's table: each parameter and the name its gradient is reduced under."""
        params = [p for g in self.param_groups for p in g["params"]]
        return {p: self._names[id(p)] for p in params}

    def _form_groups(self, groups: Groups) -> None:
        """Groups of parameters whose gradients are reduced together, the same on every rank:
        ordered as rank 0 lists them, then ``groups`` chunks, or the given lists plus one
        group per parameter in none of them."""
        p_list = list(self._requires_update)
        root = hvd._group(self._process_set).ranks[0]
        order = hvd.broadcast_object([self._names[id(p)] for p in p_list], root_rank=root,
                                     name="hvd.optimizer.groups", process_set=self._process_set)
        index = {name: i for i, name in enumerate(order)}
        p_list.sort(key=lambda p: index[self._names[id(p)]])
        if isinstance(groups, list):
            ids = {id(p) for p in p_list}
            p_groups = [[p for p in g if id(p) in ids] for g in groups]
            grouped = {id(p) for g in p_groups for p in g}
            p_groups += [[p] for p in p_list if id(p) not in grouped]
        else:
            p_groups = _split_list(p_list, groups)
        for g in p_groups:
            if not g:
                continue
            t = tuple(g)
            for p in t:
                self._p_to_group[id(p)] = t
            self._group_counts[id(t)] = 0

    def _allreduce_grad_async(self, p: torch.Tensor, name: str | None = None) -> _Pending:
        if p.grad is None:
            # Another rank may have produced this gradient: take part with zeros.
            p.grad = torch.zeros_like(p)
        name = name or self._names[id(p)]
        tensor = p.grad
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                return sparse_allreduce_async(tensor, name=name, op=self._op,
                                              process_set=self._process_set), None
            tensor = tensor.to_dense()
        if self._op == hvd.Average:
            ranks = hvd._group(self._process_set).size
            pre, post = 1.0 / self._predivide, self._predivide / ranks
            op = hvd.Sum
        else:
            pre, post, op = 1.0, 1.0, self._op
        compressed, ctx = self._compression.compress(tensor)
        if rt.timeline is None:
            # The gradient path: lent to the negotiator as is, no handle table (the same
            # name as allreduce_async_ gives it, so ranks may mix both).
            return hvd._lend_allreduce(compressed, "allreduce." + name,
                                       ReduceOp.from_horovod(op), pre, post,
                                       self._process_set), ctx
        h = hvd.allreduce_async_(compressed, name=name, op=op, prescale_factor=pre,
                                 postscale_factor=post, process_set=self._process_set)
        return h, ctx

    def _grouped_allreduce_grad_async(self, group: tuple[torch.Tensor, ...]) -> list[_Pending]:
        # One named operation per tensor (``<first parameter's name>.<i>``), all submitted at
        # once when the whole group is ready; the negotiator fuses them as the threshold allows.
        base = self._names[id(group[0])]
        return [self._allreduce_grad_async(p, f"{base}.{i}") for i, p in enumerate(group)]

    # ``_handles``: ``id(p)`` -> (p, handle or None, context), or ``id(group)`` -> (group,
    # [(handle, context) per parameter]) once the whole group was submitted.

    def _hook(self, p: torch.Tensor) -> None:
        k = id(p)
        entry = self._handles.get(k)
        if entry is not None and entry[1] is not None and self._delay[k] <= 0:
            raise AssertionError(
                "Gradients were computed more than backward_passes_per_step times before "
                "call to step(). Increase backward_passes_per_step to accumulate gradients "
                "locally.")
        self._delay[k] -= 1
        if self._delay[k] != 0:
            if entry is None:
                self._handles[k] = (p, None, None)
            return
        if self._groups is None:
            self._handles[k] = (p, *self._allreduce_grad_async(p))
            return
        group = self._p_to_group[k]
        g = id(group)
        self._group_counts[g] += 1
        if self._group_counts[g] == len(group):
            self._handles[g] = _GroupEntry(group, self._grouped_allreduce_grad_async(group))
            for gp in group:
                self._handles.pop(id(gp), None)
            self._group_counts[g] = 0
        else:
            self._handles[k] = (p, None, None)

    def _write_back(self, p: torch.Tensor, out: torch.Tensor, ctx: Any) -> None:
        self._delay[id(p)] = self.backward_passes_per_step
        grad = p.grad
        assert grad is not None
        if grad.is_sparse:
            agg = out if out.is_sparse else self._compression.decompress(out, ctx).to_sparse()
            grad.zero_().add_(agg.to(grad.dtype))
        elif out is not grad:  # (an in-place reduction of the gradient itself is there already)
            grad.copy_(self._compression.decompress(out, ctx).reshape(grad.shape))

    def synchronize(self) -> None:
        """Waits for every gradient's reduction (starting those whose hook did not run: zeros
        for gradients this rank never produced)."""
        if not self._member:
            self._synchronized = True
            return
        handles = self._handles
        done: set[int] = set()
        for key, entry in handles.items():
            if isinstance(entry, _GroupEntry):
                done.update(id(p) for p in entry.params)
            else:
                done.add(key)
        for p in self._requires_update:
            if id(p) not in done:
                handles[id(p)] = (p, *self._allreduce_grad_async(p))
        for key, entry in list(handles.items()):
            if not isinstance(entry, _GroupEntry) and entry[1] is None:
                handles[key] = (entry[0], *self._allreduce_grad_async(entry[0]))
        for entry in handles.values():
            if isinstance(entry, _GroupEntry):
                for p, (h, ctx) in zip(entry.params, entry.pending, strict=True):
                    self._write_back(p, hvd.synchronize(h), ctx)
            else:
                p, pending, ctx = entry
                assert pending is not None  # (every parameter's reduction was started above)
                self._write_back(p, hvd.synchronize(pending), ctx)
        for g in self._group_counts:
            self._group_counts[g] = 0
        handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Use after an explicit ``synchronize()``: the next ``step()`` does not wait again."""
        self._should_sync = False
        try:
            yield
        finally:
            self._should_sync = True

    def set_backward_passes_per_step(self, passes: int) -> None:
        """Changes how many backward passes accumulate before a reduction."""
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def load_state_dict(self, *args: Any, **kwargs: Any) -> None:
        # Forgets pending reductions (e.g. of a failed round, before an elastic restore).
        self._handles = {}
        self._synchronized = False
        self._should_sync = True
        for g in self._group_counts:
            self._group_counts[g] = 0
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step
        return super().load_state_dict(*args, **kwargs)

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Waits for the gradients' reductions (unless skipped), then steps."""
        if self._should_sync:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "after optimizer.synchronize(). This can cause training slowdown.",
                              stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args: Any, **kwargs: Any) -> None:
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize().")
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(
        optimizer: torch.optim.Optimizer,
        named_parameters: Iterable[tuple[str, torch.Tensor]] | None = None,
        compression: type[Compressor] = Compression.none, backward_passes_per_step: int = 1,
        op: int = hvd.Average, gradient_predivide_factor: float = 1.0, num_groups: int = 0,
        groups: Groups | None = None, sparse_as_dense: bool = False,
        process_set: ProcessSet | None = None) -> _DistributedMixin:
    """Wraps ``optimizer`` so that ``step()`` applies gradients averaged over every rank (of
    ``process_set``, when given; a rank outside the set steps on its own gradients), reduced
    by parameter name as each becomes ready during ``backward()``. ``groups``: a
    number of groups, or lists of parameters, reduced together once all of a group's
    gradients are ready. Sparse gradients travel as ``sparse_allreduce_async`` (allgathered
    indices and values) unless ``sparse_as_dense``, which allreduces them dense and makes
    them sparse again."""
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be "
                      "removed in v0.23.0.", DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    cls: type[_DistributedMixin] = type(optimizer.__class__.__name__,
                                        (_DistributedMixin, optimizer.__class__), {})
    opt = cls.__new__(cls)
    opt.__dict__.update(optimizer.__dict__)
    opt._process_set = process_set
    opt._hvd_setup(named_parameters, compression, backward_passes_per_step, op,
                   gradient_predivide_factor, groups, sparse_as_dense)
    return opt


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              model: torch.nn.Module | None = None) -> None:
    """Makes every rank's optimizer state (hyper-parameters and per-parameter state) equal to
    ``root_rank``'s. A new optimizer's state is made first, as Horovod does: zero gradients and
    one step of the wrapped optimizer (never a reducing step), so every rank has state to
    receive and each trainable parameter is left with a zero gradient."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        sparse = {id(p) for m in (model.modules() if model is not None else ())
                  if isinstance(m, torch.nn.Embedding) and m.sparse for p in m.parameters()}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
                    if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse:
                        p.grad = p.grad.to_sparse()
        if isinstance(optimizer, _DistributedMixin):
            super(_DistributedMixin, optimizer).step()
        else:
            optimizer.step()
    state = hvd.broadcast_object(optimizer.state_dict(), root_rank=root_rank,
                                 name="optimizer_state")
    optimizer.load_state_dict(state)
