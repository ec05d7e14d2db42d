"""Python-level allreduce beside the Rust engine and torch's gloo, in one run.

    .venv/bin/python benches/python/python_allreduce.py [--rounds 3] [--world 2]
        [--sizes 8,1K,64K,1M,16M,64M] [--startup-world 4] [--out target/bench-python]

Per round, interleaved: the Rust ``all_reduce_perf`` (in place), dtcomm from Python on numpy
arrays, on torch tensors (``dtcomm.all_reduce``), through ``torch.distributed`` with backend
``dtcomm``, and gloo (``benches/incumbents/gloo_bench.py``); float32 sum in place, the per-size
schedule of warm-up and iterations of ``benches/incumbents/common.py``, time per call = max over
ranks of the timed loop / iterations. Then start-up at ``--startup-world``: process launch to the end of the
first barrier (max over ranks), with the import share, for dtcomm (numpy), dtcomm as a torch
backend, and gloo. Prints medians over rounds and ratios; writes every raw result as JSON.
"""

from __future__ import annotations

import os
import sys
import time

T_PY = time.time()  # worker start, before any import

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
INCUMBENTS = Path(os.environ.get("INCUMBENTS", ROOT / "benches" / "incumbents"))
sys.path.insert(0, str(INCUMBENTS))
from common import schedule  # noqa: E402  (the incumbents' per-size (warm-up, iterations))

KiB, MiB = 1 << 10, 1 << 20


def parse_size(s: str) -> int:
    s = s.strip().upper()
    for suf, m in (("M", MiB), ("K", KiB)):
        if s.endswith(suf):
            return int(s[:-1]) * m
    return int(s)


def fmt(b: int) -> str:
    return f"{b // MiB} MiB" if b >= MiB else (f"{b // KiB} KiB" if b >= KiB else f"{b} B")


# ------------------------------------------------------------------------------------------
# worker side
# ------------------------------------------------------------------------------------------
def worker(mode: str, sizes: list[int]) -> None:
    t_launch = float(os.environ["T_LAUNCH"])
    if mode == "torchdist":
        import torch
        import torch.distributed as dist

        t_imp = time.time()
        dist.init_process_group("dtcomm")
        dist.barrier()
        t_bar = time.time()

        def allreduce(x: object) -> None:
            dist.all_reduce(x)  # type: ignore[arg-type]

        def maxed(v: list[float]) -> list[float]:
            t = torch.tensor(v, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return t.tolist()

        make = lambda n: torch.ones(n // 4, dtype=torch.float32)  # noqa: E731
    else:
        import numpy as np

        import dtcomm

        t_imp = time.time()
        dtcomm.init(verbose=False)
        dtcomm.barrier()
        t_bar = time.time()

        def maxed(v: list[float]) -> list[float]:
            a = np.array(v, dtype=np.float64)
            dtcomm.all_reduce(a, dtcomm.MAX)
            return a.tolist()

        allreduce = dtcomm.all_reduce
        if mode == "torch":
            import torch

            make = lambda n: torch.ones(n // 4, dtype=torch.float32)  # noqa: E731
        else:
            make = lambda n: np.ones(n // 4, dtype=np.float32)  # noqa: E731
    start = maxed([t_bar - t_launch, t_imp - T_PY, T_PY - t_launch])
    out: dict[str, object] = {
        "startup": {"launch_to_barrier_s": start[0], "import_s": start[1], "launch_to_python_s": start[2]},
        "results": [],
    }
    for n in sizes:
        warm, iters = schedule(n)
        x = make(n)
        for _ in range(warm):
            allreduce(x)
        maxed([0.0])
        t0 = time.perf_counter()
        for _ in range(iters):
            allreduce(x)
        dt = (time.perf_counter() - t0) / iters
        out["results"].append({"bytes": n, "avg_us": maxed([dt])[0] * 1e6, "iters": iters})  # type: ignore[union-attr]
    rank = int(os.environ["RANK"])
    if rank == 0:
        print(json.dumps(out), flush=True)
    if mode == "torchdist":
        dist.destroy_process_group()
    else:
        dtcomm.shutdown()


# ------------------------------------------------------------------------------------------
# launcher side
# ------------------------------------------------------------------------------------------
def spawn_group(mode: str, world: int, sizes: list[int], timeout: float = 600) -> dict:
    import dtcomm

    server = dtcomm.RdzvServer("127.0.0.1", 0)
    base = dict(os.environ, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(server.port),
                TORCHELASTIC_USE_AGENT_STORE="True", DTCOMM_RDZV_ENDPOINT=server.endpoint,
                DTCOMM_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="ERROR")
    cmd = [sys.executable, __file__, "--worker", mode, "--sizes", ",".join(map(str, sizes))]
    procs = []
    try:
        for r in range(world):
            env = dict(base, RANK=str(r), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world),
                       T_LAUNCH=repr(time.time()))
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                                          text=True))
        out = procs[0].communicate(timeout=timeout)[0]
        for p in procs[1:]:
            p.wait(timeout=timeout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()  # our own workers, by PID
                p.wait()
        server.stop()
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{mode} workers failed: {[p.returncode for p in procs]}")
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def rust(world: int, sizes: list[int], outdir: Path, tag: str) -> dict:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    js = outdir / f"rust_{tag}.json"
    subprocess.run([str(target / "release" / "all_reduce_perf"), "--world", str(world), "--sizes",
                    ",".join(map(str, sizes)), "--anchor-schedule", "-d", "float", "-o", "sum", "-J", str(js)],
                   env=dict(os.environ, DTCOMM_SOCKET_IFNAME="lo"), check=True, stdout=subprocess.DEVNULL,
                   timeout=900)
    d = json.loads(js.read_text())
    return {"results": [{"bytes": r["size"], "avg_us": r["in_place"]["time"]} for r in d["results"]]}


def gloo(world: int, sizes: list[int], outdir: Path, tag: str) -> dict:
    js = outdir / f"gloo_{tag}.json"
    subprocess.run([sys.executable, "gloo_bench.py", "--world", str(world), "--timeout", "850", "--sizes",
                    *map(str, sizes), "--out", str(js)], cwd=INCUMBENTS, check=True, stdout=subprocess.DEVNULL,
                   timeout=900)
    d = json.loads(js.read_text())
    return {"startup": d["startup"], "results": [{"bytes": r["bytes"], "avg_us": r["avg_us"]} for r in d["results"]]}


def med(runs: list[dict], n: int) -> float:
    return statistics.median(next(r["avg_us"] for r in run["results"] if r["bytes"] == n) for run in runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--sizes", default="8,1K,64K,1M,16M,64M")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--startup-world", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "target" / "bench-python"))
    ap.add_argument("--skip", default="", help="comma list of: gloo,torchdist,startup")
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    if a.worker:
        worker(a.worker, sizes)
        return
    venv = Path(os.environ.get("DTCOMM_VENV", ROOT / ".venv"))
    if Path(sys.prefix).resolve() != venv.resolve() and (venv / "bin" / "python").exists():
        # everything (workers, gloo) runs under the project's venv python: torch and dtcomm are there
        os.execv(str(venv / "bin" / "python"), [str(venv / "bin" / "python"), __file__, *sys.argv[1:]])
    skip = set(filter(None, a.skip.split(",")))
    outdir = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {k: [] for k in ("rust", "numpy", "torch", "torchdist", "gloo")}
    startup: dict[str, list[dict]] = {k: [] for k in ("numpy", "torchdist", "gloo")}
    load0 = open("/proc/loadavg").read().split()[:3]
    for rnd in range(a.rounds):
        tag = f"w{a.world}_r{rnd}"
        print(f"[bench] round {rnd + 1}/{a.rounds}", file=sys.stderr, flush=True)
        runs["rust"].append(rust(a.world, sizes, outdir, tag))
        runs["numpy"].append(spawn_group("numpy", a.world, sizes))
        runs["torch"].append(spawn_group("torch", a.world, sizes))
        if "torchdist" not in skip:
            runs["torchdist"].append(spawn_group("torchdist", a.world, sizes))
        if "gloo" not in skip:
            runs["gloo"].append(gloo(a.world, sizes, outdir, tag))
        if "startup" not in skip:
            w = a.startup_world
            startup["numpy"].append(spawn_group("numpy", w, [8])["startup"])
            startup["torchdist"].append(spawn_group("torchdist", w, [8])["startup"])
            if "gloo" not in skip:
                startup["gloo"].append(gloo(w, [8], outdir, f"startup_r{rnd}")["startup"])
    (outdir / "python_allreduce.json").write_text(json.dumps({"runs": runs, "startup": startup}, indent=1))
    load1 = open("/proc/loadavg").read().split()[:3]

    cols = [k for k in ("rust", "numpy", "torch", "torchdist", "gloo") if runs[k]]
    names = {"rust": "Rust all_reduce_perf", "numpy": "dtcomm numpy", "torch": "dtcomm torch.Tensor",
             "torchdist": "torch.distributed dtcomm", "gloo": "torch.distributed gloo"}
    print(f"# allreduce float32 sum in place, world {a.world}, loopback, median of {a.rounds} rounds "
          f"(loadavg {' '.join(load0)} -> {' '.join(load1)}); time per call in us")
    print("| size | " + " | ".join(names[c] for c in cols) + " | numpy vs Rust | torch vs Rust | gloo / numpy |")
    print("|" + " --- |" * (len(cols) + 4))
    for n in sizes:
        m = {c: med(runs[c], n) for c in cols}
        row = [fmt(n)] + [f"{m[c]:.1f}" for c in cols]
        row.append(f"{(m['numpy'] / m['rust'] - 1) * 100:+.0f}%")
        row.append(f"{(m['torch'] / m['rust'] - 1) * 100:+.0f}%")
        row.append(f"{m['gloo'] / m['numpy']:.2f}x" if "gloo" in m else "-")
        print("| " + " | ".join(row) + " |")
    if any(startup.values()):
        print(f"\n# start-up at world {a.startup_world}: launch -> first barrier done (max over ranks), "
              "median of rounds, seconds")
        print("| | launch to barrier | of which imports | launch to Python |")
        print("| --- | --- | --- | --- |")
        lab = {"numpy": "dtcomm.init() (import dtcomm, numpy)",
               "torchdist": "init_process_group('dtcomm') (import torch)",
               "gloo": "init_process_group('gloo') (import torch)"}
        for k, v in startup.items():
            if v:
                f = lambda key: statistics.median(s[key] for s in v)  # noqa: E731
                print(f"| {lab[k]} | {f('launch_to_barrier_s'):.3f} | {f('import_s'):.3f} | "
                      f"{f('launch_to_python_s'):.3f} |")


if __name__ == "__main__":
    main()
