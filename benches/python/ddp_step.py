"""A DDP training step on CPU, dtcomm beside gloo in the same run (interleaved rounds).

    .venv/bin/python benches/python/ddp_step.py [--rounds 3] [--worlds 2,4]
        [--models resnet18,mlp100m] [--variants plain,no_sync,hook] [--steps 5] [--warmup 2]
        [--out target/bench-ddp]

Models: ``resnet18`` (ResNet-18's layers, 11.7 M parameters, batch 8 of 3x64x64 images) and
``mlp100m`` (6 x Linear(4096, 4096), 100.7 M parameters, batch 8). DDP with its default 25 MiB
buckets. Variants: ``plain`` (forward, backward, SGD step), ``no_sync`` (two micro-batches per
optimizer step, the first under ``no_sync``), ``hook`` (DDP's ``fp16_compress_hook``). One
thread per rank; the ranks meet at a TCPStore (env://) on a free port. Time per step = max over
ranks of the median of the timed steps. Prints medians over rounds with [min-max] and the ratio
gloo / dtcomm (> 1: dtcomm faster); writes every raw result as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------
# worker side
# ------------------------------------------------------------------------------------------
def resnet18() -> Any:
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.down = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x: Any) -> Any:
            y = self.b1(self.c1(x)).relu()
            return (self.b2(self.c2(y)) + self.down(x)).relu()

    layers: list[Any] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


def mlp100m() -> Any:
    import torch.nn as nn

    return nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(4096, 4096), nn.ReLU())])


def worker(backend: str, model_name: str, variant: str, steps: int, warmup: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = resnet18() if model_name == "resnet18" else mlp100m()
    ddp = DDP(model)
    if variant == "hook":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    if model_name == "resnet18":
        x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 1000, (8,))
    else:
        x, y = torch.randn(8, 4096), torch.randint(0, 4096, (8,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        if variant == "no_sync":
            with ddp.no_sync():
                loss_fn(ddp(x), y).backward()
        loss_fn(ddp(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    dist.barrier()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    med = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(json.dumps({"step_s": med.item(), "params": params, "world": world}), flush=True)
    dist.destroy_process_group()


# ------------------------------------------------------------------------------------------
# launcher side
# ------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(backend: str, world: int, model: str, variant: str, a: argparse.Namespace) -> float | None:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world),
               OMP_NUM_THREADS="1", DTCOMM_SOCKET_IFNAME="lo")
    cmd = [sys.executable, __file__, "--worker", backend, model, variant, str(a.steps), str(a.warmup)]
    kids = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for r in range(world)]
    out = ""
    ok = True
    for r, k in enumerate(kids):
        try:
            o, e = k.communicate(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            k.kill()
            o, e = k.communicate()
            ok = False
        if k.returncode != 0:
            ok = False
            print(f"  {backend} w{world} {model} {variant} rank {r} failed: {e.strip()[-500:]}", file=sys.stderr)
        if r == 0:
            out = o
    if not ok:
        return None
    line = [ln for ln in out.splitlines() if ln.startswith("{")]
    return json.loads(line[-1])["step_s"] if line else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--models", default="resnet18,mlp100m")
    ap.add_argument("--variants", default="plain,no_sync,hook")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default=str(ROOT / "target" / "bench-ddp"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    configs = [(w, m, v) for w in map(int, a.worlds.split(",")) for m in a.models.split(",")
               for v in a.variants.split(",")]
    res: dict[str, list[float]] = {}
    loads: list[float] = []
    for rnd in range(a.rounds):
        for w, m, v in configs:
            for backend in ("dtcomm", "gloo") if rnd % 2 == 0 else ("gloo", "dtcomm"):
                loads.append(os.getloadavg()[0])
                t = run(backend, w, m, v, a)
                print(f"round {rnd + 1} {backend} w{w} {m} {v}: {t if t is None else f'{t * 1e3:.1f} ms'}"
                      f" (load {loads[-1]:.2f})", flush=True)
                if t is not None:
                    res.setdefault(f"{backend}|{w}|{m}|{v}", []).append(t)
        # After every round, so that a run cut short still leaves its completed rounds.
        json.dump({"results": res, "loadavg": loads, "rounds_done": rnd + 1},
                  open(Path(a.out) / "ddp_step.json", "w"), indent=1)
        table(res, loads, configs, rnd + 1)


def table(res: dict[str, list[float]], loads: list[float], configs: list[tuple[int, str, str]], rounds: int) -> None:
    def cell(k: str) -> str:
        v = res.get(k, [])
        if not v:
            return "-"
        return f"{statistics.median(v) * 1e3:.0f} [{min(v) * 1e3:.0f}-{max(v) * 1e3:.0f}] ({len(v)})"

    print(f"\nDDP step time in ms after {rounds} round(s), median [min-max] (rounds) over interleaved rounds;"
          " one thread a rank")
    print(f"load average during the run: {min(loads):.2f}-{max(loads):.2f}")
    print("| world | model | variant | dtcomm | gloo | gloo/dtcomm |")
    print("|---|---|---|---|---|---|")
    for w, m, v in configs:
        d, g = res.get(f"dtcomm|{w}|{m}|{v}"), res.get(f"gloo|{w}|{m}|{v}")
        ratio = f"{statistics.median(g) / statistics.median(d):.2f}x" if d and g else "-"
        print(f"| {w} | {m} | {v} | {cell(f'dtcomm|{w}|{m}|{v}')} | {cell(f'gloo|{w}|{m}|{v}')} | {ratio} |",
              flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
