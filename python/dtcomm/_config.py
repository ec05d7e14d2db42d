"""Where rank, world size, local rank and the rendezvous come from, with provenance.

The rules live once, in the engine (``dtcomm_launch``, which the C ABI's ``dtcomm_comm_init``
uses too; ``docs/architecture.md`` lists the precedence): this module asks it
(``_dtcomm.resolve_launch``) and adds what only Python's ``dtcomm.init()`` takes (explicit local
rank and size, ``host_store``, ``timeout``). Explicit arguments come first, then ``DTCOMM_*``,
torchrun, Horovod, Open MPI and PMI, Slurm's ``srun``, OCI Data Science, else rank 0 of 1; the
rendezvous is ``DTCOMM_RDZV_ENDPOINT``, ``MASTER_ADDR``/``MASTER_PORT``, horovodrun's key-value
server, the MPI process manager's meeting (``mpi-session://``, ``mpi-pmix://``,
``mpi-pmi://``), or under ``srun`` rank 0's store on the first host of the step's node list.
A pair set by half is an error naming both variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

class ConfigError(ValueError):
    """The launcher environment is inconsistent (half-set pair, bad number, missing endpoint)."""


@dataclass(frozen=True)
class Value(Generic[T]):
    """A resolved value and where it came from (``explicit``, a variable name, ``default``)."""

    value: T
    source: str

    def show(self, name: str) -> str:
        return f"{name}={self.value} ({self.source})"


@dataclass(frozen=True)
class Resolved:
    """Everything ``dtcomm.init()`` needs to join a group."""

    rank: Value[int | None]
    world_size: Value[int]
    local_rank: Value[int]
    local_size: Value[int]
    endpoint: Value[str | None]
    run_id: Value[str]
    timeout: Value[float | None]
    host_store: Value[bool]
    #: Whether ranks come from the native rendezvous (``endpoint`` is then its native port).
    native: Value[bool] = Value(False, "default")
    #: Whether rank 0 of the job hosts the store by the launch rules (env://, PyTorchJob pods,
    #: an srun step), a new one at every init (``dtcomm_launch::hosted``).
    rank0_hosts: Value[bool] = Value(False, "default")

    def log_line(self) -> str:
        parts = [
            self.rank.show("rank") if self.rank.value is not None
            else f"rank=assigned at rendezvous ({self.rank.source})",
            self.world_size.show("world_size"),
            self.local_rank.show("local_rank"),
            self.local_size.show("local_size"),
            self.endpoint.show("rdzv"),
            self.run_id.show("run_id"),
            self.timeout.show("timeout"),
            self.host_store.show("host_store"),
        ]
        if self.native.value:
            parts = [p for p in parts if not p.startswith("host_store")]
            parts.append(self.native.show("native"))
        return " ".join(parts)


#: How an endpoint names horovodrun's HTTP key-value server.
HOROVOD_KV = "horovod-kv://"
#: How an endpoint names an Open MPI session directory where rank 0 leaves its address.
MPI_SESSION = "mpi-session://"
#: How an endpoint names the PMIx meeting of an Open MPI job across hosts.
MPI_PMIX = "mpi-pmix://"
#: How an endpoint names the PMI-1 meeting of a Hydra job.
MPI_PMI1 = "mpi-pmi://"


def _int(var: str, text: str, minimum: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ConfigError(f"{var}={text!r} is not an integer") from None
    if v < minimum:
        raise ConfigError(f"{var}={v} must be at least {minimum}")
    return v


def resolve(
    *,
    rank: int | None = None,
    world_size: int | None = None,
    local_rank: int | None = None,
    local_size: int | None = None,
    rdzv_endpoint: str | None = None,
    run_id: str | None = None,
    timeout: float | None = None,
    host_store: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> Resolved:
    """Resolves the launcher environment with the engine's rules (``dtcomm_launch``, one
    copy for every front end), then the arguments only Python takes. Raises
    :class:`ConfigError` naming the variables."""
    from . import _dtcomm

    env = dict(os.environ if env is None else env)
    if (rank is None) != (world_size is None):
        raise ConfigError(
            "init(rank=..., world_size=...): pass both or neither "
            f"(got rank={rank!r}, world_size={world_size!r})"
        )
    if (local_rank is None) != (local_size is None):
        raise ConfigError(
            "init(local_rank=..., local_size=...): pass both or neither "
            f"(got local_rank={local_rank!r}, local_size={local_size!r})"
        )
    try:
        got = _dtcomm.resolve_launch(env, rank=rank, world_size=world_size,
                                     rdzv_endpoint=rdzv_endpoint, run_id=run_id)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    # The engine's values differ in type by key (rank: int, endpoint: str | None, ...).
    v: dict[str, Value[Any]] = {k: Value(*got[k]) for k in got}
    native = v["native"]
    lr, ls = v["local_rank"], v["local_size"]
    if local_rank is not None and local_size is not None and not native.value:
        lr, ls = Value(local_rank, "explicit"), Value(local_size, "explicit")
    hs, r0 = v["host_store"], v["rank0_hosts"]
    if host_store is not None and not native.value:
        hs, r0 = Value(host_store, "explicit"), Value(False, "explicit host_store")
    to: Value[float | None]
    if timeout is not None:
        to = Value(float(timeout), "explicit")
    elif env.get("DTCOMM_TIMEOUT", "").strip():
        to = Value(None, "DTCOMM_TIMEOUT (engine)")
    elif (t := env.get("OCI__TIMEOUT", "").strip()):
        to = Value(float(_int("OCI__TIMEOUT", t, 1)), "OCI__TIMEOUT")
    else:
        to = Value(None, "engine default")
    return Resolved(v["rank"], v["world_size"], lr, ls, v["endpoint"], v["run_id"], to, hs,
                    native, r0)
