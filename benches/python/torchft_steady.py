"""Steady-state step time of a torchft job with no fault: torchft's Lighthouse + gloo beside
dt-rdzv's Lighthouse door + dtcomm (``ProcessGroupDtcomm``), interleaved in one run.

Each trial starts a Lighthouse and N replica groups of ``examples/torchft_train.py`` (one
process each, CPU), waits until they have committed ``--warmup`` steps together, then times
``--seconds`` of training: the step time is the median gap between replica 0's committed
steps of N participants in that window. Every step of torchft does a quorum round trip to the
Lighthouse, the model's allreduce (the MLP's parameters: ``--width`` 256 is 66 k floats,
2048 is 4.2 M) and the commit's allreduce.

Threads as users start replicas: ``1`` is what torchrun and dtrun set (``OMP_NUM_THREADS=1``),
``default`` leaves it unset (plain ``python``, ``mp.spawn``, Lightning): torch's own thread
count, one per core.

    .venv/bin/python benches/python/torchft_steady.py --rounds 3 --widths 256 2048

Prints a table of medians of the per-trial medians with their ranges; ``--json FILE`` keeps
every trial.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torchft_recovery import STACKS, TRAIN, Stack, free_port, read_log, stop_all, wait_port


def steady(stack: Stack, replicas: int, width: int, threads: str, warmup: int,
           seconds: float, work: Path) -> dict[str, object]:
    """One trial: the median step time of replica 0 over ``seconds`` after ``warmup``."""
    port = free_port()
    lh = stack.start(port, work / "lighthouse.log")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        wait_port(port)
        env = dict(os.environ, TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{port}")
        env.pop("MASTER_PORT", None)
        if threads == "default":
            env.pop("OMP_NUM_THREADS", None)
        else:
            env["OMP_NUM_THREADS"] = threads
        for r in range(replicas):
            args = [sys.executable, str(TRAIN), "--replica-id", str(r), "--pg", stack.pg,
                    "--steps", "1000000", "--min-replicas", str(replicas),
                    "--width", str(width), "--timeout", "30",
                    "--log", str(work / f"r{r}.log")]
            procs.append(subprocess.Popen(args, env=env, stdout=open(work / f"out{r}.log", "wb"),
                                          stderr=subprocess.STDOUT))
        log0 = work / "r0.log"

        def full_steps() -> list[float]:
            return [float(rec["t"]) for rec in read_log(log0)  # type: ignore[arg-type]
                    if rec.get("committed") and rec.get("participants") == replicas]

        end = time.monotonic() + 120
        while len(full_steps()) < warmup:
            if time.monotonic() > end or any(p.poll() is not None for p in procs):
                return {"error": f"fewer than {warmup} steps of {replicas} in 120 s"}
            time.sleep(0.1)
        start = time.time()
        time.sleep(seconds)
        ts = [t for t in full_steps() if t >= start]
        gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
        if len(gaps) < 3:
            return {"error": f"{len(gaps)} steps in {seconds} s"}
        return {"step_ms": 1000 * statistics.median(gaps), "steps": len(gaps)}
    finally:
        stop_all(procs, lh)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--widths", type=int, nargs="+", default=[256, 2048])
    ap.add_argument("--threads", nargs="+", default=["1", "default"])
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--stacks", nargs="+", default=[s.name for s in STACKS])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    stacks = [s for s in STACKS if s.name in a.stacks]
    rows: dict[tuple[int, str, str], list[dict[str, object]]] = {}
    load = os.getloadavg()
    for rnd in range(a.rounds):
        for w in a.widths:
            for th in a.threads:
                for st in stacks:  # interleaved: each round runs every stack back to back
                    with tempfile.TemporaryDirectory() as d:
                        try:
                            r = steady(st, a.replicas, w, th, a.warmup, a.seconds, Path(d))
                        except RuntimeError as e:
                            r = {"error": str(e)}
                    rows.setdefault((w, th, st.name), []).append(r)
                    print(f"round {rnd} width={w} threads={th} {st.name}: {r}", flush=True)
    print(f"\nload average at start {load[0]:.2f} (1 min), {load[1]:.2f} (5 min); "
          f"{a.replicas} replica groups; {a.rounds} rounds of {a.seconds:.0f} s; "
          f"medians of per-trial medians (min-max)\n")
    print("| width | OMP_NUM_THREADS | stack | step time | steps per trial |")
    print("|---|---|---|---|---|")
    for (w, th, name), rs in rows.items():
        ms = [float(r["step_ms"]) for r in rs  # type: ignore[arg-type]
              if r.get("step_ms") is not None]
        n = [int(r["steps"]) for r in rs if r.get("steps") is not None]  # type: ignore[call-overload]
        bad = sum(1 for r in rs if r.get("step_ms") is None)
        cell = (f"{statistics.median(ms):.2f} ms ({min(ms):.2f}-{max(ms):.2f})" if ms else "-")
        if bad:
            cell += f" ({bad} failed)"
        print(f"| {w} | {'unset' if th == 'default' else th} | {name} | {cell} | "
              f"{min(n) if n else 0}-{max(n) if n else 0} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"|".join(map(str, k)): v
                                            for k, v in rows.items()}, indent=1))


if __name__ == "__main__":
    main()
