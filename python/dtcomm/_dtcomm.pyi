"""Type stubs of the native module dtcomm._dtcomm (Rust, PyO3)."""

from collections.abc import Callable
from typing import Any, Literal, final, overload

__all__ = [
    "Communicator", "Work", "Negotiator", "RdzvServer", "StoreClient", "NativeClient", "Welcome",
    "Peer", "RdzvEvent", "DataListener", "NativeMember", "init_logging", "progress_record",
    "flight_take_dump_ask", "flight_dumps_on_timeout", "flight_dump_asked",
    "set_compute_threads", "usable_cores", "split_host_port", "join_host_port", "cuda_status",
    "flight_entries", "flight_summary",
    "flight_dump", "flight_dump_bytes", "flight_capacity", "job_token", "store_link_secret",
    "resolve_launch",
    "native_settings", "slurm_step", "join_store", "meet", "is_native", "parse_members",
    "engine_setup_timeout", "DtcommError", "CommTimeoutError", "PeerLostError", "RoundEndedError",
    "MismatchError", "SetupError", "ShutdownError", "DeviceError", "RdzvError",
    "RdzvConnectError", "RdzvRefusedError", "RdzvJobEndedError", "RdzvTimeoutError",
    "RdzvLostError", "RdzvRoundChangedError", "__version__", "STORE_PORT", "NATIVE_PORT",
    "HTTP_PORT",
]

__version__: str
#: The default ports of ``dt-rdzv serve``'s doors (TCPStore, native QUIC, HTTP).
STORE_PORT: int
NATIVE_PORT: int
HTTP_PORT: int

def split_host_port(endpoint: str, default_port: int) -> tuple[str, int]:
    """``host[:port]`` (IPv6 in brackets) as (host without brackets, port), ``default_port``
    where none is given; ``ValueError`` names what does not read."""

def join_host_port(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 host."""

class DtcommError(RuntimeError):
    # Set on errors of the collective engine (not on the Rdzv* errors):
    result_code: int  # the stable code, as the C ABI's dtcomm_result_t (2 timeout, 5 mismatch, ...)
    result_name: str  # "timeout", "peer_lost", "mismatch", ...
    rank: int
    peer: int | None
    op: str | None
    seq: int | None
    waiting_for: list[int]

class CommTimeoutError(DtcommError): ...
class PeerLostError(DtcommError): ...

class RoundEndedError(PeerLostError):
    lost_rank: int | None  # the rank whose loss or departure ended the round
    round: int
    cause: str  # the server's words
    removed: bool  # this member itself is out of the job

class MismatchError(DtcommError): ...
class SetupError(DtcommError): ...
class ShutdownError(DtcommError): ...
class DeviceError(DtcommError): ...
class RdzvError(DtcommError): ...
class RdzvConnectError(RdzvError): ...

class RdzvRefusedError(RdzvError):
    code: str
    server_message: str

class RdzvJobEndedError(RdzvError):
    job: str
    how: str
    end: str

class RdzvTimeoutError(RdzvError): ...
class RdzvLostError(RdzvError): ...
class RdzvRoundChangedError(RdzvError): ...

# What a call with ``callback=`` calls once it ended: with its error, or None (stubs only).
_Callback = Callable[[BaseException | None], object]

@final
class Negotiator:
    """Horovod-style name-based negotiation and fusion over a communicator."""
    def __new__(cls, comm: Communicator, cycle_ms: float, threshold: int) -> Negotiator: ...
    def submit(self, name: str, kind: str, dtype: str, shape: list[int], data: Any, *,
               root: int | None = None, op: str | None = None, prescale: float = 1.0,
               postscale: float = 1.0, splits: list[int] = ..., in_place: bool = False) -> int: ...
    def poll(self, handle: int) -> bool: ...
    def wait(self, handle: int) -> tuple[bytes, list[int], tuple[int, int, int]]: ...
    def mark_cycles(self, on: bool) -> None: ...
    def take_cycle_marks(self) -> tuple[list[int], int]: ...
    def ended_by(self) -> str | None: ...
    def shutdown(self) -> None: ...

@final
class Work:
    def wait(self, timeout: float | None = None) -> bool: ...
    def is_completed(self) -> bool: ...
    def exception(self) -> BaseException | None: ...
    @property
    def op(self) -> str: ...
    @property
    def source(self) -> int | None: ...

def set_compute_threads(n: int) -> None: ...
def usable_cores() -> int: ...

@final
class Communicator:
    @staticmethod
    def connect(
        endpoint: str,
        rank: int,
        world: int,
        *,
        prefix: str = "",
        timeout: float | None = None,
        algo: str | None = None,
        socket_ifname: str | None = None,
        nsocks_perpeer: int | None = None,
        store_prefix: str | None = None,
    ) -> Communicator: ...
    @staticmethod
    def from_store(
        store: Any,
        rank: int,
        world: int,
        *,
        timeout: float | None = None,
        algo: str | None = None,
        socket_ifname: str | None = None,
        nsocks_perpeer: int | None = None,
        store_prefix: str | None = None,
    ) -> Communicator: ...
    @staticmethod
    def from_welcome(
        listener: DataListener,
        job: str,
        round: int,
        rank: int,
        world: int,
        addrs: list[str | None],
        token: str,
        client: NativeClient | None = None,
        hosts: list[bytes] | None = None,
    ) -> Communicator: ...
    @property
    def rank(self) -> int: ...
    @property
    def world(self) -> int: ...
    @property
    def host_ranks(self) -> int: ...
    @property
    def is_shutdown(self) -> bool: ...
    def config(self) -> str: ...
    def transport(self) -> str: ...
    def set_flight_group(self, group: int, global_ranks: list[int]) -> bool: ...
    @property
    def flight_group(self) -> int: ...
    def all_reduce_algo(self, count: int, dtype: str) -> str: ...
    def failure(self) -> BaseException | None: ...
    def arm_abort(self) -> None: ...
    def abort(self, why: str, lost: int | None = None) -> None: ...
    def shutdown(self) -> None: ...
    def all_reduce(
        self, buf: Any, op: int = 1, *, async_op: bool = False, callback: _Callback | None = None
    ) -> Work | None: ...
    def broadcast(
        self, buf: Any, root: int = 0, *, async_op: bool = False, callback: _Callback | None = None
    ) -> Work | None: ...
    def reduce(
        self,
        buf: Any,
        op: int = 1,
        root: int = 0,
        *,
        async_op: bool = False,
        callback: _Callback | None = None,
    ) -> Work | None: ...
    def all_gather(
        self,
        send: Any,
        recv: Any,
        counts: list[int] | None = None,
        *,
        async_op: bool = False,
        callback: _Callback | None = None,
    ) -> Work | None: ...
    def reduce_scatter(
        self,
        send: Any,
        recv: Any,
        op: int = 1,
        *,
        async_op: bool = False,
        callback: _Callback | None = None,
    ) -> Work | None: ...
    def gather(
        self,
        send: Any,
        recv: Any | None = None,
        root: int = 0,
        *,
        async_op: bool = False,
        callback: _Callback | None = None,
    ) -> Work | None: ...
    def scatter(
        self,
        send: Any | None,
        recv: Any,
        root: int = 0,
        *,
        async_op: bool = False,
        callback: _Callback | None = None,
    ) -> Work | None: ...
    def all_to_all(
        self,
        send: Any,
        recv: Any,
        send_counts: list[int] | None = None,
        recv_counts: list[int] | None = None,
        *,
        async_op: bool = False,
        callback: _Callback | None = None,
    ) -> Work | None: ...
    def barrier(
        self, *, async_op: bool = False, callback: _Callback | None = None
    ) -> Work | None: ...
    def send(
        self, buf: Any, peer: int, *, async_op: bool = False, callback: _Callback | None = None
    ) -> Work | None: ...
    def recv(
        self, buf: Any, peer: int, *, async_op: bool = False, callback: _Callback | None = None
    ) -> Work | None: ...
    @overload
    def recv_any(
        self, buf: Any, *, async_op: Literal[False] = False, callback: None = None
    ) -> int: ...
    @overload
    def recv_any(
        self, buf: Any, *, async_op: bool = False, callback: _Callback | None = None
    ) -> int | Work: ...

@final
class RdzvServer:
    def __new__(cls, host: str = "127.0.0.1", port: int = 0) -> RdzvServer: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def port(self) -> int: ...
    def stop(self) -> None: ...

@final
class StoreClient:
    def __new__(cls, endpoint: str, timeout: float = 60.0) -> StoreClient: ...
    def set(self, key: str, value: bytes) -> None: ...
    def get(self, key: str, timeout: float | None = None) -> bytes: ...
    def add(self, key: str, delta: int) -> int: ...
    def wait(self, keys: list[str], timeout: float | None = None) -> None: ...
    def check(self, keys: list[str]) -> bool: ...
    def delete_key(self, key: str) -> bool: ...

@final
class Peer:
    rank: int
    member: str
    node: str
    addrs: list[str]
    host: list[int]  # the host record it advertised (empty: none)
    observed_ip: str

@final
class Welcome:
    job: str
    round: int
    cause: str
    rank: int
    world: int
    local_rank: int
    local_world: int
    node_rank: int
    nodes: int
    peers: list[Peer]
    all_peers: bool
    restarts: int
    heartbeat_timeout: float
    config: list[tuple[str, bytes]]
    def config_dict(self) -> dict[str, bytes]: ...

@final
class RdzvEvent:
    kind: str
    job: str | None
    round: int | None
    why: str | None
    how: str | None
    waiting: int | None
    key: str | None
    value: bytes | None
    welcome: Welcome | None

@final
class DataListener:
    def __new__(
        cls,
        *,
        timeout: float | None = None,
        algo: str | None = None,
        socket_ifname: str | None = None,
        nsocks_perpeer: int | None = None,
    ) -> DataListener: ...
    @property
    def addr(self) -> str: ...
    @property
    def host_record(self) -> bytes: ...

@final
class NativeMember:
    """One member of a native job (the engine's member): join, rounds, values, communicators."""

    def __new__(
        cls,
        env: dict[str, str],
        listener: DataListener | None = None,
        *,
        endpoint: str | None = None,
        job: str | None = None,
        members: tuple[int, int] | None = None,
        token: str | None = None,
        fingerprint: str | None = None,
        cacert: str | None = None,
        store: str | None = None,
        last_call: float | None = None,
        join_timeout: float | None = None,
    ) -> NativeMember: ...
    def next_welcome(
        self, timeout: float | None = None, ask_after: float | None = None
    ) -> Welcome: ...
    def poll(self) -> bool: ...
    def communicator(self) -> Communicator: ...
    def connect_round(self, ask_after: float | None = None) -> Communicator: ...
    def publish_round_value(self, key: str, value: str) -> None: ...
    def round_value(self, key: str, timeout: float, what: str) -> str: ...
    def relay_records(self, world: int, records: list[bytes]) -> int: ...
    def report(self, round: int, rank: int, evidence: str) -> None: ...
    def leave(self) -> None: ...
    def finish(self) -> None: ...
    @property
    def welcome(self) -> Welcome | None: ...
    @property
    def ended(self) -> str | None: ...
    @property
    def waiting(self) -> int: ...
    @property
    def job_end(self) -> str | None: ...
    @property
    def who(self) -> str: ...

@final
class NativeClient:
    def __new__(
        cls,
        endpoint: str,
        token: str = "",
        *,
        fingerprint: str | None = None,
        cacert: str | None = None,
        server_name: str = "localhost",
        timeout: float = 30.0,
        reconnect: float | None = ...,  # 60 seconds
        job: str | None = None,
    ) -> NativeClient: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def join(
        self,
        job: str,
        member: str,
        node: str,
        *,
        addrs: list[str] = ...,  # none
        host: bytes = ...,  # none
        main: bool = False,
        min_members: int = 1,
        max_members: int = 1024,
        max_spares: int = 1024,
        last_call: float = 3.0,
        join_timeout: float = 600.0,
        max_rounds: int = 0,
        max_restarts: int | None = None,
        late_join: str = "immediate",
        ephemeral: bool = False,
        ttl: float | None = None,
        full_peer_table_max: int = 64,
    ) -> tuple[int, bool]: ...
    def wait_welcome(self, timeout: float) -> Welcome: ...
    def next_message(self, timeout: float) -> RdzvEvent | None: ...
    def try_message(self) -> RdzvEvent | None: ...
    def current(self) -> Welcome | None: ...
    def config(self) -> dict[str, bytes]: ...
    def publish(self, key: str, value: bytes) -> None: ...
    def next_round(self) -> None: ...
    def report(self, round: int, rank: int, evidence: str) -> None: ...
    def lookup(self, ranks: list[int]) -> list[Peer]: ...
    def status(self, job: str | None = None) -> list[dict[str, Any]]: ...
    def stop(self, job: str, reason: str = "stopped from Python") -> None: ...
    def leave(self) -> None: ...
    def finish(self) -> None: ...
    def close(self) -> None: ...

def init_logging() -> None: ...
def progress_record(rank: int) -> bytes:
    """This rank's call summary as a store record (``dtcomm/progress/<rank>``)."""
    ...

def flight_take_dump_ask() -> tuple[int, str] | None:
    """``(rank, why)`` of this process's last call that timed out and dumped, not yet taken."""
    ...

def flight_dumps_on_timeout() -> bool:
    """Whether a timeout dumps the trace here (``TORCH_FR_DUMP_ON_TIMEOUT``, recorder on)."""
    ...

def flight_dump_asked(rank: int, asker: int | None, why: str) -> None:
    """Rank ``asker`` (``None``: unknown) timed out and asked every rank to dump: dumps
    ``rank``'s trace unless this process dumped on a timeout in the last 30 s."""
    ...
def cuda_status(python_prefix: str | None = None) -> dict[str, Any]:
    """The engine's CUDA/NCCL probe as a dict (see ``dtcomm.cuda_status``)."""
    ...

def flight_entries() -> list[dict[str, Any]]:
    """The flight recorder's entries, oldest first (see ``dtcomm.debug.entries``)."""
    ...

def flight_summary(rank: int, round: int = 0) -> dict[str, Any]:
    """Global rank `rank`'s summary (see ``dtcomm.debug.summary``)."""
    ...

def flight_dump(path: str, rank: int | None = None) -> int:
    """Writes the trace in torch's Flight Recorder format; returns the calls it holds."""
    ...

def flight_dump_bytes(rank: int | None = None) -> bytes:
    """The trace in torch's Flight Recorder format (pickle bytes)."""
    ...

def flight_capacity() -> int:
    """Calls the flight recorder keeps (0: off)."""
    ...

def job_token(server_token: str, job: str) -> str:
    """The token of one job: it opens that job only (join, status, stop)."""
    ...

def store_link_secret(token: str, job: str, round: int) -> str | None:
    """The store path's link secret (hex) for the workers of ``round`` of ``job``
    (``DTCOMM_LINK_SECRET``); None for an empty token."""
    ...

def slurm_step(env: dict[str, str]) -> dict[str, Any] | None:
    """The ``srun`` step this process is a task of (rank, world, local_rank, local_size, node,
    nodes, first_host, port, run_id), or None; ValueError when Slurm's variables disagree."""
    ...

def join_store(resolved: Any, *, timeout: float | None = None, algo: str | None = None,
               socket_ifname: str | None = None
               ) -> tuple[Communicator, RdzvServer | None, int | None]:
    """Joins the group ``resolved`` (a ``dtcomm._config.Resolved``) describes through a store,
    the engine's one join (what the C ABI runs): ``(communicator, the store this process hosts
    or None, generation or None)``."""
    ...

def is_native(env: dict[str, str], endpoint: str) -> tuple[bool, str]:
    """Whether ``endpoint`` speaks dt-rdzv's native protocol by the launch rules:
    ``(bool, source)``; ValueError naming a bad ``DTCOMM_RDZV_BACKEND`` or endpoint."""
    ...

def parse_members(text: str, var: str) -> tuple[int, int]:
    """``N`` or ``MIN:MAX`` as ``(min, max)``; ValueError naming ``var``."""
    ...

def meet(resolved: Any, wait: float, socket_ifname: str | None = None
         ) -> tuple[str, RdzvServer | None] | None:
    """The store every rank of ``resolved`` meets at by the launch rules: ``(endpoint, the
    store this process hosts or None)``, or None for a world of one."""
    ...

def engine_setup_timeout(timeout: float | None = None) -> float:
    """The engine's set-up deadline in seconds as it resolves it (``DTCOMM_SETUP_TIMEOUT``,
    else ``timeout`` when given, else ``DTCOMM_TIMEOUT``, else 300). Raises ValueError naming
    a bad value."""
    ...

def native_settings(
    env: dict[str, str],
    *,
    endpoint: str | None = None,
    job: str | None = None,
    members: tuple[int, int] | None = None,
    token: str | None = None,
    fingerprint: str | None = None,
    cacert: str | None = None,
    store: str | None = None,
    last_call: float | None = None,
    join_timeout: float | None = None,
) -> dict[str, Any]:
    """The native rendezvous' settings by the engine's rules: ``name: (value, source)`` plus
    ``server_name`` and ``log_line``. Raises ValueError naming the variable."""
    ...

def resolve_launch(
    env: dict[str, str],
    rank: int | None = None,
    world_size: int | None = None,
    rdzv_endpoint: str | None = None,
    run_id: str | None = None,
) -> dict[str, tuple[object, str]]: ...
