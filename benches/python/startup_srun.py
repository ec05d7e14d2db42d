"""Start-up under Slurm beside torchrun: the time from launching a world of 4 on this host to
every rank having finished its first collective, for one script run three ways, interleaved
round by round:

* ``srun -n 4`` (a real one-node Slurm this script starts, ``python/tests/slurm_cluster.py``)
  with ``init_process_group("dtcomm", init_method="dtcomm://")``: ranks and store from Slurm's
  variables, rank 0 hosting the store;
* ``torchrun --standalone --nproc-per-node 4`` with ``init_process_group("dtcomm")`` on
  torchrun's c10d store (``env://``);
* the same under torchrun with ``gloo`` (the incumbent backend), for scale.

    .venv/bin/python benches/python/startup_srun.py [--rounds 3]

Each run's clock starts just before the launcher is started and stops at the latest rank's
wall-clock time after its first ``all_reduce`` returned (same host, one clock); Python's and
torch's import is inside it, as a user sees it. Prints every round, then the median with
[min-max] per way. Needs root and Debian's slurm-wlm and munge (scripts/setup.sh).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "tests"))

WORKER = r"""
import os, time
import torch, torch.distributed as dist
init = os.environ.get("INIT")
if init:
    import dtcomm  # registers dtcomm://
dist.init_process_group(os.environ["BACKEND"], init_method=init)
x = torch.ones(1024)
dist.all_reduce(x)
print(f"FIRST {dist.get_rank()} {time.time():.6f} {x[0].item():g}", flush=True)
dist.destroy_process_group()
"""


def one(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    ends = [float(t) for _, t, s in re.findall(r"FIRST (\d) ([\d.]+) ([\d.]+)", p.stdout)
            if float(s) == 4]
    if len(ends) != 4:
        raise SystemExit(f"expected 4 ranks with sum 4:\n{p.stdout}\n{p.stderr}")
    return max(ends) - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from dtgroup import base_env
    from slurm_cluster import _stop, start

    tmp = Path(tempfile.mkdtemp(prefix="dtcomm-startup-"))
    script = tmp / "first.py"
    script.write_text(WORKER)
    env = base_env({"DTCOMM_TIMEOUT": "60"})
    # As users run it: no OMP_NUM_THREADS from us (torchrun sets 1 itself).
    env.pop("OMP_NUM_THREADS", None)
    slurm, pids = start(tmp / "slurm", env)
    py = sys.executable
    ways = {
        "srun -n 4, dtcomm, dtcomm://": (
            ["srun", "-n", "4", "--export=ALL,BACKEND=dtcomm,INIT=dtcomm://", py, str(script)],
            slurm.env),
        "torchrun, dtcomm, c10d store": (
            [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
             str(script)], {**env, "BACKEND": "dtcomm"}),
        "torchrun, gloo, c10d store": (
            [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
             str(script)], {**env, "BACKEND": "gloo"}),
    }
    got: dict[str, list[float]] = {k: [] for k in ways}
    try:
        one(*ways["srun -n 4, dtcomm, dtcomm://"])  # warm the page cache once, not counted
        for r in range(args.rounds):
            for name, (cmd, e) in ways.items():
                s = one(cmd, e)
                got[name].append(s)
                print(f"round {r + 1}: {name}: {s:.2f} s", flush=True)
    finally:
        for pid in reversed(pids):
            _stop(pid)
    load = os.getloadavg()
    print(f"\nstart to first all_reduce done, world 4 on one host ({os.cpu_count()} cores, "
          f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}), median [min-max] of {args.rounds}:")
    for name, v in got.items():
        print(f"  {name:32s} {statistics.median(v):6.2f} s  [{min(v):.2f}-{max(v):.2f}]")


if __name__ == "__main__":
    main()
