"""The process-wide group: ``init()``, ``shutdown()``, topology, and every collective on numpy
arrays and CPU torch tensors (sync, or ``async_op=True`` for a :class:`Work`)."""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Callable
from typing import Any

from . import _config, _dtcomm, _native
from ._arrays import empty, plain, shape
from ._threads import fit_torch_threads
from ._vocab import ReduceOp
from ._work import Work

log = logging.getLogger("dtcomm")


class _Group:
    """What ``init()`` built."""

    def __init__(
        self,
        comm: _dtcomm.Communicator,
        cfg: _config.Resolved,
        server: _dtcomm.RdzvServer | None,
        member: _native.Member | None = None,
        opts: dict[str, Any] | None = None,
    ) -> None:
        self.comm = comm
        self.cfg = cfg
        self.server = server
        #: The native rendezvous membership (``DTCOMM_RDZV_ENDPOINT`` on the native port).
        self.member = member
        #: Communicator options, to rebuild it for a new round.
        self.opts = opts or {}
        fit_torch_threads(comm.host_ranks, comm.rank)


_group: _Group | None = None


def _say(line: str) -> None:
    if log.handlers or logging.getLogger().handlers:
        log.info(line)
    else:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def init(
    rank: int | None = None,
    world_size: int | None = None,
    *,
    local_rank: int | None = None,
    local_size: int | None = None,
    rdzv_endpoint: str | None = None,
    run_id: str | None = None,
    timeout: float | None = None,
    host_store: bool | None = None,
    algo: str | None = None,
    socket_ifname: str | None = None,
    verbose: bool = True,
) -> None:
    """Joins the group. Rank, world size, local rank and the rendezvous resolve from the
    arguments, ``DTCOMM_*``, torchrun, Horovod / Open MPI / PMI and OCI variables, in that
    order; one line (stderr, or the ``dtcomm`` logger when logging is configured) shows each
    value and its source. Blocks until every rank joined or the deadline passes.

    A second ``init()`` after :func:`shutdown` joins a fresh group (every rank must call it).
    """
    global _group
    if _group is not None:
        raise RuntimeError(
            f"rank {_group.comm.rank}: dtcomm.init() called twice; call dtcomm.shutdown() first"
        )
    _dtcomm.init_logging()
    cfg = _config.resolve(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_size=local_size,
        rdzv_endpoint=rdzv_endpoint,
        run_id=run_id,
        timeout=timeout,
        host_store=host_store,
    )
    if cfg.native.value:
        _group = _init_native(cfg, algo=algo, socket_ifname=socket_ifname, verbose=verbose)
        return
    endpoint = cfg.endpoint.value
    if endpoint is not None and endpoint.startswith(_config.HOROVOD_KV):
        _group = _init_horovod_kv(cfg, endpoint, algo=algo, socket_ifname=socket_ifname,
                                  verbose=verbose)
        return
    # The engine's one join (what the C ABI runs): the meeting by the launch rules, rank 0's
    # store of this init, an OCI worker's rank, the generation.
    comm, server, gen = _dtcomm.join_store(cfg, timeout=cfg.timeout.value, algo=algo,
                                           socket_ifname=socket_ifname)
    _group = _Group(comm, cfg, server)
    if verbose:
        met = "" if gen is None else f" generation={gen}"
        _say(f"dtcomm: {cfg.log_line()}{met}; engine: {comm.config()}; {comm.transport()}")


def meet(cfg: _config.Resolved, wait: float,
         socket_ifname: str | None = None) -> tuple[str, _dtcomm.RdzvServer | None]:
    """The store endpoint every rank of ``cfg`` meets at, and the server this process hosts
    for it (rank 0's under Open MPI, MPICH, Slurm, OCI or torch's env:// rule; the engine's
    ``dtcomm_launch::meet``), or for a world of one a private in-process store."""
    met = _dtcomm.meet(cfg, wait, socket_ifname)
    if met is None:
        server = _dtcomm.RdzvServer("127.0.0.1", 0)
        return server.endpoint, server
    return met


def rank_of(cfg: _config.Resolved, add: Callable[[str], int], base: str) -> int:
    """This process's rank: the launcher's, or (an OCI worker) its number of arrival through
    the store counter ``add`` under ``base`` (``dtcomm://``'s, on torch's own store; the
    engine's join does the same in ``rank_and_generation``)."""
    me = cfg.rank.value
    if me is not None:
        return me
    me = add(f"{base}/oci-rank")
    if me >= cfg.world_size.value:
        raise _config.ConfigError(
            f"OCI worker joined as number {me} but OCI__WORKER_COUNT allows "
            f"{cfg.world_size.value - 1} workers"
        )
    return me


def _setup_wait(cfg: _config.Resolved) -> float:
    """Seconds a meeting before the engine's may wait: the engine's set-up deadline
    (``DTCOMM_SETUP_TIMEOUT``, else the explicit timeout, else ``DTCOMM_TIMEOUT``, else 300)."""
    try:
        return _dtcomm.engine_setup_timeout(cfg.timeout.value)
    except ValueError as e:
        raise _config.ConfigError(str(e)) from None


def _init_horovod_kv(cfg: _config.Resolved, endpoint: str, *, algo: str | None,
                     socket_ifname: str | None, verbose: bool) -> _Group:
    """Under a real ``horovodrun --gloo``: the addresses meet in its HTTP key-value server
    (``dtcomm._horovod_kv``); ranks are ``HOROVOD_RANK`` / ``HOROVOD_SIZE``."""
    from ._horovod_kv import HorovodKVStore

    addr, port = _dtcomm.split_host_port(endpoint[len(_config.HOROVOD_KV):], 0)
    wait = _setup_wait(cfg)
    store = HorovodKVStore(addr, port, wait)
    me = cfg.rank.value
    if me is None:
        raise _config.ConfigError("horovodrun's rendezvous needs HOROVOD_RANK")
    base = f"{cfg.run_id.value}/dtcomm"
    gen = store.add(f"{base}/gen/{me}", 1)
    comm = _dtcomm.Communicator.from_store(
        store, me, cfg.world_size.value, timeout=cfg.timeout.value, algo=algo,
        socket_ifname=socket_ifname, store_prefix=f"{base}/g{gen}")
    if verbose:
        _say(f"dtcomm: {cfg.log_line()} generation={gen}; engine: {comm.config()}; "
             f"{comm.transport()}")
    return _Group(comm, cfg, None)


def _round_cfg(cfg: _config.Resolved, w: _dtcomm.Welcome) -> _config.Resolved:
    src = f"native rendezvous, round {w.round}"
    return dataclasses.replace(
        cfg,
        rank=_config.Value(w.rank, src),
        world_size=_config.Value(w.world, src),
        local_rank=_config.Value(w.local_rank, src),
        local_size=_config.Value(w.local_world, src),
    )


def _connect_round(
    member: _native.Member, opts: dict[str, Any], ask_after: float | None = None
) -> _dtcomm.Communicator:
    """Builds the communicator of ``member``'s next round, taking later rounds when one ends
    while it is being built (the engine's ``Member::connect_round``, which the C ABI shares).
    Every step is bounded (join timeout, communicator timeout)."""
    return member.connect_round(ask_after=ask_after)


def _init_native(
    cfg: _config.Resolved, *, algo: str | None, socket_ifname: str | None, verbose: bool
) -> _Group:
    s = _native.settings(
        endpoint=cfg.endpoint.value,
        job=cfg.run_id.value if cfg.run_id.source == "explicit" else None,
    )
    opts: dict[str, Any] = dict(timeout=cfg.timeout.value, algo=algo, socket_ifname=socket_ifname)
    # Bound before joining: its address goes in the Join, and every round's links come to it.
    listener = _dtcomm.DataListener(**opts)
    member = _native.Member.join(s, listener=listener)
    try:
        comm = _connect_round(member, opts)
    except BaseException:
        member.leave()
        raise
    assert member.welcome is not None
    g = _Group(comm, _round_cfg(cfg, member.welcome), None, member, opts)
    if verbose:
        w = member.welcome
        _say(f"dtcomm: {g.cfg.log_line()} round={w.round} ({w.cause}); {s.log_line()}; "
             f"engine: {comm.config()}; {comm.transport()}")
    return g


def _renew(reason: str) -> _dtcomm.Welcome:
    """Elastic: drops the communicator and builds the next round's (a member was lost, left or
    joined). Survivors keep their ranks (the server's rule); returns the new welcome."""
    g = _g("elastic reset")
    if g.member is None:
        raise _dtcomm.SetupError(
            f"rank {g.comm.rank}: elastic reset ({reason}) needs the native rendezvous "
            "(DTCOMM_RDZV_ENDPOINT on dt-rdzv's native port)"
        )
    member = g.member
    old = member.welcome
    g.comm.shutdown()
    # If the server has not ended the round, wait for it to notice a loss; past twice its
    # heartbeat timeout, ask for a new round (the group failed without a membership change).
    hb = old.heartbeat_timeout if old is not None else 2.0
    comm = _connect_round(member, g.opts, ask_after=2 * hb + 1.0)
    assert member.welcome is not None
    g.comm = comm
    g.cfg = _round_cfg(g.cfg, member.welcome)
    w = member.welcome
    _say(f"dtcomm: {member.who}: new round {w.round} ({w.cause}), rank {w.rank} of {w.world} "
         f"(was {'-' if old is None else f'{old.rank} of {old.world} in round {old.round}'}); "
         f"reason: {reason}")
    return w


def _round_changed() -> bool:
    """Elastic: whether the server ended this member's round (polls pushed messages)."""
    g = _group
    return g is not None and g.member is not None and g.member.poll()


def shutdown() -> None:
    """Leaves the group: finishes queued calls, says goodbye to the peers, closes sockets (and
    the store this rank hosted). Later collectives raise ``ShutdownError``. Idempotent. A
    member of a native job leaves it (the others, if any, get a new round)."""
    global _group
    g, _group = _group, None
    if g is None:
        return
    g.comm.shutdown()
    if g.server is not None:
        g.server.stop()
    if g.member is not None:
        g.member.leave()


def is_initialized() -> bool:
    """Whether ``init()`` was called (and ``shutdown()`` not since)."""
    return _group is not None


def _g(op: str) -> _Group:
    g = _group
    if g is None:
        raise _dtcomm.ShutdownError(
            f"dtcomm.{op}() before dtcomm.init() (or after dtcomm.shutdown())"
        )
    return g


def _c(op: str) -> _dtcomm.Communicator:
    return _g(op).comm


def communicator() -> _dtcomm.Communicator:
    """The native communicator of the process group (for subgroups, build your own)."""
    return _c("communicator")


def rank() -> int:
    """This process's rank."""
    return _c("rank").rank


def size() -> int:
    """Number of ranks."""
    return _c("size").world


def local_rank() -> int:
    """Rank within this node (from the launcher, or the native rendezvous's round)."""
    return _g("local_rank").cfg.local_rank.value


def local_size() -> int:
    """Ranks on this node (from the launcher)."""
    return _g("local_size").cfg.local_size.value


def _done(native: _dtcomm.Work | None, result: Any) -> Any:
    return result if native is None else Work(native, result)


def all_reduce(x: Any, op: ReduceOp = ReduceOp.SUM, *, async_op: bool = False) -> Any:
    """In place: every rank's ``x`` becomes the reduction of all ranks' ``x``. Returns ``x``
    (or a :class:`Work` whose ``wait()`` returns it)."""
    w = _c("all_reduce").all_reduce(plain(x), op, async_op=async_op)
    return x if w is None else Work(w, x)


def broadcast(x: Any, root: int = 0, *, async_op: bool = False) -> Any:
    """In place: ``root``'s ``x`` is copied into every rank's ``x``. Returns ``x``."""
    return _done(_c("broadcast").broadcast(plain(x), root, async_op=async_op), x)


def reduce(x: Any, op: ReduceOp = ReduceOp.SUM, root: int = 0, *, async_op: bool = False) -> Any:
    """In place on ``root``: its ``x`` becomes the reduction; other ranks' ``x`` is unchanged."""
    return _done(_c("reduce").reduce(plain(x), op, root, async_op=async_op), x)


def all_gather(
    x: Any, out: Any | None = None, *, counts: list[int] | None = None, async_op: bool = False
) -> Any:
    """Every rank's ``x`` stacked in rank order: shape ``(world, *x.shape)`` (or, with
    ``counts`` of elements per rank, a flat ``out`` you pass). Returns ``out``."""
    c = _c("all_gather")
    if out is None:
        if counts is not None:
            out = empty(x, (sum(counts),))
        else:
            out = empty(x, (c.world, *shape(x)))
    return _done(c.all_gather(plain(x), plain(out), counts, async_op=async_op), out)


def reduce_scatter(
    x: Any, out: Any | None = None, op: ReduceOp = ReduceOp.SUM, *, async_op: bool = False
) -> Any:
    """Reduces every rank's ``x`` (``world`` equal blocks along dim 0) and returns this rank's
    block, shape ``(x.shape[0] // world, *x.shape[1:])``."""
    c = _c("reduce_scatter")
    if out is None:
        s = shape(x)
        if not s or s[0] % c.world:
            raise ValueError(
                f"rank {c.rank}: reduce_scatter: input shape {s} does not split into "
                f"{c.world} equal blocks along dim 0"
            )
        out = empty(x, (s[0] // c.world, *s[1:]))
    return _done(c.reduce_scatter(plain(x), plain(out), op, async_op=async_op), out)


def gather(x: Any, out: Any | None = None, root: int = 0, *, async_op: bool = False) -> Any:
    """Every rank's ``x`` stacked on ``root`` (shape ``(world, *x.shape)``); None elsewhere."""
    c = _c("gather")
    if out is None and c.rank == root:
        out = empty(x, (c.world, *shape(x)))
    res = out if c.rank == root else None
    return _done(
        c.gather(plain(x), None if out is None else plain(out), root, async_op=async_op), res
    )


def scatter(
    x: Any | None, out: Any | None = None, root: int = 0, *, async_op: bool = False
) -> Any:
    """Block p (along dim 0) of ``root``'s ``x`` lands in rank p's ``out``. Other ranks pass
    ``x=None`` and an ``out``; the root may omit ``out``."""
    c = _c("scatter")
    if out is None:
        if x is None:
            raise ValueError(f"rank {c.rank}: scatter: ranks other than the root pass out=")
        s = shape(x)
        if not s or s[0] % c.world:
            raise ValueError(
                f"rank {c.rank}: scatter: input shape {s} does not split into {c.world} blocks"
            )
        out = empty(x, (s[0] // c.world, *s[1:]))
    return _done(
        c.scatter(None if x is None else plain(x), plain(out), root, async_op=async_op), out
    )


def all_to_all(
    x: Any,
    out: Any | None = None,
    *,
    send_counts: list[int] | None = None,
    recv_counts: list[int] | None = None,
    async_op: bool = False,
) -> Any:
    """Block p of ``x`` goes to rank p, block p of the result comes from rank p (equal blocks,
    or ``send_counts`` / ``recv_counts`` elements per peer with a flat ``out``)."""
    c = _c("all_to_all")
    if out is None:
        if recv_counts is not None:
            out = empty(x, (sum(recv_counts),))
        else:
            out = empty(x, shape(x))
    return _done(
        c.all_to_all(plain(x), plain(out), send_counts, recv_counts, async_op=async_op), out
    )


def barrier(*, async_op: bool = False) -> Any:
    """Returns once every rank has called it."""
    return _done(_c("barrier").barrier(async_op=async_op), None)


def send(x: Any, peer: int, *, async_op: bool = False) -> Any:
    """Sends ``x`` to ``peer``, which calls :func:`recv` with a buffer of the same size."""
    return _done(_c("send").send(plain(x), peer, async_op=async_op), None)


def recv(x: Any, peer: int, *, async_op: bool = False) -> Any:
    """Receives ``peer``'s matching :func:`send` into ``x``. Returns ``x``."""
    return _done(_c("recv").recv(plain(x), peer, async_op=async_op), x)


def recv_any(x: Any) -> int:
    """Receives into ``x`` the next :func:`send` to this rank from any peer (the first to
    arrive); returns the sender's rank."""
    src: int = _c("recv").recv_any(plain(x))
    return src
