"""One rank of Horovod's own test suite under ``dtrun --horovod``: pytest on the given test
file with this rank's log and JUnit file in ``DTCOMM_HVD_OUT`` (``rank<N>.log``,
``junit-rank<N>.xml``) and a per-test limit (``DTCOMM_HVD_TEST_TIMEOUT`` seconds, default 120);
the tests named in ``DTCOMM_HVD_LEAVE_OUT`` (comma-separated, exact names) are left out.

Horovod's test helpers import ``horovod.runner.util.threads.in_thread`` (from horovodrun's
package, which dtrun replaces) and ``horovod.common.util.env`` (a context manager setting
environment variables); stand-ins with the same contracts are registered here. Nothing else of
Horovod's runner or common package is provided.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any


def in_thread(target: Callable[..., Any], args: tuple[Any, ...] = (), name: str | None = None,
              daemon: bool = True, silent: bool = False) -> threading.Thread:
    """Runs ``target(*args)`` on a new thread (exceptions swallowed when ``silent``)."""
    if not isinstance(args, tuple):
        raise ValueError(f"args must be a tuple, not {type(args)}, for a single argument use (arg,)")

    def run(*a: Any) -> None:
        try:
            target(*a)
        except Exception:
            if not silent:
                raise

    t = threading.Thread(target=run, args=args, name=name, daemon=daemon)
    t.start()
    return t


@contextlib.contextmanager
def env(**values: str | None) -> Iterator[None]:
    """Sets environment variables for the block (None: left alone) and restores them."""
    values = {k: v for k, v in values.items() if v is not None}
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)  # type: ignore[arg-type]
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _register_runner_stub() -> None:
    for name in ("horovod.runner", "horovod.runner.util", "horovod.runner.util.threads",
                 "horovod.common", "horovod.common.util"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["horovod.runner.util.threads"].in_thread = in_thread  # type: ignore[attr-defined]
    sys.modules["horovod.common.util"].env = env  # type: ignore[attr-defined]


class LeaveOut:
    """A pytest plugin: drops the tests named (exactly) in ``DTCOMM_HVD_LEAVE_OUT``."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def pytest_collection_modifyitems(self, config: Any, items: list[Any]) -> None:
        gone = [i for i in items if i.name in self.names]
        items[:] = [i for i in items if i.name not in self.names]
        config.hook.pytest_deselected(items=gone)


def main(argv: list[str]) -> int:
    import pytest

    _register_runner_stub()
    rank = os.environ.get("HOROVOD_RANK", "0")
    out = os.environ["DTCOMM_HVD_OUT"]
    log = open(os.path.join(out, f"rank{rank}.log"), "w")  # noqa: SIM115 (lives as long as the process)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    return int(pytest.main([
        "-p", "no:cacheprovider", "-v", "--tb=short",
        "--timeout", os.environ.get("DTCOMM_HVD_TEST_TIMEOUT", "120"),
        f"--junitxml={os.path.join(out, f'junit-rank{rank}.xml')}",
        *argv,
    ], plugins=[LeaveOut({n for n in os.environ.get("DTCOMM_HVD_LEAVE_OUT", "").split(",") if n})]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
