"""The native rendezvous from Python: settings (with provenance) and one member's rounds.

``dt-rdzv serve`` has two doors: the TCPStore port (29400) and the native QUIC port (29401).
A member joins a *job* on the native port and the server pushes each completed *round*: rank,
world, local rank, node rank and peers (a :class:`~dtcomm._dtcomm.Welcome`). Liveness is the
server's (heartbeats), so a lost member ends the round for everyone at once. If the server
itself restarts, the client reconnects and resumes its round (same number and rank) on its own;
the communicator is untouched and no round change is seen.

``dtcomm.init()`` builds the communicator of a round from the round's ``Welcome``, with no
store: the member binds its data listener (:class:`~dtcomm._dtcomm.DataListener`) before it
joins and sends the address in its ``Join``; the welcome's peer table says where every other
rank listens. Every data link proves membership with HMAC-SHA256 over a secret derived from
the job's token and the round number (``dtcomm::round_secret``), so connections from
strangers or from another round are dropped, and a resumed round (after a server restart)
keeps its secret. Such a job works against ``dt-rdzv serve --no-tcpstore``.

``dtrun --rdzv-backend native`` hands its workers a store that node 0's agent hosts for the
round (like torchrun's agents; its address goes through the native protocol as configuration
entry ``dtrun.store`` = ``"<round> <host:port>"``); ``torchrun --rdzv-backend dtcomm`` does the
same for its agents (group rank 0's agent, entry ``dtcomm.torchrun.store``). Nothing of a native
job is on the server's TCPStore port.

Environment (every value has a source in the start-up line):

==============================  ===========================================================
``DTCOMM_RDZV_ENDPOINT``        ``host[:port]`` of the native port (29401 if left out); several,
                                comma-separated, to fail over between servers
``DTCOMM_RDZV_BACKEND``         ``native`` or ``store``; default: native when a trust variable
                                is set or the port is 29401, else the TCPStore protocol
``DTCOMM_RDZV_TOKEN``           the server's token or the job's (:func:`dtcomm.job_token`), or
                                ``DTCOMM_RDZV_TOKEN_FILE``: its first line
``DTCOMM_RDZV_FINGERPRINT``     ``sha256:...`` the server printed (or ``DTCOMM_RDZV_CACERT``)
``DTCOMM_RDZV_STORE``           ``host:port`` of the server's TCPStore port (the store path
                                only; native jobs do not use it)
``DTCOMM_RDZV_MEMBERS``         ``N`` or ``MIN:MAX`` members (else ``OCI__WORKER_COUNT`` + 1)
``DTCOMM_RDZV_LAST_CALL``       seconds to wait for more members once ``MIN`` are there (3)
``DTCOMM_RDZV_JOIN_TIMEOUT``    seconds a round may take to form (else ``OCI__TIMEOUT``; 600)
``DTCOMM_RDZV_EPHEMERAL``       the job ends when its main member leaves (else
                                ``OCI__EPHEMERAL``)
``DTCOMM_RDZV_MAX_RESTARTS``    rounds the job may start because a member was lost
``DTCOMM_RDZV_RECONNECT``       seconds a member keeps reconnecting when the server goes away
                                (a restart) to resume its round (60; 0: never)
``DTCOMM_RDZV_MEMBER``          this member's id (default ``<node>:<pid>``)
``DTCOMM_RDZV_NODE``            this member's node (default the host name)
``DTCOMM_RUN_ID``               the job (else ``TORCHELASTIC_RUN_ID``, OCI ``JOB_OCID``;
                                default ``dtcomm``)
``OCI__MODE=MAIN``              join as the job's main member (rank 0, may publish)
==============================  ===========================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import _dtcomm
from ._config import ConfigError, Value

NATIVE_PORT = _dtcomm.NATIVE_PORT
STORE_PORT = _dtcomm.STORE_PORT


def _set(env: Mapping[str, str], var: str) -> str | None:
    v = env.get(var)
    return v.strip() if v is not None and v.strip() != "" else None


def split_host_port(endpoint: str, default_port: int) -> tuple[str, int]:
    """``host[:port]`` (IPv6 in brackets) as (host without brackets, port): the Rust crates'
    one reading (``dt_rdzv_proto::endpoint``)."""
    try:
        return _dtcomm.split_host_port(endpoint, default_port)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def join_host_port(host: str, port: int) -> str:
    return _dtcomm.join_host_port(host, port)


def own_ip(w: _dtcomm.Welcome) -> str:
    """This node's address as the server saw it (what the other nodes can reach), else
    loopback."""
    for p in w.peers:
        if p.rank == w.rank and p.observed_ip:
            return p.observed_ip.removeprefix("::ffff:")
    return "127.0.0.1"


def is_native(env: Mapping[str, str], endpoint: str | None = None) -> Value[bool]:
    """Whether ``endpoint`` (default ``DTCOMM_RDZV_ENDPOINT``) speaks the native protocol (the
    launch rules' answer, ``dtcomm_launch::is_native``)."""
    ep = endpoint if endpoint is not None else _set(env, "DTCOMM_RDZV_ENDPOINT")
    if ep is None:
        return Value(False, "no DTCOMM_RDZV_ENDPOINT")
    try:
        native, source = _dtcomm.is_native(dict(env), ep)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return Value(native, source)


def parse_members(text: str, var: str) -> tuple[int, int]:
    """``N`` or ``MIN:MAX`` as (min, max) (the native settings' rule)."""
    try:
        return _dtcomm.parse_members(text, var)
    except ValueError as e:
        raise ConfigError(str(e)) from None


@dataclass(frozen=True)
class Settings:
    """Everything needed to connect to the native port and join a job, with provenance."""

    endpoint: Value[str]
    token: Value[str]
    fingerprint: Value[str | None]
    cacert: Value[str | None]
    store: Value[str]
    job: Value[str]
    member: Value[str]
    node: Value[str]
    main: Value[bool]
    members: Value[tuple[int, int]]
    last_call: Value[float]
    join_timeout: Value[float]
    ephemeral: Value[bool]
    max_restarts: Value[int | None]
    server_name: str = "localhost"
    #: Seconds a member keeps reconnecting after the server went away (0: never).
    reconnect: Value[float] = Value(60.0, "default")
    #: What these settings were resolved from (the environment and the explicit values), so
    #: that the engine's member resolves the very same ones.
    sources: tuple[dict[str, str], dict[str, Any]] = field(
        default=({}, {}), repr=False, compare=False)

    def log_line(self) -> str:
        mn, mx = self.members.value
        size = str(mn) if mn == mx else f"{mn}:{mx}"
        trust = (f"fingerprint ({self.fingerprint.source})" if self.fingerprint.value
                 else f"cacert={self.cacert.value} ({self.cacert.source})")
        return (
            f"native rdzv={self.endpoint.value} ({self.endpoint.source}) "
            f"job={self.job.value} ({self.job.source}) member={self.member.value} "
            f"({self.member.source}) node={self.node.value} members={size} "
            f"({self.members.source}) main={self.main.value} ({self.main.source}) "
            f"join_timeout={self.join_timeout.value:g}s ({self.join_timeout.source}) "
            f"ephemeral={self.ephemeral.value} ({self.ephemeral.source}) "
            f"store={self.store.value} ({self.store.source}) trust={trust} "
            f"token=({self.token.source})"
        )

    def connect(self, timeout: float = 30.0) -> _dtcomm.NativeClient:
        """A connection to the native port (raises ``RdzvConnectError``)."""
        return _dtcomm.NativeClient(
            self.endpoint.value,
            self.token.value,
            fingerprint=self.fingerprint.value,
            cacert=self.cacert.value,
            server_name=self.server_name,
            timeout=timeout,
            reconnect=self.reconnect.value or None,
            job=self.job.value,
        )

    def spec(self) -> dict[str, object]:
        """The job spec as ``NativeClient.join`` keywords."""
        mn, mx = self.members.value
        return dict(
            main=self.main.value,
            min_members=mn,
            max_members=mx,
            last_call=self.last_call.value,
            join_timeout=self.join_timeout.value,
            ephemeral=self.ephemeral.value,
            max_restarts=self.max_restarts.value,
        )


def settings(
    env: Mapping[str, str] | None = None,
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
) -> Settings:
    """Resolves the native rendezvous settings: explicit arguments, then ``DTCOMM_RDZV_*``,
    then the OCI Data Science variables, then defaults, by the engine's rules
    (``dtcomm_launch::native::NativeSettings``, what the C ABI uses too). Raises
    :class:`ConfigError` naming the variable."""
    env = os.environ if env is None else env
    explicit: dict[str, Any] = dict(
        endpoint=endpoint, job=job, members=members, token=token, fingerprint=fingerprint,
        cacert=cacert, store=store, last_call=last_call, join_timeout=join_timeout)
    try:
        d = _dtcomm.native_settings(dict(env), **explicit)
    except ValueError as e:
        raise ConfigError(str(e)) from None

    def v(name: str) -> Value[Any]:
        value, source = d[name]
        return Value(value, source)

    return Settings(
        v("endpoint"), v("token"), v("fingerprint"), v("cacert"), v("store"), v("job"),
        v("member"), v("node"), v("main"), v("members"), v("last_call"), v("join_timeout"),
        v("ephemeral"), v("max_restarts"), server_name=d["server_name"], reconnect=v("reconnect"),
        sources=(dict(env), explicit),
    )


#: The round this member was setting up ended before it was ready (retry with the next).
RoundChanged = _dtcomm.RdzvRoundChangedError


class Member:
    """One member of a native job: the engine's member (``dtcomm_launch::native::Member``,
    also what the C ABI joins with), seen from Python. It keeps the rounds the server pushes:
    the current welcome, why the round ended, members waiting to join, per-round values rank 0
    publishes, the job's end.

    Every wait is bounded: by ``settings.join_timeout`` for a round to form, and by a timeout
    for everything else; errors name the job, the member and the round.
    """

    def __init__(self, settings: Settings, inner: _dtcomm.NativeMember,
                 listener: _dtcomm.DataListener | None) -> None:
        self.settings = settings
        self._inner = inner
        #: This member's data listener (bound before joining; serves every round).
        self.listener = listener

    @classmethod
    def join(cls, s: Settings, listener: _dtcomm.DataListener | None = None) -> Member:
        """Connects and joins (the round may still be forming). With ``listener``, its
        address (and host record) is this member's data address in the job's peer table."""
        env, explicit = s.sources
        inner = _dtcomm.NativeMember(env or dict(os.environ), listener, **explicit)
        return cls(s, inner, listener)

    @property
    def welcome(self) -> _dtcomm.Welcome | None:
        return self._inner.welcome

    @property
    def ended(self) -> str | None:
        """Why the current round is over (superseded or ended), once it is."""
        return self._inner.ended

    @property
    def waiting(self) -> int:
        """Members waiting to join, as the server last said."""
        return self._inner.waiting

    @property
    def job_end(self) -> str | None:
        """The job's end (or this member's removal), once the server said so."""
        return self._inner.job_end

    @property
    def who(self) -> str:
        return self._inner.who

    def communicator(self) -> _dtcomm.Communicator:
        """The current round's communicator, over :attr:`listener` and the welcome's peer
        table (no store), fenced by the round. Raises :class:`RoundChanged` if the round
        already ended."""
        assert self.listener is not None, "communicator() needs a member joined with a listener"
        return self._inner.communicator()

    def poll(self) -> bool:
        """Takes the messages already received; True when the current round is over (a member
        was lost, left or joined). Raises ``RdzvJobEndedError`` when the job ended."""
        return self._inner.poll()

    def next_welcome(self, timeout: float | None = None,
                     ask_after: float | None = None) -> _dtcomm.Welcome:
        """The next round: the first one, or one after the current. With ``ask_after``
        seconds, a member whose round the server has not ended by then asks for a new one (its
        group failed without a membership change). Waits at most ``timeout`` (default the join
        timeout plus the server's heartbeat timeout)."""
        return self._inner.next_welcome(timeout, ask_after)

    def connect_round(self, ask_after: float | None = None) -> _dtcomm.Communicator:
        """The next round's communicator, taking later rounds when one ends during set-up
        (a member lost, left or joined); ``ask_after`` as :meth:`next_welcome`'s."""
        assert self.listener is not None, "connect_round() needs a member joined with a listener"
        return self._inner.connect_round(ask_after)

    def publish_round_value(self, key: str, value: str) -> None:
        """Publishes ``value`` for the current round under configuration entry ``key``
        (rank 0; the job's members read it with :meth:`round_value`)."""
        self._inner.publish_round_value(key, value)

    def relay_records(self, world: int, records: list[bytes]) -> int:
        """Relays the summaries this member's workers wrote in their store (each worker's
        ``dtcomm/progress/<rank>`` value) to the server, so that ``dt-rdzv status --hang`` and
        ``/v1/jobs/JOB/hang`` diagnose the workers (a launcher's agent, whose workers meet
        through a store, not as members). Returns how many it relayed."""
        return self._inner.relay_records(world, records)

    def round_value(self, key: str, timeout: float, what: str) -> str:
        """What rank 0 published for the current round under ``key`` (waits at most
        ``timeout``). Raises :class:`RoundChanged` if the round ends first."""
        return self._inner.round_value(key, timeout, what)

    def report(self, round: int, rank: int, evidence: str) -> None:
        """Tells the server this member's link to ``rank`` of ``round`` broke, and how (the
        server probes that member before acting on it)."""
        self._inner.report(round, rank, evidence)

    def finish(self) -> None:
        """Ends the job for every member (``Finish``); later joins are refused."""
        self._inner.finish()

    def leave(self) -> None:
        """Leaves the job for good (the others get a new round)."""
        try:
            self._inner.leave()
        except _dtcomm.RdzvError:
            pass

    def close(self) -> None:
        self._inner.leave()
