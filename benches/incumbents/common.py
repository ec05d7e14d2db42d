"""What the incumbent benchmarks share: the per-size schedule, the record shape, parsing helpers.

The schedule is the one ``all_reduce_perf --anchor-schedule`` and ``benches/python`` use, so
every implementation makes the same number of calls per size. One record per (op, size) is

    {"op", "world", "bytes", "size", "warmup", "iters", "avg_us", "algbw_GBps", "busbw_GBps",
     "p50_us", "min_us"}

with bus bandwidth by the nccl-tests convention. A benchmark's JSON file wraps the records as
``{"backend", "world", "startup": {...}, "loadavg_before", "loadavg_after", "results": [...]}``
(plus backend-specific keys); ``scripts/bench_allreduce.sh`` reads ``results[*].bytes``,
``busbw_GBps``, ``avg_us`` and ``p50_us``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

KiB, MiB = 1 << 10, 1 << 20
SIZES: list[int] = [8, 1 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB, 256 * MiB]

# (largest size in bytes, (warm-up calls, timed calls)); above the last limit: (2, 5).
_SCHEDULE: tuple[tuple[int, tuple[int, int]], ...] = (
    (1 * KiB, (100, 2000)),
    (64 * KiB, (20, 500)),
    (1 * MiB, (10, 100)),
    (16 * MiB, (5, 20)),
    (64 * MiB, (3, 10)),
)

Record = dict[str, Any]


def schedule(nbytes: int) -> tuple[int, int]:
    """(warm-up, timed iterations) for a message of ``nbytes``: more iterations when small."""
    for limit, wi in _SCHEDULE:
        if nbytes <= limit:
            return wi
    return 2, 5


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests: allreduce 2(n-1)/n; allgather (n-1)/n; broadcast 1."""
    return {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n, "broadcast": 1.0}[op]


def fmt_size(b: int) -> str:
    return f"{b // MiB} MiB" if b >= MiB else (f"{b // KiB} KiB" if b >= KiB else f"{b} B")


def parse_size(s: str) -> int:
    """``8``, ``1K``, ``64KiB``, ``16M``, ``2MiB``, ``8B`` -> bytes."""
    s = s.strip().upper()
    for suf, m in (("KIB", KiB), ("MIB", MiB), ("K", KiB), ("M", MiB), ("B", 1)):
        if s.endswith(suf):
            return int(float(s[: -len(suf)]) * m)
    return int(s)


def loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def record(op: str, n: int, nbytes: int, warm: int, iters: int, avg_s: float, p50_s: float,
           min_s: float) -> Record:
    """One result: times are the maximum over ranks, in seconds on the way in, us on the way out."""
    algbw = nbytes / avg_s / 1e9
    return {"op": op, "world": n, "bytes": nbytes, "size": fmt_size(nbytes), "warmup": warm, "iters": iters,
            "avg_us": avg_s * 1e6, "algbw_GBps": algbw, "busbw_GBps": algbw * busbw_factor(op, n),
            "p50_us": p50_s * 1e6, "min_us": min_s * 1e6}


def timed_loop(call: Callable[[], object], warm: int, iters: int,
               barrier: Callable[[], object]) -> tuple[float, float, float]:
    """Warm-up, a barrier, then ``iters`` blocking calls, each also timed alone.

    Returns this rank's (loop time / iters, per-call median, per-call minimum) in seconds; the
    caller takes the maximum of each over ranks.
    """
    for _ in range(warm):
        call()
    barrier()
    ts = [0.0] * iters
    pc = time.perf_counter
    t0 = pc()
    for i in range(iters):
        ti = pc()
        call()
        ts[i] = pc() - ti
    total = pc() - t0
    ts.sort()
    return total / iters, ts[iters // 2], ts[0]


def env_float(key: str, default: float) -> float:
    v = os.environ.get(key)
    return float(v) if v else default


def print_table(results: list[Record]) -> None:
    print(f"{'op':10s} {'size':>8s} {'iters':>6s} {'avg_us':>12s} {'p50_us':>11s} {'algbw GB/s':>11s} "
          f"{'busbw GB/s':>11s}")
    for r in results:
        print(f"{r['op']:10s} {r['size']:>8s} {r['iters']:6d} {r['avg_us']:12.1f} {r['p50_us']:11.1f} "
              f"{r['algbw_GBps']:11.3f} {r['busbw_GBps']:11.3f}")
