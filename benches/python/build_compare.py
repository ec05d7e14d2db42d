"""Two builds of one nccl-tests style benchmark binary side by side: each round runs every
(transport, size) case on both builds, the order of the builds alternating between rounds, and
the report gives medians over rounds with [min-max] and the ratio old / new (> 1: the new build
is faster). For a restructuring step: "not slower than before" measured in one run.

    .venv/bin/python benches/python/build_compare.py OLD/all_reduce_perf NEW/all_reduce_perf \\
        [--rounds 5] [--sizes 8,64M] [--transports shm,tcp] [--world 2] [--iters 200,10]

Time per call: the binary's in-place `time` (µs, max over ranks of the mean of the timed
iterations). ``--iters`` gives the timed iterations per size in the order of ``--sizes``
(warm-up: a fifth of them, at least 2). The machine's load average is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def run_case(binary: Path, transport: str, size: str, iters: int, world: int) -> float:
    env = {**os.environ, "DTCOMM_TRANSPORT": transport}
    out = subprocess.run(
        [str(binary), "--world", str(world), "--sizes", size, "-n", str(iters),
         "-w", str(max(2, iters // 5)), "-J", "-"],
        env=env, capture_output=True, text=True, timeout=600, check=True)
    res = json.loads(out.stdout)["results"]
    assert len(res) == 1 and res[0]["in_place"]["wrong"] == 0, out.stdout
    return float(res[0]["in_place"]["time"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="8,64M")
    ap.add_argument("--iters", default="200,10")
    ap.add_argument("--transports", default="shm,tcp")
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    sizes = a.sizes.split(",")
    iters = [int(x) for x in a.iters.split(",")]
    if len(iters) != len(sizes):
        ap.error("--iters needs one count per size")
    builds = {"old": a.old, "new": a.new}
    times: dict[tuple[str, str, str], list[float]] = {}
    loads = []
    for r in range(a.rounds):
        order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
        for t in a.transports.split(","):
            for size, n in zip(sizes, iters, strict=True):
                for b in order:
                    us = run_case(builds[b], t, size, n, a.world)
                    times.setdefault((t, size, b), []).append(us)
        loads.append(os.getloadavg()[0])
        print(f"round {r + 1}/{a.rounds} done (1-min load {loads[-1]:.2f})", file=sys.stderr)

    def fmt(v: list[float]) -> str:
        return f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"

    print(f"world {a.world}, {a.rounds} rounds, builds alternating; µs per call, median "
          f"[min-max]; 1-min load during the run {min(loads):.2f}-{max(loads):.2f}")
    print(f"old: {a.old}\nnew: {a.new}\n")
    print("| transport | size | old | new | old / new |")
    print("|---|---|---|---|---|")
    for t in a.transports.split(","):
        for size in sizes:
            o, n = times[(t, size, "old")], times[(t, size, "new")]
            print(f"| {t} | {size} | {fmt(o)} | {fmt(n)} | "
                  f"{statistics.median(o) / statistics.median(n):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
