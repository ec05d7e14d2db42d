"""All-reduce on CUDA tensors: dtcomm's NCCL path and host-staging path beside torch's ``nccl``
backend, and gloo on host tensors, in one run (interleaved rounds). Needs a GPU.

    .venv/bin/python benches/python/cuda_allreduce.py [--rounds 3] [--sizes 8,64K,1M,16M,64M]
        [--world N] [--stage-world 2] [--out target/bench-cuda]

NCCL modes (dtcomm with ``DTCOMM_CUDA=nccl`` and torch ``nccl``) run at ``--world`` ranks, one
per GPU (default: the number of GPUs; world 1 on a one-GPU machine, where the time per call is
the per-call overhead over NCCL's own). Staging (``DTCOMM_CUDA=stage``, copies included) and
gloo (host tensors, no copies) run at ``--stage-world`` ranks sharing the GPUs. float32 sum in
place; per size the incumbents' schedule of warm-up and timed iterations, the loop ended by ``torch.cuda.synchronize()``; time per
call = max over ranks. Prints nccl-tests columns per mode (median over rounds, with range) and
writes every raw result as JSON.
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benches" / "incumbents"))
from common import busbw_factor, parse_size, schedule  # noqa: E402  (shared with the incumbents)


def worker(mode: str, sizes: list[int]) -> None:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    backend = {"dtcomm-nccl": "dtcomm", "dtcomm-stage": "dtcomm", "torch-nccl": "nccl", "gloo": "gloo"}[mode]
    on_gpu = mode != "gloo"
    dev = torch.device("cuda", rank % torch.cuda.device_count()) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(dev)
    dist.init_process_group(backend)
    out = []
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, device=dev)
        warm, iters = schedule(nbytes)
        for _ in range(warm):
            dist.all_reduce(x)
        if on_gpu:
            torch.cuda.synchronize()
        dist.barrier()
        t = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        if on_gpu:
            torch.cuda.synchronize()
        out.append({"bytes": nbytes, "us": (time.perf_counter() - t) / iters * 1e6})
    print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(mode: str, world: int, sizes: list[int]) -> list[dict[str, float]]:
    port = free_port()
    env_mode = {"dtcomm-nccl": "nccl", "dtcomm-stage": "stage"}.get(mode)
    procs = []
    for r in range(world):
        env = {**os.environ, "RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        if env_mode:
            env["DTCOMM_CUDA"] = env_mode
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--worker", mode, "--sizes", ",".join(map(str, sizes))],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    per_rank = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        line = next((l for l in out.splitlines() if l.startswith("RESULT ")), None)
        if p.returncode != 0 or line is None:
            raise SystemExit(f"{mode} at world {world} failed:\n{out}")
        per_rank.append(json.loads(line[len("RESULT "):]))
    return [{"bytes": rows[0]["bytes"], "us": max(r["us"] for r in rows)} for rows in zip(*per_rank)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--sizes", default="8,65536,1M,16M,64M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--world", type=int, default=0)
    ap.add_argument("--stage-world", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "target" / "bench-cuda"))
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    if a.worker:
        worker(a.worker, sizes)
        return
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark needs a GPU")
    world = a.world or torch.cuda.device_count()
    plan = [("dtcomm-nccl", world), ("torch-nccl", world), ("dtcomm-stage", a.stage_world), ("gloo", a.stage_world)]
    raw: dict[str, list[list[dict[str, float]]]] = {m: [] for m, _ in plan}
    for rnd in range(a.rounds):
        for mode, w in plan:  # interleaved: every mode once per round
            raw[mode].append(run(mode, w, sizes))
        print(f"round {rnd + 1}/{a.rounds} done", flush=True)
    print(f"# {torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} GPU(s); medians of {a.rounds} rounds [min-max]")
    for mode, w in plan:
        print(f"# {mode} (world {w})")
        print(f"# {'size':>12} {'count':>12} {'type':>6} {'redop':>6} {'time(us)':>10} {'algbw':>8} {'busbw':>8}  range(us)")
        for i, nbytes in enumerate(sizes):
            us = [r[i]["us"] for r in raw[mode]]
            med = statistics.median(us)
            algbw = nbytes / med / 1e3
            busbw = algbw * busbw_factor("allreduce", w)
            print(f"  {nbytes:>12} {nbytes // 4:>12} {'float':>6} {'sum':>6} {med:>10.1f} {algbw:>8.2f} {busbw:>8.2f}"
                  f"  [{min(us):.1f}-{max(us):.1f}]")
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "cuda_allreduce.json").write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
