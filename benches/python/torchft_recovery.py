"""How long torchft's survivors take to commit a step without a replica that was killed or
frozen, and the steady-state step time: torchft's Lighthouse + gloo beside dt-rdzv's
Lighthouse door + dtcomm (``ProcessGroupDtcomm``), in one run, interleaved.

Each trial starts a Lighthouse and N replica groups of ``examples/torchft_train.py`` (one
process each, CPU), lets them train together, then has the last replica kill (SIGKILL) or
freeze (SIGSTOP) itself at a chosen step, inside a collective (after its forward pass, before
the gradients' allreduce the others wait in) or outside one (after its commit). Recovery is
the time from the fault to the first step a survivor commits in a quorum of N-1 groups (the
victim left out of the process group, not merely not participating while it heals). Steady
state is the median time between committed steps of N before the fault.

    .venv/bin/python benches/python/torchft_recovery.py --replicas 2 4 --trials 5

Prints a table of medians with their ranges; ``--json FILE`` keeps every trial.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "torchft_train.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dt_rdzv_bin() -> str:
    if os.environ.get("DT_RDZV_BIN"):
        return os.environ["DT_RDZV_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    for profile in ("release", "debug"):
        p = Path(target) / profile / "dt-rdzv"
        if p.exists():
            return str(p)
    raise SystemExit("dt-rdzv not built (cargo build --release -p dt-rdzv)")


JOIN_TIMEOUT_MS = 100
"""The Lighthouses' join timeout unless ``--join-timeout-ms`` says otherwise: torchft's
``LighthouseServer`` default, what torchft's own tests run with."""


@dataclass
class Stack:
    """A Lighthouse and a process group."""

    name: str
    pg: str

    def start(self, port: int, out: Path,
              join_timeout_ms: int = JOIN_TIMEOUT_MS) -> subprocess.Popen[bytes]:
        """The Lighthouse on ``port``, min_replicas 1, with the join timeout given: both stacks
        get the same one (torchft's ``LighthouseServer`` defaults to 100 ms, its
        ``torchft_lighthouse`` command and dt-rdzv to 60 s; with 4 groups it decides whether a
        replica that froze before asking for the next quorum is left out of it at once)."""
        log = open(out, "wb")
        if self.name == "torchft+gloo":
            code = ("import sys, time\nfrom torchft._torchft import LighthouseServer\n"
                    f"l = LighthouseServer(bind='127.0.0.1:{port}', min_replicas=1, "
                    f"join_timeout_ms={join_timeout_ms})\n"
                    "print('ready', l.address(), flush=True)\ntime.sleep(1e6)\n")
            return subprocess.Popen([sys.executable, "-c", code], stdout=log,
                                    stderr=subprocess.STDOUT)
        return subprocess.Popen(
            [dt_rdzv_bin(), "serve", "--host", "127.0.0.1", "--port", "0",
                "--no-http", "--no-native",
             "--torchft-port", str(port), "--torchft-min-replicas", "1",
             "--torchft-join-timeout-ms", str(join_timeout_ms)],
            stdout=log, stderr=subprocess.STDOUT)


STACKS = [Stack("torchft+gloo", "gloo"), Stack("dt-rdzv+dtcomm", "dtcomm")]


def read_log(p: Path) -> list[dict[str, object]]:
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def wait_port(port: int, limit: float = 90.0) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"no Lighthouse on port {port}")


def quorum_size(rec: dict[str, object]) -> object:
    """How many replica groups the step's quorum held: ``members`` (the process group's size,
    healing groups included) where the example logs it. ``participants`` leaves out a group
    that is healing, so a step "of N-1 participants" can still have waited for the victim."""
    return rec.get("members", rec.get("participants"))


def trial(stack: Stack, replicas: int, kind: str, where: str, fault_step: int,
          timeout: float, limit: float, work: Path,
          join_timeout_ms: int = JOIN_TIMEOUT_MS) -> dict[str, object]:
    port = free_port()
    lh = stack.start(port, work / "lighthouse.log", join_timeout_ms)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        wait_port(port)
        env = dict(os.environ, TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{port}",
                   OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        env.pop("MASTER_PORT", None)
        for r in range(replicas):
            args = [sys.executable, str(TRAIN), "--replica-id", str(r), "--pg", stack.pg,
                    "--steps", "100000", "--min-replicas", "1", "--timeout", str(timeout),
                    "--log", str(work / f"r{r}.log")]
            if r == replicas - 1:
                args += ["--fault", f"{fault_step}:{kind}:{where}:{replicas}"]
            procs.append(subprocess.Popen(args, env=env, stdout=open(work / f"out{r}.log", "wb"),
                                          stderr=subprocess.STDOUT))
        victim = work / f"r{replicas - 1}.log"
        end = time.monotonic() + limit
        fault_t = None
        while time.monotonic() < end:
            recs = read_log(victim)
            faults = [r for r in recs if "fault" in r]
            if faults:
                fault_t = float(faults[0]["t"])  # type: ignore[arg-type]
                break
            time.sleep(0.05)
        if fault_t is None:
            return {"error": "the fault never happened"}
        recovered = None
        while time.monotonic() < end and recovered is None:
            for r in range(replicas - 1):
                for rec in read_log(work / f"r{r}.log"):
                    if (rec.get("committed") and quorum_size(rec) == replicas - 1
                            and float(rec["t"]) > fault_t):  # type: ignore[arg-type]
                        t = float(rec["t"]) - fault_t  # type: ignore[arg-type]
                        recovered = t if recovered is None else min(recovered, t)
                        break
            time.sleep(0.05)
        steps = [float(rec["t"]) for rec in read_log(work / "r0.log")  # type: ignore[arg-type]
                 if rec.get("committed") and rec.get("participants") == replicas
                 and float(rec["t"]) < fault_t]  # type: ignore[arg-type]
        gaps = [b - a for a, b in zip(steps[1:-1], steps[2:], strict=True)]
        return {"recovery_s": recovered, "step_ms": 1000 * statistics.median(gaps) if gaps
                else None}
    finally:
        stop_all(procs, lh)


def stop_all(procs: list[subprocess.Popen[bytes]], lh: subprocess.Popen[bytes]) -> None:
    """Kills the replicas (a frozen one is woken first, so that it dies now) and stops the
    Lighthouse (SIGTERM, then SIGKILL past 10 s)."""
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        p.wait()
    lh.terminate()
    try:
        lh.wait(10)
    except subprocess.TimeoutExpired:
        lh.kill()
        lh.wait()


def fmt(xs: list[float], unit: str) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):.2f} {unit} ({min(xs):.2f}-{max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--faults", nargs="+", default=["kill:inside", "stop:outside",
                                                       "stop:inside"])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--stacks", nargs="+", default=[s.name for s in STACKS])
    ap.add_argument("--fault-step", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="the collective timeout both stacks run with (torchft's default 60)")
    ap.add_argument("--join-timeout-ms", type=int, default=JOIN_TIMEOUT_MS,
                    help="both Lighthouses' join timeout (torchft's LighthouseServer: 100)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    stacks = [s for s in STACKS if s.name in a.stacks]
    rows: dict[tuple[str, int, str], list[dict[str, object]]] = {}
    load = os.getloadavg()
    for t in range(a.trials):
        for n in a.replicas:
            for f in a.faults:
                for st in stacks:  # interleaved: each trial runs every stack back to back
                    kind, where = f.split(":")
                    with tempfile.TemporaryDirectory() as d:
                        try:
                            r = trial(st, n, kind, where, a.fault_step, a.timeout,
                                      limit=a.timeout * 2 + 60, work=Path(d),
                                      join_timeout_ms=a.join_timeout_ms)
                        except RuntimeError as e:  # a Lighthouse that never came up
                            r = {"error": str(e)}
                    rows.setdefault((st.name, n, f), []).append(r)
                    print(f"trial {t} {st.name} replicas={n} {f}: {r}", flush=True)
    print(f"\nload average at start {load[0]:.2f}; collective timeout {a.timeout:.0f} s; "
          f"join timeout {a.join_timeout_ms} ms; "
          f"{a.trials} trials; medians (min-max)\n")
    print("| stack | replicas | fault | survivors commit without it after | steady step |")
    print("|---|---|---|---|---|")
    for (name, n, f), rs in rows.items():
        rec = [float(r["recovery_s"]) for r in rs  # type: ignore[arg-type]
               if r.get("recovery_s") is not None]
        step = [float(r["step_ms"]) for r in rs  # type: ignore[arg-type]
                if r.get("step_ms") is not None]
        lost = sum(1 for r in rs if r.get("recovery_s") is None)
        extra = f" ({lost} never)" if lost else ""
        print(f"| {name} | {n} | {f} | {fmt(rec, 's')}{extra} | {fmt(step, 'ms')} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"|".join(map(str, k)): v
                                            for k, v in rows.items()}, indent=1))


if __name__ == "__main__":
    main()
