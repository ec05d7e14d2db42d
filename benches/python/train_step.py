"""Training steps on CPU the ways people start them, dtcomm beside gloo in the same run.

    .venv/bin/python benches/python/train_step.py [--rounds 3] [--worlds 2,4]
        [--workloads ddp_mlp,ddp_100m,fsdp2,tp] [--launchers spawn,spawn1,dtrun]
        [--steps 20] [--warmup 3] [--threads] [--out target/bench-train]

Workloads (every rank the same seed; losses are checked equal across backends by the tests,
not here):

* ``ddp_mlp``: DDP over an MLP 64-256-256-8, batch 32 (communication dominates);
* ``ddp_100m``: DDP over 6 x Linear(4096, 4096) (100.7 M parameters), batch 8;
* ``fsdp2``: ``fully_shard`` per layer, then the root, over the small MLP;
* ``tp``: ``parallelize_module`` with ``ColwiseParallel`` / ``RowwiseParallel`` pairs over an
  MLP 64-512-512-64 (all-reduces in forward and backward).

Launchers: ``spawn`` (``torch.multiprocessing.spawn``, torch's default threads: what
Lightning, Accelerate and plain ``python`` give), ``spawn1`` (the same with
``OMP_NUM_THREADS=1``) and ``dtrun`` (which sets ``OMP_NUM_THREADS=1`` as torchrun does).
Ranks meet through ``env://`` (``MASTER_ADDR``/``MASTER_PORT``). Time per step = max over ranks
of the median step. Rounds interleave the backends (odd rounds start with gloo).

``--threads`` adds, per run, the CPU time each thread of rank 0 used during the timed steps
(``/proc/self/task/*/stat``), grouped by thread name: where the cores went.
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
WORKLOADS = ("ddp_mlp", "ddp_100m", "fsdp2", "tp")


# ------------------------------------------------------------------------------------------
# worker side
# ------------------------------------------------------------------------------------------
def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of each live thread of this process, by thread name."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        secs = (int(fields[11]) + int(fields[12])) / tick
        key = f"{'main' if int(tid) == os.getpid() else name}#{tid}"
        out[key] = out.get(key, 0.0) + secs
    return out


def build(workload: str, rank: int, world: int) -> tuple[Any, Any, Any]:
    """(model to step, input, target) for `workload` on this rank."""
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    if workload == "ddp_mlp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        m = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 8))
        return DDP(m), torch.randn(32, 64), torch.randint(0, 8, (32,))
    if workload == "ddp_100m":
        from torch.nn.parallel import DistributedDataParallel as DDP

        m = nn.Sequential(*[x for _ in range(6) for x in (nn.Linear(4096, 4096), nn.ReLU())])
        return DDP(m), torch.randn(8, 4096), torch.randint(0, 4096, (8,))
    if workload == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        m = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 8))
        for layer in m:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(m)
        return m, torch.randn(32, 64), torch.randint(0, 8, (32,))
    if workload == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        m = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 64), nn.ReLU(),
                          nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 64))
        mesh = init_device_mesh("cpu", (world,))
        plan = {"0": ColwiseParallel(), "2": RowwiseParallel(), "4": ColwiseParallel(), "6": RowwiseParallel()}
        return parallelize_module(m, mesh, plan), torch.randn(32, 64), torch.randn(32, 64)
    raise ValueError(f"unknown workload {workload!r}")


def train(backend: str, workload: str, steps: int, warmup: int, threads: bool) -> dict[str, Any] | None:
    """Runs the steps on this rank (process group already set up by the caller's env)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    model, x, y = build(workload, rank, world)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.MSELoss() if workload == "tp" else torch.nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    dist.barrier()
    before, cpu0, wall0 = thread_cpu(), time.process_time(), time.perf_counter()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    after, cpu1, wall1 = thread_cpu(), time.process_time(), time.perf_counter()
    med = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    result = None
    if rank == 0:
        result = {"step_s": med.item(), "world": world, "torch_threads": torch.get_num_threads(),
                  "process_cpu_per_step_s": (cpu1 - cpu0) / steps, "wall_s": wall1 - wall0}
        if threads:
            per = {k: (after[k] - before.get(k, 0.0)) / steps for k in after}
            grouped: dict[str, float] = {}
            for k, v in per.items():
                name = k.split("#")[0]
                grouped[name] = grouped.get(name, 0.0) + v
            result["thread_cpu_per_step_s"] = dict(sorted(grouped.items(), key=lambda kv: -kv[1]))
    dist.destroy_process_group()
    return result


def spawned(rank: int, world: int, backend: str, workload: str, steps: int, warmup: int, threads: bool,
            out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    r = train(backend, workload, steps, warmup, threads)
    if r is not None:
        Path(out).write_text(json.dumps(r))


# ------------------------------------------------------------------------------------------
# launcher side
# ------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(backend: str, world: int, workload: str, launcher: str, a: argparse.Namespace) -> dict[str, Any] | None:
    """One run in a child process (so that each starts with fresh threads and environment)."""
    out = Path(a.out) / f"last-{os.getpid()}.json"
    out.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(DTCOMM_SOCKET_IFNAME="lo")
    if launcher == "dtrun":
        cmd = [str(Path(sys.executable).parent / "dtrun"), "--nproc-per-node", str(world), __file__,
               "--worker", backend, workload, str(a.steps), str(a.warmup), str(int(a.threads)), str(out)]
    else:
        if launcher == "spawn1":
            env["OMP_NUM_THREADS"] = "1"
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        cmd = [sys.executable, __file__, "--spawn", backend, workload, str(world), str(a.steps), str(a.warmup),
               str(int(a.threads)), str(out)]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        print(f"  {backend} {workload} w{world} {launcher}: timed out", file=sys.stderr)
        return None
    if p.returncode != 0 or not out.exists():
        print(f"  {backend} {workload} w{world} {launcher} failed ({p.returncode}): {p.stderr.strip()[-800:]}",
              file=sys.stderr)
        return None
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--launchers", default="spawn,spawn1,dtrun")
    ap.add_argument("--backends", default="dtcomm,gloo")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", action="store_true", help="per-thread CPU time of rank 0")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default=str(ROOT / "target" / "bench-train"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    configs = [(w, wl, la) for w in map(int, a.worlds.split(",")) for wl in a.workloads.split(",")
               for la in a.launchers.split(",")]
    backends = a.backends.split(",")
    res: dict[str, list[float]] = {}
    raw: list[dict[str, Any]] = []
    loads: list[float] = []
    for rnd in range(a.rounds):
        for w, wl, la in configs:
            for backend in backends if rnd % 2 == 0 else backends[::-1]:
                loads.append(os.getloadavg()[0])
                r = run(backend, w, wl, la, a)
                t = None if r is None else r["step_s"]
                print(f"round {rnd + 1} {backend} w{w} {wl} {la}: {'-' if t is None else f'{t * 1e3:.2f} ms'}"
                      f" (load {loads[-1]:.2f})", flush=True)
                if r is not None and a.threads:
                    top = list(r.get("thread_cpu_per_step_s", {}).items())[:6]
                    print("    cpu/step: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in top), flush=True)
                if r is not None:
                    res.setdefault(f"{backend}|{w}|{wl}|{la}", []).append(t)
                    raw.append(dict(r, backend=backend, workload=wl, launcher=la, round=rnd + 1))
        json.dump({"results": res, "runs": raw, "loadavg": loads, "rounds_done": rnd + 1},
                  open(Path(a.out) / "train_step.json", "w"), indent=1)
        table(res, loads, configs, backends, rnd + 1)


def table(res: dict[str, list[float]], loads: list[float], configs: list[tuple[int, str, str]],
          backends: list[str], rounds: int) -> None:
    def cell(k: str) -> str:
        v = res.get(k, [])
        if not v:
            return "-"
        return f"{statistics.median(v) * 1e3:.2f} [{min(v) * 1e3:.2f}-{max(v) * 1e3:.2f}] ({len(v)})"

    print(f"\nstep time in ms after {rounds} round(s), median [min-max] (runs), interleaved rounds")
    print(f"load average during the run: {min(loads):.2f}-{max(loads):.2f}")
    print("| world | workload | launcher | " + " | ".join(backends) + " | gloo/dtcomm |")
    print("|---|---|---|" + "---|" * len(backends) + "---|")
    for w, wl, la in configs:
        d, g = res.get(f"dtcomm|{w}|{wl}|{la}"), res.get(f"gloo|{w}|{wl}|{la}")
        ratio = f"{statistics.median(g) / statistics.median(d):.2f}x" if d and g else "-"
        cells = " | ".join(cell(f"{b}|{w}|{wl}|{la}") for b in backends)
        print(f"| {w} | {wl} | {la} | {cells} | {ratio} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        # under dtrun: the environment is torchrun's
        _, _, be, wl, st, wu, th, outp = sys.argv
        res = train(be, wl, int(st), int(wu), th == "1")
        if res is not None:
            Path(outp).write_text(json.dumps(res))
    elif len(sys.argv) > 1 and sys.argv[1] == "--spawn":
        import torch.multiprocessing as mp

        _, _, be, wl, wd, st, wu, th, outp = sys.argv
        mp.spawn(spawned, args=(int(wd), be, wl, int(st), int(wu), th == "1", outp), nprocs=int(wd), join=True)
    else:
        main()
