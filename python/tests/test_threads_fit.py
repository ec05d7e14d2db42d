"""torch's intra-op threads fitted to a rank's share of the host's cores (``dtcomm._threads``),
also when the process group is built off the main thread, as torchft's ``Manager`` builds it
on its quorum thread: torch's thread count belongs to the calling thread, so the fit waits for
the first collective the main thread calls. Before, the fit changed only the quorum thread,
the engine was told 1 thread while the main thread kept torch's default, and a torchft step
with torch's default threads was ~20% slower than gloo's (benches/python/torchft_steady.py)."""

from __future__ import annotations

import os
import socket
import sys

import pytest
from dtgroup import base_env, run_all

pytest.importorskip("torch")

from dtcomm._threads import fitted  # noqa: E402

WORKER = """
import os, sys, threading
import torch, torch.distributed as dist
import dtcomm
from dtcomm import _dtcomm
from dtcomm._threads import fitted
rank = int(os.environ["RANK"])
before = torch.get_num_threads()
store = dist.TCPStore("127.0.0.1", int(os.environ["PORT"]), 2, rank == 0)
where = os.environ["WHERE"]
if where == "thread":
    t = threading.Thread(target=lambda: dist.init_process_group(
        "dtcomm", store=store, rank=rank, world_size=2))
    t.start(); t.join()
else:
    dist.init_process_group("dtcomm", store=store, rank=rank, world_size=2)
built = torch.get_num_threads()
x = torch.ones(4)
dist.all_reduce(x)
assert x.tolist() == [2.0] * 4, x
after = torch.get_num_threads()
want = fitted(before, 2, _dtcomm.usable_cores(), os.environ) or before
print(f"THREADS before={before} built={built} after={after} want={want}", flush=True)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_rule() -> None:
    assert fitted(8, 2, 8, {}) == 4
    assert fitted(2, 2, 2, {}) == 1
    assert fitted(1, 4, 2, {}) is None  # never below one, never raised
    assert fitted(8, 2, 8, {"OMP_NUM_THREADS": "8"}) is None  # the user chose
    assert fitted(8, 2, 8, {"MKL_NUM_THREADS": "2"}) is None
    assert fitted(8, 2, 8, {"DTCOMM_FIT_THREADS": "0"}) is None


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_group_built_on_any_thread_fits_the_main_threads_count(where: str) -> None:
    env = {k: v for k, v in base_env().items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(PORT=str(free_port()), WHERE=where)
    got = run_all([([sys.executable, "-c", WORKER], {**env, "RANK": str(r)}) for r in range(2)],
                  timeout=120)
    for code, out, err in got:
        assert code == 0, out + err
        line = next(ln for ln in out.splitlines() if ln.startswith("THREADS"))
        vals = dict(kv.split("=") for kv in line.split()[1:])
        assert vals["after"] == vals["want"], line
        if where == "thread":
            # Built off the main thread, the fit waited for the main thread's first call.
            assert vals["built"] == vals["before"], line
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: torch's default is already one thread (nothing to fit)")
