"""Horovod's DistributedOptimizer on dtcomm, fused and unfused, beside torch DDP on gloo, in the
same run (interleaved rounds).

    .venv/bin/python benches/python/horovod_bench.py [--rounds 3] [--worlds 2,4]
        [--steps 10] [--warmup 3] [--out target/bench-horovod]

Two gradient shapes, each one training step (backward, whose hooks submit the gradients, then
``optimizer.step()``, which waits for them): ``100x4KiB`` (100 parameters of 1024 float32) and
``1x25MiB`` (one parameter of 6,553,600 float32, a ResNet-50-sized gradient). Three variants:
``hvd-fused`` (``dtcomm.horovod.torch.DistributedOptimizer``, Horovod's default fusion
threshold of 128 MiB), ``hvd-unfused`` (``HOROVOD_FUSION_THRESHOLD=0``: one allreduce per
gradient) and ``ddp-gloo`` (``DistributedDataParallel`` on gloo with its default 25 MiB buckets,
then SGD). The dtcomm ranks are started by ``dtrun -np N``; the gloo ranks by this script with
torchrun's variables (rank 0 hosts the TCPStore). Time per step = max over ranks of the median
of the timed steps. Prints medians over rounds with [min-max], the fused/unfused speed-up and
gloo / dtcomm (> 1: dtcomm faster); writes every raw result as JSON.

With ``--emu RATE/DELAY`` (e.g. ``10gbit/50us``; needs root) every rank runs on a host of its
own in the emulated cluster of ``scripts/emu_cluster.sh`` (a network namespace per host, each
NIC limited to RATE with DELAY each way: by ``tc netem``, or by ``emu_wire`` where the kernel
has no netem), so each operation crosses a network as between real hosts: every variant's
ranks then start with torchrun's variables, rank 0 on ``dtc-h0`` hosting the store. The
measured host-to-host round trip is printed first.
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
SHAPES = {"100x4KiB": (100, 1024), "1x25MiB": (1, 25 << 18)}
VARIANTS = ("hvd-fused", "hvd-unfused", "ddp-gloo")


# ------------------------------------------------------------------------------------------
# worker side
# ------------------------------------------------------------------------------------------
def model(count: int, numel: int) -> Any:
    import torch

    class Grads(torch.nn.Module):
        """``count`` parameters of ``numel`` elements; the loss is linear in each, so backward
        costs one multiply per element and every gradient is known."""

        def __init__(self) -> None:
            super().__init__()
            self.ps = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.zeros(numel)) for _ in range(count)])

        def forward(self, xs: list[Any]) -> Any:
            return sum((p * x).sum() for p, x in zip(self.ps, xs))

    return Grads()


def worker(variant: str, shapes: list[str], steps: int, warmup: int) -> None:
    import torch

    torch.set_num_threads(1)
    if variant.startswith("hvd"):
        import dtcomm.horovod.torch as hvd

        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    else:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
    out: dict[str, Any] = {"rank": rank, "world": size, "variant": variant, "steps": {}}
    for shape in shapes:
        count, numel = SHAPES[shape]
        m = model(count, numel)
        xs = [torch.full((numel,), float(rank + 1)) for _ in range(count)]
        opt: Any = torch.optim.SGD(m.parameters(), lr=0.0)
        if variant.startswith("hvd"):
            opt = hvd.DistributedOptimizer(opt, named_parameters=m.named_parameters())
            net: Any = m
        else:
            from torch.nn.parallel import DistributedDataParallel

            net = DistributedDataParallel(m)
        times = []
        for s in range(warmup + steps):
            t0 = time.perf_counter()
            opt.zero_grad()
            net(xs).backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        # Every gradient is the average of (rank + 1) over ranks.
        want = (size + 1) / 2
        got = [p.grad[0].item() for p in m.ps]
        assert all(abs(g - want) < 1e-4 for g in got), (shape, got[:3], want)
        out["steps"][shape] = statistics.median(times[warmup:])
        if variant.startswith("hvd"):
            hvd.barrier()
        else:
            dist.barrier()
    print("RESULT " + json.dumps(out), flush=True)
    if variant.startswith("hvd"):
        hvd.shutdown()
    else:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------------
# driver side
# ------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


EMU = ROOT / "scripts" / "emu_cluster.sh"


def run(variant: str, world: int, shapes: list[str], steps: int, warmup: int,
        emu: bool = False) -> list[dict[str, Any]]:
    args = [__file__, "--worker", variant, "--shapes", ",".join(shapes), "--steps", str(steps),
            "--warmup", str(warmup)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "DTCOMM_RDZV"))}
    env.update(OMP_NUM_THREADS="1", DTCOMM_SOCKET_IFNAME="lo")
    if variant == "hvd-unfused":
        env["HOROVOD_FUSION_THRESHOLD"] = "0"
    if emu:
        # One rank per emulated host: torchrun's variables, rank 0's host serving the store.
        env.update(MASTER_ADDR="10.77.0.1", MASTER_PORT=str(29500 + world), WORLD_SIZE=str(world),
                   DTCOMM_SOCKET_IFNAME="eth0", GLOO_SOCKET_IFNAME="eth0",
                   LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        kids = [subprocess.Popen([str(EMU), "exec", str(r), sys.executable, *args],
                                 env={**env, "RANK": str(r), "GROUP_RANK": str(r)},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for r in range(world)]
        outs = [k.communicate(timeout=900)[0] for k in kids]
        ok = all(k.returncode == 0 for k in kids)
    elif variant.startswith("hvd"):
        p = subprocess.run([sys.executable, "-m", "dtcomm", "-np", str(world), *args],
                           capture_output=True, text=True, timeout=900, env=env)
        outs = [p.stdout + p.stderr]
        ok = p.returncode == 0
    else:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world))
        kids = [subprocess.Popen([sys.executable, *args], env={**env, "RANK": str(r),
                                                               "LOCAL_RANK": str(r)},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for r in range(world)]
        outs = [k.communicate(timeout=900)[0] for k in kids]
        ok = all(k.returncode == 0 for k in kids)
    if not ok:
        raise SystemExit(f"{variant} at world {world} failed:\n" + "\n".join(outs)[-4000:])
    # (dtrun prefixes each worker's lines with "[rankN]: ")
    res = [json.loads(line.split("RESULT ", 1)[1]) for o in outs for line in o.splitlines()
           if "RESULT {" in line]
    if len(res) != world:
        raise SystemExit(f"{variant} at world {world}: {len(res)} results of {world}:\n" + "\n".join(outs)[-4000:])
    return res


PING = """
import socket, statistics, sys, time
if sys.argv[1] == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 29399)); s.listen(1); c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while (b := c.recv(1)):
        c.sendall(b)
else:
    for _ in range(100):
        try:
            c = socket.create_connection((sys.argv[2], 29399)); break
        except OSError:
            time.sleep(0.05)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ts = []
    for _ in range(500):
        t = time.perf_counter(); c.sendall(b"x"); c.recv(1); ts.append(time.perf_counter() - t)
    ts.sort()
    print(f"{ts[len(ts) // 2] * 1e6:.0f} [{ts[len(ts) // 10] * 1e6:.0f}-{ts[len(ts) * 9 // 10] * 1e6:.0f}]")
"""


def emu_rtt() -> str:
    """Median [p10-p90] round trip (us) of one byte over TCP between emulated hosts 0 and 1,
    Python to Python: what a small message costs on these links, the wire's overhead included."""
    srv = subprocess.Popen([str(EMU), "exec", "1", sys.executable, "-c", PING, "serve"])
    try:
        out = subprocess.run([str(EMU), "exec", "0", sys.executable, "-c", PING, "ping",
                              "10.77.0.2"], capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or out.stderr.strip()[-200:]
    finally:
        srv.kill()
        srv.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "target" / "bench-horovod"))
    ap.add_argument("--emu", metavar="RATE/DELAY",
                    help="one emulated host per rank (scripts/emu_cluster.sh), e.g. 10gbit/50us")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    if a.worker:
        worker(a.worker, shapes, a.steps, a.warmup)
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    worlds = [int(w) for w in a.worlds.split(",")]
    variants = a.variants.split(",")
    # (variant, world, shape) -> per-round step seconds (max over ranks)
    rows: dict[tuple[str, int, str], list[float]] = {}
    raw = []
    print(f"# load before: {os.getloadavg()}", flush=True)
    if a.emu:
        rate, delay = a.emu.split("/")
        subprocess.run([str(EMU), "up", str(max(worlds)), rate, delay], check=True)
        print(f"# emulated hosts: one per rank, links {rate} with {delay} each way; "
              f"host-to-host TCP round trip (us, Python): {emu_rtt()}", flush=True)
    try:
        rounds(a, worlds, variants, shapes, rows, raw)
    finally:
        if a.emu:
            subprocess.run([str(EMU), "down"], check=False)
    (out / "horovod_bench.json").write_text(json.dumps(raw, indent=1))
    report(a.rounds, worlds, variants, shapes, rows)


def rounds(a: Any, worlds: list[int], variants: list[str], shapes: list[str],
           rows: dict[tuple[str, int, str], list[float]], raw: list[Any]) -> None:
    for r in range(a.rounds):
        for world in worlds:
            for v in variants:
                res = run(v, world, shapes, a.steps, a.warmup, emu=bool(a.emu))
                raw.append({"round": r, "variant": v, "world": world, "ranks": res})
                for s in shapes:
                    t = max(x["steps"][s] for x in res)
                    rows.setdefault((v, world, s), []).append(t)
                    print(f"# round {r} world {world} {v} {s}: {t * 1e3:.2f} ms "
                          f"(load {os.getloadavg()[0]:.2f})", flush=True)


def report(n_rounds: int, worlds: list[int], variants: list[str], shapes: list[str],
           rows: dict[tuple[str, int, str], list[float]]) -> None:
    def cell(k: tuple[str, int, str]) -> str:
        v = rows.get(k)
        if not v:
            return "-"
        return f"{statistics.median(v) * 1e3:.2f} [{min(v) * 1e3:.2f}-{max(v) * 1e3:.2f}]"

    def med(k: tuple[str, int, str]) -> float:
        v = rows.get(k)
        return statistics.median(v) if v else float("nan")

    print(f"\nstep time in ms, median [min-max] of {n_rounds} interleaved rounds; "
          f"load after: {os.getloadavg()}")
    print("| world | gradients | " + " | ".join(variants)
          + " | unfused / fused | gloo / hvd-fused |")
    print("|---|---|" + "---|" * (len(variants) + 2))
    for world in worlds:
        for s in shapes:
            ks = {v: (v, world, s) for v in variants}
            print(f"| {world} | {s} | " + " | ".join(cell(ks[v]) for v in variants)
                  + f" | {med(('hvd-unfused', world, s)) / med(('hvd-fused', world, s)):.2f}x"
                  + f" | {med(('ddp-gloo', world, s)) / med(('hvd-fused', world, s)):.2f}x |")


if __name__ == "__main__":
    main()
