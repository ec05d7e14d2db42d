"""Open MPI through mpi4py on numpy float32 buffers: the other incumbent, with the schedule and
record shape of ``gloo_bench.py`` (``common.py``).

    mpirun --allow-run-as-root --oversubscribe -np 2 PYTHON mpi_bench.py [--ops ...]
        [--sizes 8 1K ... 64M] [--label tcp] [--out f.json]

PYTHON is a python with mpi4py and numpy (``scripts/setup_bench.sh`` puts mpi4py into the
project's venv, built against Debian's Open MPI). Without MCA settings Open MPI picks its
default path between processes on one host (shared memory); over TCP on loopback only:

    OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo mpirun ...

Allreduce is in place (``MPI.IN_PLACE``, SUM). allgather: size = the whole output. Time per
call = max over ranks of (timed loop / iters), as in ``gloo_bench.py``. ``T_LAUNCH`` in the
environment (epoch seconds, set just before ``mpirun``) gives the start-up to the first barrier.
Rank 0 writes the JSON to ``--out`` and prints a table.
"""

from __future__ import annotations

import os
import sys
import time

T_PY = time.time()
from mpi4py import MPI  # noqa: E402  (MPI_Init happens here)

T_INIT = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (  # noqa: E402
    SIZES, Record, loadavg, parse_size, print_table, record, schedule, timed_loop,
)

MCA_KEYS = ("OMPI_MCA_pml", "OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_coll")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--ops", nargs="*", default=["allreduce"], choices=["allreduce", "broadcast", "allgather"])
    ap.add_argument("--sizes", nargs="+", type=parse_size, default=SIZES, help="allreduce sizes")
    ap.add_argument("--coll-sizes", nargs="+", type=parse_size, default=None,
                    help="broadcast / allgather sizes (default 16M)")
    ap.add_argument("--iters-scale", type=float, default=1.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--label", default="", help="recorded as is (e.g. tcp or default)")
    a = ap.parse_args()

    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    comm.Barrier()
    t_bar = time.time()

    def vmax(vals: list[float]) -> list[float]:
        v = np.array(vals, dtype=np.float64)
        comm.Allreduce(MPI.IN_PLACE, v, op=MPI.MAX)
        return [float(x) for x in v]

    t_launch = float(os.environ.get("T_LAUNCH", "nan"))
    st = vmax([t_bar - t_launch, T_INIT - T_PY, t_bar - T_PY])
    startup = dict(zip(["launch_to_barrier_s", "mpi_init_s", "python_to_barrier_s"], st))
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
                buf = np.ones(nel, dtype=np.float32)
                comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
                assert buf[0] == n and buf[-1] == n, "allreduce: wrong sum"
                call = lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)  # noqa: E731
                nb = nel * 4
            elif op == "broadcast":
                buf = np.full(nel, float(rank), dtype=np.float32)
                comm.Bcast(buf, root=0)
                assert buf[-1] == 0, "broadcast: wrong value"
                call = lambda: comm.Bcast(buf, root=0)  # noqa: E731
                nb = nel * 4
            else:
                inp = np.full(max(1, nel // n), float(rank), dtype=np.float32)
                out = np.empty(inp.size * n, dtype=np.float32)
                comm.Allgather(inp, out)
                assert out[-1] == n - 1, "allgather: wrong value"
                call = lambda: comm.Allgather(inp, out)  # noqa: E731
                nb = inp.size * n * 4
            avg, p50, mn = vmax(list(timed_loop(call, warm, iters, comm.Barrier)))
            results.append(record(op, n, nb, warm, iters, avg, p50, mn))

    if rank == 0:
        env = {k: v for k, v in os.environ.items() if k.startswith(MCA_KEYS)}
        res = {"backend": "mpi", "label": a.label, "library": MPI.Get_library_version().splitlines()[0].strip("\x00 "),
               "mpi4py": _mpi4py_version(), "mca_env": env, "world": n, "startup": startup,
               "loadavg_before": la0, "loadavg_after": loadavg(), "results": results}
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=1)
        print(f"# mpi world={n} {a.label} mca={env} loadavg {la0} -> {res['loadavg_after']}")
        print(f"# startup: launch->barrier {startup['launch_to_barrier_s']:.3f}s, "
              f"MPI_Init {startup['mpi_init_s']:.3f}s")
        print_table(results)


def _mpi4py_version() -> str:
    import mpi4py

    return str(mpi4py.__version__)


if __name__ == "__main__":
    main()
