"""What complex tensors and strided views cost through ``init_process_group("dtcomm")``
(issue 44), at world 2 on one host, CPU:

* complex64 ``all_reduce`` of N elements beside float32 of 2N (the same bytes);
* ``all_gather`` of a strided view beside a contiguous tensor of the same elements (the one
  extra copy);
* the contiguous single-tensor path: 8 B and 64 MiB ``all_reduce`` (run it with
  ``--pythonpath`` of an earlier tree to compare the builds).

    .venv/bin/python benches/python/torch_dtypes_strided.py --rounds 3 [--pythonpath DIR]

Prints, per case, the median over rounds of each round's median time per call, with the
range of the round medians.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

CASES = ("allreduce complex64 N", "allreduce float32 2N", "all_gather contiguous",
         "all_gather strided", "allreduce 8 B", "allreduce 64 MiB")


def worker(rank: int, rounds: int, iters: int, n: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("dtcomm", rank=rank, world_size=2)
    w = dist.get_world_size()
    base = torch.ones(n, 2)
    make = {
        "allreduce complex64 N": lambda: (torch.ones(n, dtype=torch.complex64), None),
        "allreduce float32 2N": lambda: (torch.ones(2 * n), None),
        "all_gather contiguous": lambda: (base[:, 0].contiguous(),
                                          [torch.empty(n) for _ in range(w)]),
        "all_gather strided": lambda: (base[:, 0], [torch.empty(n) for _ in range(w)]),
        "allreduce 8 B": lambda: (torch.ones(2), None),
        "allreduce 64 MiB": lambda: (torch.ones(16 << 20), None),
    }
    for case in CASES:
        x, outs = make[case]()
        meds = []
        for _ in range(rounds):
            times = []
            for _ in range(iters):
                dist.barrier()
                t0 = time.perf_counter()
                if outs is None:
                    dist.all_reduce(x)
                else:
                    dist.all_gather(outs, x)
                times.append(time.perf_counter() - t0)
            meds.append(statistics.median(times))
        if rank == 0:
            mid = statistics.median(meds)
            print(f"{case:24s} {mid * 1e3:9.3f} ms  [{min(meds) * 1e3:.3f}..{max(meds) * 1e3:.3f}]",
                  flush=True)
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--elements", type=int, default=4 << 20, help="N")
    ap.add_argument("--pythonpath", default=None, help="the dtcomm tree to import")
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank is not None:
        worker(a.rank, a.rounds, a.iters, a.elements)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    if a.pythonpath:
        env["PYTHONPATH"] = a.pythonpath
    args = [sys.executable, __file__, "--rounds", str(a.rounds), "--iters", str(a.iters),
            "--elements", str(a.elements)]
    procs = [subprocess.Popen([*args, "--rank", str(r)], env=env) for r in range(2)]
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=900))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(-9)
    return max(abs(c) for c in codes)


if __name__ == "__main__":
    raise SystemExit(main())
