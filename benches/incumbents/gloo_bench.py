"""torch.distributed with the gloo backend on loopback (CPU, float32): the incumbent dtcomm is
measured against, nccl-tests style, with the schedule in ``common.py``.

    python gloo_bench.py --world 2 [--ops allreduce broadcast allgather] [--sizes 8 1K ... 64M]
                         [--coll-sizes 16M] [--iters-scale 1.0] [--timeout 600] [--out f.json]

Run it with the project's venv python (``.venv/bin/python``, torch from ``scripts/setup.sh``).
The launcher picks a free port and starts ``--world`` workers (this file with ``--worker``) with
RANK / WORLD_SIZE / MASTER_ADDR=127.0.0.1 / MASTER_PORT (``env://``: rank 0 hosts the TCPStore),
GLOO_SOCKET_IFNAME=lo and OMP_NUM_THREADS=1 (what torchrun sets); on timeout it kills its own
workers, by PID, and fails.

Per (op, size): one checked call, warm-up, a barrier, then ``iters`` blocking calls.
Allreduce is a float32 sum in place. Time per call = max over ranks of (timed loop / iters);
``p50_us`` / ``min_us`` = max over ranks of each rank's per-call median / minimum. allgather
follows nccl-tests: size = the whole gathered output (each rank contributes size / world).
Start-up (launcher's Popen -> first barrier done, max over ranks) is recorded too; the launch
time comes from ``T_LAUNCH`` in the environment.

Rank 0 prints one JSON line; the launcher writes it to ``--out`` and prints a table.
"""

from __future__ import annotations

import os
import sys
import time

T_PY = time.time()  # worker start, before the imports (the start-up's import share)

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
from datetime import timedelta  # noqa: E402
from typing import Any, Callable  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (  # noqa: E402
    SIZES, Record, loadavg, parse_size, print_table, record, schedule, timed_loop,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launcher(a: argparse.Namespace) -> None:
    base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(a.world),
                GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", *sys.argv[1:]]
    procs: list[subprocess.Popen[bytes]] = []
    deadline = time.time() + a.timeout
    try:
        for r in range(a.world):
            env = dict(base, RANK=str(r), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(a.world),
                       T_LAUNCH=repr(time.time()))
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL))
        out0 = procs[0].communicate(timeout=a.timeout)[0].decode()
        for p in procs[1:]:
            p.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        sys.exit(f"gloo_bench: timeout after {a.timeout}s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()  # only our own workers, by PID
                p.wait()
    rcs = [p.returncode for p in procs]
    if any(rcs):
        sys.exit(f"gloo_bench: worker failure, exit codes {rcs}")
    res = json.loads([line for line in out0.splitlines() if line.startswith("{")][-1])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    st = res["startup"]
    print(f"# gloo world={a.world} torch={res['torch']} loadavg {res['loadavg_before']} -> {res['loadavg_after']}")
    print(f"# startup: launch->barrier {st['launch_to_barrier_s']:.3f}s, import torch {st['import_s']:.3f}s, "
          f"init_pg+barrier {st['init_barrier_s']:.3f}s")
    print_table(res["results"])


def worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    t_imp = time.time()
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=120))
    t_init = time.time()
    dist.barrier()
    t_bar = time.time()
    n, rank = dist.get_world_size(), dist.get_rank()

    def vmax(vals: list[float]) -> list[float]:
        t = torch.tensor(vals, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [float(x) for x in t.tolist()]

    t_launch = float(os.environ.get("T_LAUNCH", "nan"))
    st = vmax([t_bar - t_launch, t_imp - T_PY, t_init - t_imp, t_bar - t_imp, T_PY - t_launch])
    startup = dict(zip(["launch_to_barrier_s", "import_s", "init_pg_s", "init_barrier_s", "launch_to_python_s"], st))
    la0 = loadavg()
    results: list[Record] = []
    for op in a.ops:
        sizes: list[int] = a.sizes if op == "allreduce" else (a.coll_sizes or [16 * (1 << 20)])
        for nbytes in sizes:
            nel = max(1, nbytes // 4)
            warm, iters = schedule(nbytes)
            if a.iters_scale != 1.0:
                iters = max(3, int(iters * a.iters_scale))
            call: Callable[[], Any]
            if op == "allreduce":
                t = torch.ones(nel, dtype=torch.float32)
                dist.all_reduce(t)
                assert float(t[0]) == n and float(t[-1]) == n, "allreduce: wrong sum"
                call = lambda: dist.all_reduce(t)  # noqa: E731
                nb = nel * 4
            elif op == "broadcast":
                t = torch.full((nel,), float(rank), dtype=torch.float32)
                dist.broadcast(t, src=0)
                assert float(t[-1]) == 0.0, "broadcast: wrong value"
                call = lambda: dist.broadcast(t, src=0)  # noqa: E731
                nb = nel * 4
            elif op == "allgather":
                inp = torch.full((max(1, nel // n),), float(rank), dtype=torch.float32)
                out = torch.empty(inp.numel() * n, dtype=torch.float32)
                dist.all_gather_into_tensor(out, inp)
                assert float(out[-1]) == n - 1, "allgather: wrong value"
                call = lambda: dist.all_gather_into_tensor(out, inp)  # noqa: E731
                nb = inp.numel() * n * 4
            else:
                raise SystemExit(f"gloo_bench: unknown op {op!r}")
            avg, p50, mn = vmax(list(timed_loop(call, warm, iters, dist.barrier)))
            results.append(record(op, n, nb, warm, iters, avg, p50, mn))
    if rank == 0:
        print(json.dumps({"backend": "gloo", "torch": torch.__version__, "world": n, "startup": startup,
                          "loadavg_before": la0, "loadavg_after": loadavg(), "results": results}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--ops", nargs="*", default=["allreduce"], choices=["allreduce", "broadcast", "allgather"])
    ap.add_argument("--sizes", nargs="+", type=parse_size, default=SIZES, help="allreduce sizes")
    ap.add_argument("--coll-sizes", nargs="+", type=parse_size, default=None,
                    help="broadcast / allgather sizes (default 16M)")
    ap.add_argument("--iters-scale", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.worker:
        worker(a)
    else:
        launcher(a)


if __name__ == "__main__":
    main()
