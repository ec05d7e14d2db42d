"""The handle of an asynchronous dtcomm call at the Python level."""

from __future__ import annotations

from typing import Any

from . import _dtcomm


class Work:
    """Returned by every collective called with ``async_op=True``.

    ``wait(timeout=None)`` blocks (without the GIL) until the call is done, raises its error
    (a :class:`dtcomm.DtcommError` naming rank, peer, call and sequence number) and returns the
    call's result (the output buffer, or None); ``is_completed()`` never blocks.
    """

    __slots__ = ("_native", "_result")

    def __init__(self, native: _dtcomm.Work, result: Any) -> None:
        self._native = native
        self._result = result

    def wait(self, timeout: float | None = None) -> Any:
        self._native.wait(timeout)
        return self._result

    def is_completed(self) -> bool:
        return self._native.is_completed()

    def exception(self) -> BaseException | None:
        return self._native.exception()

    def __repr__(self) -> str:
        return repr(self._native)
