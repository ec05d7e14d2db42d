"""torchelastic's etcd rendezvous barrier at N agents: dt-rdzv's etcd v2 door beside real etcd
3.4 (`--enable-v2`) in the same run, and each server's memory.

    .venv/bin/python benches/python/etcd_barrier.py [--agents 8,32,128,256] [--rounds 3]
        [--backend etcd|etcd-v2] [--procs 4]

Each measurement is one fresh run id with ``min = max = N``: N rendezvous handlers exactly as
torchrun builds them (``etcd``: the legacy watch-driven handler; ``etcd-v2``: the dynamic
handler, which polls once a second), spread over ``--procs`` processes as threads, all released
at once; the time is from the release to the last handler's ``next_rendezvous()`` returning.
Sizes and servers are interleaved round by round; medians with [min-max]. After the runs it
prints each server's resident memory (VmRSS, and VmHWM: the peak).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "interop"))
sys.path.insert(0, str(ROOT / "python" / "tests"))

from etcd_servers import V2Server, start_door, start_etcd  # noqa: E402

AGENTS = r"""
import sys, threading, time
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler
endpoint, backend, run_id, total, mine, go = sys.argv[1:7]
total, mine = int(total), int(mine)
handlers = []
for i in range(mine):
    p = RendezvousParameters(backend=backend, endpoint=endpoint, run_id=run_id,
                             min_nodes=total, max_nodes=total, local_addr="127.0.0.1",
                             last_call_timeout=1, timeout=300, join_timeout=300)
    handlers.append(get_rendezvous_handler(p))
done = []
def one(h):
    h.next_rendezvous()
    done.append(time.time())
threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in handlers]
print("ready", flush=True)
while not __import__("os").path.exists(go):
    time.sleep(0.005)
for t in threads:
    t.start()
for t in threads:
    t.join()
print("done", max(done), flush=True)
"""


def barrier(server: V2Server, backend: str, n: int, procs: int, tmp: Path) -> float:
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    go = tmp / f"go-{run_id}"
    shares = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    ps = [subprocess.Popen([sys.executable, "-c", AGENTS, server.endpoint, backend, run_id,
                            str(n), str(k), str(go)], stdout=subprocess.PIPE, text=True,
                           stderr=subprocess.DEVNULL,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
          for k in shares if k > 0]
    for p in ps:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    start = time.time()
    go.touch()
    ends = []
    for p in ps:
        assert p.stdout is not None
        line = p.stdout.readline().split()
        p.wait(timeout=600)
        assert line and line[0] == "done", f"{server.name}: agents failed ({p.returncode})"
        ends.append(float(line[1]))
    return max(ends) - start


def memory(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return f"VmRSS {fields['VmRSS'].strip()}, VmHWM {fields['VmHWM'].strip()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", default="8,32,128,256")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", default="etcd", choices=["etcd", "etcd-v2"])
    ap.add_argument("--procs", type=int, default=4)
    args = ap.parse_args()
    sizes = [int(s) for s in args.agents.split(",")]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        servers = [start_door(tmp, "--no-auth"), start_etcd(tmp)]
        times: dict[tuple[str, int], list[float]] = {}
        try:
            for r in range(args.rounds):
                for n in sizes:
                    for s in servers if r % 2 == 0 else servers[::-1]:
                        t = barrier(s, args.backend, n, args.procs, tmp)
                        times.setdefault((s.name, n), []).append(t)
                        print(f"round {r + 1} {s.name:8} {n:4} agents: {t:.3f} s", flush=True)
            print(f"\n{args.backend} barrier, median [min-max] of {args.rounds} "
                  f"(load {os.getloadavg()[0]:.1f}):")
            print(f"| agents | dt-rdzv | etcd 3.4 | ratio |\n|---|---|---|---|")
            for n in sizes:
                a, b = times[("dt-rdzv", n)], times[("etcd", n)]
                fmt = lambda v: f"{statistics.median(v):.3f} s [{min(v):.3f}-{max(v):.3f}]"  # noqa: E731
                print(f"| {n} | {fmt(a)} | {fmt(b)} | "
                      f"{statistics.median(b) / statistics.median(a):.2f}x |")
            for s in servers:
                print(f"{s.name} memory after the runs: {memory(s.proc.pid)}")
        finally:
            for s in servers:
                s.stop()


if __name__ == "__main__":
    main()
