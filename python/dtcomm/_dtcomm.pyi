"""Type stubs of the native module dtcomm._dtcomm (Rust, PyO3)."""

from collections.abc import Callable
from typing import Any, final

__version__: str

class DtcommError(RuntimeError): ...
class CommTimeoutError(DtcommError): ...
class PeerLostError(DtcommError): ...
class MismatchError(DtcommError): ...
class SetupError(DtcommError): ...
class ShutdownError(DtcommError): ...

Callback = Callable[[BaseException | None], object]

@final
class Work:
    def wait(self, timeout: float | None = None) -> bool: ...
    def is_completed(self) -> bool: ...
    def exception(self) -> BaseException | None: ...
    @property
    def op(self) -> str: ...

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
    @property
    def rank(self) -> int: ...
    @property
    def world(self) -> int: ...
    @property
    def is_shutdown(self) -> bool: ...
    def config(self) -> str: ...
    def transport(self) -> str: ...
    def all_reduce_algo(self, count: int, dtype: str) -> str: ...
    def failure(self) -> BaseException | None: ...
    def shutdown(self) -> None: ...
    def all_reduce(
        self, buf: Any, op: int = 1, *, async_op: bool = False, callback: Callback | None = None
    ) -> Work | None: ...
    def broadcast(
        self, buf: Any, root: int = 0, *, async_op: bool = False, callback: Callback | None = None
    ) -> Work | None: ...
    def reduce(
        self,
        buf: Any,
        op: int = 1,
        root: int = 0,
        *,
        async_op: bool = False,
        callback: Callback | None = None,
    ) -> Work | None: ...
    def all_gather(
        self,
        send: Any,
        recv: Any,
        counts: list[int] | None = None,
        *,
        async_op: bool = False,
        callback: Callback | None = None,
    ) -> Work | None: ...
    def reduce_scatter(
        self,
        send: Any,
        recv: Any,
        op: int = 1,
        *,
        async_op: bool = False,
        callback: Callback | None = None,
    ) -> Work | None: ...
    def gather(
        self,
        send: Any,
        recv: Any | None = None,
        root: int = 0,
        *,
        async_op: bool = False,
        callback: Callback | None = None,
    ) -> Work | None: ...
    def scatter(
        self,
        send: Any | None,
        recv: Any,
        root: int = 0,
        *,
        async_op: bool = False,
        callback: Callback | None = None,
    ) -> Work | None: ...
    def all_to_all(
        self,
        send: Any,
        recv: Any,
        send_counts: list[int] | None = None,
        recv_counts: list[int] | None = None,
        *,
        async_op: bool = False,
        callback: Callback | None = None,
    ) -> Work | None: ...
    def barrier(
        self, *, async_op: bool = False, callback: Callback | None = None
    ) -> Work | None: ...
    def send(
        self, buf: Any, peer: int, *, async_op: bool = False, callback: Callback | None = None
    ) -> Work | None: ...
    def recv(
        self, buf: Any, peer: int, *, async_op: bool = False, callback: Callback | None = None
    ) -> Work | None: ...

@final
class RdzvServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def port(self) -> int: ...
    def stop(self) -> None: ...

@final
class StoreClient:
    def __init__(self, endpoint: str, timeout: float = 60.0) -> None: ...
    def set(self, key: str, value: bytes) -> None: ...
    def get(self, key: str, timeout: float | None = None) -> bytes: ...
    def add(self, key: str, delta: int) -> int: ...
    def wait(self, keys: list[str], timeout: float | None = None) -> None: ...
    def check(self, keys: list[str]) -> bool: ...
    def delete_key(self, key: str) -> bool: ...

def init_logging() -> None: ...
