"""A soak of per-step fault tolerance: N replica groups of ``examples/torchft_train.py`` train
for MINUTES while one replica fails every EVERY seconds, in turn: killed (SIGKILL), or frozen
(SIGSTOP) for FREEZE seconds and then killed; each failed replica is started again at once
and heals from a live peer. The experiment torchft's authors ran for their "fault tolerant
Llama", here on CPU, with dt-rdzv's Lighthouse door and ``ProcessGroupDtcomm`` (or torchft's
Lighthouse and gloo, ``--stack torchft+gloo``).

    .venv/bin/python benches/python/torchft_soak.py --groups 4 --minutes 10 --every 15

What it checks and prints, from every replica's step log:

* **no committed step lost**: every replica process's committed steps rise by one at a time
  (a healed replica starts at its peers' step, not at 0), and every two replicas that
  committed the same step hold the same parameters (their sums agree);
* **no survivor waits for a timeout**: the longest time a replica that was not failing went
  between two steps (committed or not), beside the collective timeout;
* the failures injected, the restarts, how long a restarted replica took to commit its first
  step, and the steps committed per second over the run.

Exits non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torchft_recovery import STACKS, TRAIN, free_port, read_log, wait_port  # noqa: E402


class Replica:
    """One replica group: its id, its log (shared by its incarnations) and its process."""

    def __init__(self, rid: int, pg: str, env: dict[str, str], work: Path, timeout: float,
                 step_sleep: float) -> None:
        self.rid, self.pg, self.env, self.work = rid, pg, env, work
        self.timeout, self.step_sleep = timeout, step_sleep
        self.log = work / f"r{rid}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts: list[float] = []

    def start(self) -> None:
        out = open(self.work / f"out{self.rid}.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(TRAIN), "--replica-id", str(self.rid), "--pg", self.pg,
             "--steps", "10000000", "--min-replicas", "1", "--timeout", str(self.timeout),
             "--step-sleep", str(self.step_sleep), "--log", str(self.log)],
            env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.starts.append(time.time())

    def fail(self, kind: str, freeze: float) -> None:
        assert self.proc is not None
        if kind == "stop":
            os.kill(self.proc.pid, signal.SIGSTOP)
            time.sleep(freeze)
        self.proc.kill()
        self.proc.wait()
        if kind == "stop":
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


def analyse(replicas: list[Replica], faults: list[dict[str, Any]], timeout: float,
            start: float, end: float) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    by_step: dict[int, list[tuple[int, float]]] = defaultdict(list)
    survivor_gap = 0.0
    first_commit: list[float] = []
    committed_total = 0
    for r in replicas:
        recs = [x for x in read_log(r.log) if "step" in x]
        incarnations: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for x in recs:
            incarnations[int(x["pid"])].append(x)  # type: ignore[arg-type]
        for n, (_pid, xs) in enumerate(sorted(incarnations.items(),
                                              key=lambda kv: float(kv[1][0]["t"]))):
            steps = [int(x["step"]) for x in xs if x.get("committed")]
            for a, b in zip(steps, steps[1:], strict=False):
                if b != a + 1:
                    problems.append(f"replica {r.rid} incarnation {n}: committed step {a} "
                                    f"then {b}")
            for x in xs:
                if x.get("committed"):
                    by_step[int(x["step"])].append((r.rid, float(x["psum"])))
            committed_total += len(steps)
            if n > 0 and steps:
                started = r.starts[n] if n < len(r.starts) else float(xs[0]["t"])
                first = next(float(x["t"]) for x in xs if x.get("committed"))
                first_commit.append(first - started)
                if steps[0] <= 1:
                    problems.append(f"replica {r.rid} incarnation {n} started over at step "
                                    f"{steps[0]} instead of healing from a peer")
            # A survivor's longest wait: gaps between its records, outside its own failure.
            times = [float(x["t"]) for x in xs]
            for a, b in zip(times, times[1:], strict=False):
                own = any(f["replica"] == r.rid and a - 1 <= f["t"] <= b for f in faults)
                if not own:
                    survivor_gap = max(survivor_gap, b - a)
    mismatched = 0
    for step, held in by_step.items():
        sums = {round(s, 6) for _, s in held}
        if len(sums) > 1:
            mismatched += 1
            if mismatched <= 5:
                problems.append(f"step {step}: replicas hold different parameters {held}")
    if survivor_gap >= timeout:
        problems.append(f"a survivor waited {survivor_gap:.1f} s, the collective timeout "
                        f"being {timeout:.0f} s")
    top = max(by_step, default=0)
    summary = {
        "faults": len(faults),
        "kills": sum(1 for f in faults if f["kind"] == "kill"),
        "freezes": sum(1 for f in faults if f["kind"] == "stop"),
        "restarts": sum(len(r.starts) - 1 for r in replicas),
        "highest_step": top,
        "steps_per_s": round(top / (end - start), 2),
        "committed_records": committed_total,
        "steps_committed_by_2_or_more": sum(1 for v in by_step.values() if len(v) > 1),
        "param_mismatches": mismatched,
        "longest_survivor_gap_s": round(survivor_gap, 2),
        "restart_to_first_commit_s": (
            f"{statistics.median(first_commit):.2f} ({min(first_commit):.2f}-"
            f"{max(first_commit):.2f})" if first_commit else None),
    }
    return summary, problems


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=15.0, help="seconds between failures")
    ap.add_argument("--freeze", type=float, default=5.0,
                    help="how long a frozen replica stays frozen before it is killed")
    ap.add_argument("--timeout", type=float, default=30.0, help="the collective timeout")
    ap.add_argument("--step-sleep", type=float, default=0.05,
                    help="seconds of 'compute' per step (leaves the CPU to restarting replicas)")
    ap.add_argument("--stack", default="dt-rdzv+dtcomm", choices=[s.name for s in STACKS])
    ap.add_argument("--work", default=None, help="keep the logs here")
    a = ap.parse_args()
    stack = next(s for s in STACKS if s.name == a.stack)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="torchft-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    lh = stack.start(port, work / "lighthouse.log")
    env = dict(os.environ, TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{port}",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    env.pop("MASTER_PORT", None)
    replicas = [Replica(i, stack.pg, env, work, a.timeout, a.step_sleep)
                for i in range(a.groups)]
    faults: list[dict[str, Any]] = []
    load = os.getloadavg()
    try:
        wait_port(port)
        for r in replicas:
            r.start()
        start = time.time()
        end = start + 60 * a.minutes
        n = 0
        while time.time() < end:
            time.sleep(max(0.0, min(a.every, end - time.time())))
            if time.time() >= end:
                break
            victim = replicas[n % a.groups]
            kind = "kill" if n % 2 == 0 else "stop"
            faults.append({"t": time.time(), "replica": victim.rid, "kind": kind})
            print(f"[{time.time() - start:6.1f} s] {kind} replica {victim.rid}", flush=True)
            victim.fail(kind, a.freeze)
            victim.start()
            n += 1
        end = time.time()
    finally:
        for r in replicas:
            r.stop()
        lh.terminate()
        lh.wait(10)
    summary, problems = analyse(replicas, faults, a.timeout, start, end)
    print(json.dumps({"stack": a.stack, "groups": a.groups, "minutes": a.minutes,
                      "every_s": a.every, "timeout_s": a.timeout,
                      "load_at_start": round(load[0], 2), **summary}, indent=1))
    print(f"logs: {work}")
    for p in problems:
        print("PROBLEM:", p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
