"""gloo's allgather across emulated hosts, for the same sizes as ``all_gather_perf`` (size =
the whole gathered output, nccl-tests style), one rank per host of ``scripts/emu_cluster.sh``
(which must be up with at least ``--world`` hosts; needs root):

    scripts/emu_cluster.sh up 4 10gbit 50us
    .venv/bin/python benches/python/emu_gloo_allgather.py --world 4 --sizes 64,1K,8K

Per size: warm-up, a barrier, then ``--iters`` blocking calls; prints, per size, the median and
minimum per-call time in µs (max over ranks), as ``all_gather_perf`` prints dtcomm's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

EMU = Path(__file__).resolve().parents[2] / "scripts" / "emu_cluster.sh"


def size(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1].upper(), 1)
    return int(s[:-1] if mult > 1 else s) * mult


def worker(sizes: list[int], iters: int, warmup: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    world = dist.get_world_size()
    out = {}
    for n in sizes:
        mine = torch.ones(max(1, n // 4 // world))
        allt = torch.empty(mine.numel() * world)
        for _ in range(warmup):
            dist.all_gather_into_tensor(allt, mine)
        dist.barrier()
        ts = []
        for _ in range(iters):
            t = time.perf_counter()
            dist.all_gather_into_tensor(allt, mine)
            ts.append(time.perf_counter() - t)
        out[n] = (statistics.median(ts) * 1e6, min(ts) * 1e6)
    print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--sizes", default="64,1K,8K")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    sizes = [size(s) for s in a.sizes.split(",")]
    if a.worker:
        worker(sizes, a.iters, a.warmup)
        return
    env = {**os.environ, "MASTER_ADDR": "10.77.0.1", "MASTER_PORT": "29511",
           "WORLD_SIZE": str(a.world), "GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"}
    kids = [subprocess.Popen([str(EMU), "exec", str(r), sys.executable, __file__, "--worker",
                              "--sizes", a.sizes, "--iters", str(a.iters), "--warmup",
                              str(a.warmup)], env={**env, "RANK": str(r)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for r in range(a.world)]
    outs = [k.communicate(timeout=600)[0] for k in kids]
    if any(k.returncode for k in kids):
        raise SystemExit("gloo allgather failed:\n" + "\n".join(outs)[-3000:])
    res = [json.loads(line.split("RESULT ", 1)[1]) for o in outs for line in o.splitlines()
           if line.startswith("RESULT ")]
    for n in sizes:
        med = max(r[str(n)][0] for r in res)
        low = max(r[str(n)][1] for r in res)
        print(f"gloo allgather world {a.world} {n} B: median {med:.1f} us, min {low:.1f} us")


if __name__ == "__main__":
    main()
