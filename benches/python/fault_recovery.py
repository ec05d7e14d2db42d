"""Fault recovery in a training loop: the time from a fault to every survivor holding its new
round, and to the first allreduce completed after it, with ``dtcomm.elastic.run`` on the native
rendezvous (``dt-rdzv serve``, default settings: heartbeat timeout 2 s, probe timeout 0.3 s).

    .venv/bin/python benches/python/fault_recovery.py [--rounds 5] [--members 3]
        [--faults kill,freeze] [--count 262144]

Each round starts a fresh job of ``--members`` processes (2 to N members), each allreducing
``--count`` float32 every 10 ms and committing; once all train, rank 1 is SIGKILLed (process
death: its peers' links see the reset and report it; the server probes it) or SIGSTOPped (a
frozen host: nothing is reset; the heartbeat timeout finds it). Faults are interleaved round by
round. Prints the median over rounds with [min-max] beside torchelastic's measured ~46 s
(torchrun's re-rendezvous after a lost agent, docs/failure-handling.md).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WORKER = r"""
import os, sys, time, numpy as np, dtcomm
from dtcomm import elastic
state = elastic.ObjectState(step=0)
N = int(os.environ["COUNT"])

@elastic.run
def train(state):
    w = dtcomm._api._g("bench").member.welcome
    print(f"ROUND {w.round} rank {dtcomm.rank()} t={time.time():.4f}", flush=True)
    first = True
    while True:
        x = np.ones(N, dtype=np.float32)
        dtcomm.all_reduce(x)
        if first:
            print(f"FIRST {w.round} t={time.time():.4f}", flush=True)
            first = False
        state.step += 1
        if state.step % 5 == 0:
            print(f"STEP {state.step} round {w.round} rank {dtcomm.rank()}", flush=True)
        time.sleep(0.01)
        state.commit()

train(state)
"""


def server(tmp: Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    binary = os.environ.get("DT_RDZV_BIN", str(Path(target) / "debug" / "dt-rdzv"))
    token = uuid.uuid4().hex
    proc = subprocess.Popen(
        [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--native-port", "0",
         "--http-port", "0"],
        stdout=subprocess.PIPE, stderr=open(tmp / "dt-rdzv.log", "w"), text=True,
        env={**os.environ, "DTRDZV_TOKEN": token})
    env: dict[str, str] = {}
    assert proc.stdout is not None
    while "DTCOMM_RDZV_ENDPOINT" not in env:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"dt-rdzv did not start: {(tmp / 'dt-rdzv.log').read_text()}")
        if line.startswith("dt-rdzv listening native="):
            parts = dict(p.split("=", 1) for p in line.split()[2:])
            env.update(DTCOMM_RDZV_ENDPOINT=parts["native"],
                       DTCOMM_RDZV_FINGERPRINT=parts["fingerprint"])
    env["DTCOMM_RDZV_TOKEN"] = token
    return proc, env


def one_round(tmp: Path, base: dict[str, str], members: int, fault: str, count: int) -> tuple[float, float]:
    script = tmp / "worker.py"
    script.write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DTCOMM_")}
    env.update(base, DTCOMM_RUN_ID=f"bench-{uuid.uuid4().hex[:8]}",
               DTCOMM_RDZV_MEMBERS=f"2:{members}", DTCOMM_RDZV_LAST_CALL="10",
               DTCOMM_TIMEOUT="60", DTCOMM_SOCKET_IFNAME="lo", COUNT=str(count),
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    logs = [tmp / f"m{i}-{uuid.uuid4().hex[:6]}.log" for i in range(members)]
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=open(l, "w"),
                              stderr=subprocess.STDOUT, start_new_session=True) for l in logs]
    try:
        def out(i: int) -> str:
            return logs[i].read_text(errors="replace")

        deadline = time.monotonic() + 120
        while not all(re.search(r"^STEP \d+ round 1 ", out(i), re.M) for i in range(members)):
            if time.monotonic() > deadline:
                raise SystemExit("members did not start training:\n" + "\n".join(map(out, range(members))))
            time.sleep(0.1)
        victim = next(i for i in range(members) if re.search(r"^ROUND 1 rank 1 ", out(i), re.M))
        os.killpg(procs[victim].pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        t0 = time.time()
        rest = [i for i in range(members) if i != victim]
        deadline = time.monotonic() + 60
        while not all(re.search(r"^FIRST 2 ", out(i), re.M) for i in rest):
            if time.monotonic() > deadline:
                raise SystemExit(f"{fault}: no new round:\n" + "\n".join(map(out, range(members))))
            time.sleep(0.05)
        held = max(float(re.search(r"^ROUND 2 rank \d+ t=([\d.]+)", out(i), re.M).group(1)) for i in rest)  # type: ignore[union-attr]
        first = max(float(re.search(r"^FIRST 2 t=([\d.]+)", out(i), re.M).group(1)) for i in rest)  # type: ignore[union-attr]
        return held - t0, first - t0
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--faults", default="kill,freeze")
    ap.add_argument("--count", type=int, default=1 << 18)
    a = ap.parse_args()
    faults = a.faults.split(",")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        proc, base = server(tmp)
        try:
            res: dict[str, list[tuple[float, float]]] = {f: [] for f in faults}
            for r in range(a.rounds):
                for f in faults:
                    res[f].append(one_round(tmp, base, a.members, f, a.count))
                    print(f"round {r + 1} {f}: new round {res[f][-1][0]:.3f} s, "
                          f"first allreduce {res[f][-1][1]:.3f} s", file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait()
    print(f"# fault recovery, {a.members} members, allreduce of {a.count} float32 every 10 ms, "
          f"dt-rdzv defaults (heartbeat timeout 2 s, probe 0.3 s); median [min-max] of {a.rounds}")
    print(f"{'fault':<18} {'new round held s':>24} {'first allreduce after s':>26}")
    for f in faults:
        held = [x[0] for x in res[f]]
        first = [x[1] for x in res[f]]
        name = {"kill": "SIGKILL (death)", "freeze": "SIGSTOP (frozen)"}[f]
        print(f"{name:<18} {statistics.median(held):>9.3f} [{min(held):.3f}-{max(held):.3f}]"
              f" {statistics.median(first):>11.3f} [{min(first):.3f}-{max(first):.3f}]")
    print("torchelastic (torchrun, lost agent), measured reference: ~46 s")


if __name__ == "__main__":
    main()
