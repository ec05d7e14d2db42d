"""Where rank, world size, local rank and the rendezvous come from, with provenance.

Precedence (``docs/architecture.md``; the same rules as the engine's ``dtcomm::launch``): explicit
arguments, then ``DTCOMM_*``, then torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``, ``TORCHELASTIC_RUN_ID``), then Horovod,
Open MPI and PMI (``HOROVOD_RANK``, ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK`` and their sizes),
then OCI Data Science (``OCI__MODE``, ``OCI__WORKER_COUNT``, ``OCI__TIMEOUT``), else rank 0 of 1.
The rendezvous: ``DTCOMM_RDZV_ENDPOINT``, torchrun's ``MASTER_ADDR``/``MASTER_PORT``,
``horovodrun --gloo``'s HTTP key-value server (``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``_PORT``,
``dtcomm._horovod_kv``), or, under ``mpirun`` on one host, the job's session directory: rank 0
hosts a store on loopback and leaves its address there (``dtcomm._mpi_session``); across hosts
the job's PMIx server passes it (``dtcomm._mpi_session.meet_pmix``).

With ``DTCOMM_RDZV_ENDPOINT`` on dt-rdzv's native port (``dtcomm._native``), the native
rendezvous assigns rank, world size and local rank, unless a launcher already did (a rank pair
from explicit arguments, ``DTCOMM_RANK``, torchrun, Horovod or MPI): then that launcher's
rendezvous (``MASTER_ADDR``/``MASTER_PORT``) is used and the native endpoint is not joined.
A pair set by half (a rank without its size, an address without its port) is an error naming
both variables. The engine's own settings (``DTCOMM_TIMEOUT``, ``DTCOMM_ALGO``, ...) resolve in
Rust; this module only resolves what launchers set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

#: (rank variable, size variable, label) in precedence order after the explicit arguments.
RANK_PAIRS: tuple[tuple[str, str], ...] = (
    ("DTCOMM_RANK", "DTCOMM_WORLD_SIZE"),
    ("RANK", "WORLD_SIZE"),
    ("HOROVOD_RANK", "HOROVOD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
)
LOCAL_PAIRS: tuple[tuple[str, str], ...] = (
    ("DTCOMM_LOCAL_RANK", "DTCOMM_LOCAL_WORLD_SIZE"),
    ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)
RUN_ID_VARS: tuple[str, ...] = ("DTCOMM_RUN_ID", "TORCHELASTIC_RUN_ID")
DEFAULT_PORT = 29400


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


def _set(env: Mapping[str, str], var: str) -> str | None:
    v = env.get(var)
    return v.strip() if v is not None and v.strip() != "" else None


def _int(var: str, text: str, minimum: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ConfigError(f"{var}={text!r} is not an integer") from None
    if v < minimum:
        raise ConfigError(f"{var}={text!r} must be >= {minimum}")
    return v


def _pair(
    env: Mapping[str, str],
    pairs: tuple[tuple[str, str], ...],
) -> tuple[int, int, str] | None:
    """The first fully set pair as (rank, size, "A, B"); a half-set pair is an error."""
    for a, b in pairs:
        va, vb = _set(env, a), _set(env, b)
        if va is None and vb is None:
            continue
        if va is None or vb is None:
            have, miss = (a, b) if va is not None else (b, a)
            raise ConfigError(
                f"{have}={env[have]!r} is set but {miss} is not: set both {a} and {b}, or neither"
            )
        r, n = _int(a, va, 0), _int(b, vb, 1)
        if r >= n:
            raise ConfigError(f"{a}={r} is not below {b}={n}")
        return r, n, f"{a}, {b}"
    return None


def _endpoint(env: Mapping[str, str]) -> Value[str | None]:
    ep = _set(env, "DTCOMM_RDZV_ENDPOINT")
    if ep is not None:
        has_port = ep.rsplit("]", 1)[-1].count(":") == 1 if ep.startswith("[") else ep.count(":") == 1
        return Value(ep if has_port else f"{ep}:{DEFAULT_PORT}", "DTCOMM_RDZV_ENDPOINT")
    addr, port = _set(env, "MASTER_ADDR"), _set(env, "MASTER_PORT")
    if (addr is None) != (port is None):
        have, miss = ("MASTER_ADDR", "MASTER_PORT") if addr else ("MASTER_PORT", "MASTER_ADDR")
        raise ConfigError(
            f"{have}={env[have]!r} is set but {miss} is not: set both MASTER_ADDR and "
            "MASTER_PORT, or neither"
        )
    if addr is not None and port is not None:
        _int("MASTER_PORT", port, 1)
        host = f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr
        return Value(f"{host}:{port}", "MASTER_ADDR, MASTER_PORT")
    # A real `horovodrun --gloo`: its HTTP key-value server (dtcomm._horovod_kv).
    haddr, hport = _set(env, "HOROVOD_GLOO_RENDEZVOUS_ADDR"), _set(env, "HOROVOD_GLOO_RENDEZVOUS_PORT")
    if haddr is not None and hport is not None:
        _int("HOROVOD_GLOO_RENDEZVOUS_PORT", hport, 1)
        return Value(f"{HOROVOD_KV}{haddr}:{hport}",
                     "HOROVOD_GLOO_RENDEZVOUS_ADDR, HOROVOD_GLOO_RENDEZVOUS_PORT")
    # `mpirun` on one host: rank 0's address, met in the job's session directory.
    if (session := mpi_session_dir(env)) is not None:
        return Value(f"{MPI_SESSION}{session}", "Open MPI session directory (one host)")
    # `mpirun` across hosts: rank 0's address, passed by the job's PMIx server.
    if (nspace := mpi_pmix_namespace(env)) is not None:
        return Value(f"{MPI_PMIX}{nspace}", "Open MPI's PMIx server (across hosts)")
    # `mpiexec.hydra` (MPICH, Intel MPI): rank 0's address, passed through its PMI-1 socket.
    if (sock := pmi1_socket(env)) is not None:
        return Value(f"{MPI_PMI1}{sock}", "Hydra's PMI-1 socket (mpiexec.hydra)")
    return Value(None, "default")


def mpi_session_dir(env: Mapping[str, str]) -> str | None:
    """The session directory every rank of an Open MPI job on one host shares (Open MPI 4's
    ``OMPI_MCA_orte_jobfam_session_dir``, 5's ``PMIX_SERVER_TMPDIR``), or ``None`` when the job
    is not Open MPI's or spans hosts."""
    size, local = _set(env, "OMPI_COMM_WORLD_SIZE"), _set(env, "OMPI_COMM_WORLD_LOCAL_SIZE")
    if size is None or local is None or size.strip() != local.strip():
        return None
    return _set(env, "OMPI_MCA_orte_jobfam_session_dir") or _set(env, "PMIX_SERVER_TMPDIR")


def mpi_pmix_namespace(env: Mapping[str, str]) -> str | None:
    """The PMIx namespace of an Open MPI job whose ranks span hosts (``PMIX_NAMESPACE``), or
    ``None`` when the job is not Open MPI's, fits on one host, or has no PMIx server."""
    size, local = _set(env, "OMPI_COMM_WORLD_SIZE"), _set(env, "OMPI_COMM_WORLD_LOCAL_SIZE")
    if size is None or local is None or size.strip() == local.strip():
        return None
    return _set(env, "PMIX_NAMESPACE")


def pmi1_socket(env: Mapping[str, str]) -> str | None:
    """How a Hydra job's ranks reach their PMI-1 proxy (``PMI_FD=6``, ``PMI_PORT=host:port``),
    or ``None`` when no PMI-1 process manager started them."""
    if _set(env, "PMI_RANK") is None:
        return None
    if (fd := _set(env, "PMI_FD")) is not None:
        return f"PMI_FD={fd}"
    if (port := _set(env, "PMI_PORT")) is not None:
        return f"PMI_PORT={port}"
    return None


#: How an endpoint names horovodrun's HTTP key-value server.
HOROVOD_KV = "horovod-kv://"
#: How an endpoint names an Open MPI session directory where rank 0 leaves its address.
MPI_SESSION = "mpi-session://"
#: How an endpoint names the PMIx meeting of an Open MPI job across hosts.
MPI_PMIX = "mpi-pmix://"
#: How an endpoint names the PMI-1 meeting of a Hydra job.
MPI_PMI1 = "mpi-pmi://"


def _truthy(text: str | None) -> bool:
    return text is not None and text.strip().lower() in ("1", "true", "t", "yes", "y")


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
    """Resolves the launcher environment. Raises :class:`ConfigError` naming the variables."""
    env = os.environ if env is None else env

    # rank / world size
    r: Value[int | None]
    if (rank is None) != (world_size is None):
        raise ConfigError(
            "init(rank=..., world_size=...): pass both or neither "
            f"(got rank={rank!r}, world_size={world_size!r})"
        )
    oci_mode = (_set(env, "OCI__MODE") or "").upper()
    if rank is not None and world_size is not None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} is not in a world of {world_size}")
        r, w = Value(rank, "explicit"), Value(world_size, "explicit")
    elif (found := _pair(env, RANK_PAIRS)) is not None:
        rv, wv, src = found
        r, w = Value(rv, src.split(", ")[0]), Value(wv, src.split(", ")[1])
    elif oci_mode in ("MAIN", "WORKER"):
        count = _set(env, "OCI__WORKER_COUNT")
        n = _int("OCI__WORKER_COUNT", count, 0) + 1 if count is not None else 2
        r = Value(0, "OCI__MODE=MAIN") if oci_mode == "MAIN" else Value(None, "OCI__MODE=WORKER")
        w = Value(n, "OCI__WORKER_COUNT + 1 (main)" if count is not None else "OCI default")
    else:
        r, w = Value(0, "default"), Value(1, "default")

    # local rank / size
    if (local_rank is None) != (local_size is None):
        raise ConfigError(
            "init(local_rank=..., local_size=...): pass both or neither "
            f"(got local_rank={local_rank!r}, local_size={local_size!r})"
        )
    lr: Value[int]
    ls: Value[int]
    if local_rank is not None and local_size is not None:
        lr, ls = Value(local_rank, "explicit"), Value(local_size, "explicit")
    elif (found := _pair(env, LOCAL_PAIRS)) is not None:
        lv, sv, src = found
        lr, ls = Value(lv, src.split(", ")[0]), Value(sv, src.split(", ")[1])
    elif w.value == 1:
        lr, ls = Value(0, "default"), Value(1, "default")
    else:
        lr, ls = Value(0, "default (unknown)"), Value(1, "default (unknown)")

    # rendezvous: the native port assigns ranks unless a launcher did
    from . import _native

    raw = rdzv_endpoint if rdzv_endpoint is not None else _set(env, "DTCOMM_RDZV_ENDPOINT")
    nat = _native.is_native(env, raw) if raw is not None else Value(False, "default")
    launcher_rank = r.source not in ("default", "OCI__MODE=MAIN", "OCI__MODE=WORKER")
    if nat.value and launcher_rank:
        nat = Value(False, f"rank from {r.source}: that launcher's rendezvous is used")
        raw = None
        rdzv_endpoint = None
        env = {k: v for k, v in env.items() if k != "DTCOMM_RDZV_ENDPOINT"}
    if nat.value:
        assert raw is not None
        # One server or a comma-separated list of them (fail-over order).
        hosts = [_native.split_host_port(e, _native.NATIVE_PORT) for e in raw.split(",") if e.strip()]
        src = "explicit" if rdzv_endpoint is not None else "DTCOMM_RDZV_ENDPOINT"
        why = f"native rendezvous ({nat.source})"
        r, w = Value(None, why), Value(0, why)
        lr, ls = Value(0, why), Value(1, why)
        ep: Value[str | None] = Value(",".join(_native.join_host_port(h, p) for h, p in hosts), src)
    elif rdzv_endpoint is not None:
        ep = Value(rdzv_endpoint, "explicit")
    else:
        ep = _endpoint(env)
        if ep.value is None and oci_mode == "MAIN":
            ep = Value(f"0.0.0.0:{DEFAULT_PORT}", "OCI__MODE=MAIN hosts it")
    if ep.value is None and w.value > 1:
        hint = ""
        if r.source == "OMPI_COMM_WORLD_RANK":
            hint = (" (mpirun across hosts without a PMIx server, PMIX_NAMESPACE unset: pass it "
                    "to every rank, e.g. mpirun -x DTCOMM_RDZV_ENDPOINT=host:port, with a dt-rdzv "
                    "serve there)")
        raise ConfigError(
            f"rank {r.value}: a world of {w.value} ({w.source}) needs a rendezvous endpoint: set "
            "DTCOMM_RDZV_ENDPOINT=host:port (or MASTER_ADDR and MASTER_PORT), or launch with dtrun"
            + hint
        )

    # who hosts the store: torch's env:// rule (rank 0 hosts MASTER_ADDR:MASTER_PORT unless the
    # launcher's agent does), or OCI's MAIN
    hs: Value[bool]
    if nat.value:
        hs = Value(False, "native rendezvous")
    elif host_store is not None:
        hs = Value(host_store, "explicit")
    elif _set(env, "DTCOMM_RDZV_HOST") is not None:
        hs = Value(_truthy(env.get("DTCOMM_RDZV_HOST")), "DTCOMM_RDZV_HOST")
    elif ep.source == "MASTER_ADDR, MASTER_PORT" and r.value == 0:
        # (a world of one too: torchrun points it at a store nobody else hosts)
        agent = _truthy(env.get("TORCHELASTIC_USE_AGENT_STORE"))
        hs = Value(not agent, "TORCHELASTIC_USE_AGENT_STORE" if agent else "rank 0 of env://")
    elif oci_mode == "MAIN" and rdzv_endpoint is None:
        hs = Value(True, "OCI__MODE=MAIN")
    else:
        hs = Value(False, "default")

    # run id and timeout
    rid: Value[str] = Value(run_id, "explicit") if run_id is not None else Value("dtcomm", "default")
    if run_id is None:
        for var in RUN_ID_VARS:
            if (v := _set(env, var)) is not None:
                rid = Value(v, var)
                break
    to: Value[float | None]
    if timeout is not None:
        to = Value(float(timeout), "explicit")
    elif (t := _set(env, "DTCOMM_TIMEOUT")) is not None:
        to = Value(None, "DTCOMM_TIMEOUT (engine)")
    elif (t := _set(env, "OCI__TIMEOUT")) is not None:
        to = Value(float(_int("OCI__TIMEOUT", t, 1)), "OCI__TIMEOUT")
    else:
        to = Value(None, "engine default")
    return Resolved(r, w, lr, ls, ep, rid, to, hs, nat)
