"""What a front end costs over the Rust engine: allreduce of 8 B and 64 MiB at world 2 from Rust
(``all_reduce_perf``), from Python (``dtcomm.all_reduce`` on numpy) and from C (the C ABI,
``ffi/examples/allreduce.c --bench``), interleaved in rounds, in one run.

    scripts/setup.sh && cargo build --release -p dt-bench -p dtcomm-ffi
    .venv/bin/python benches/python/call_overhead.py --rounds 5 [--iters 20000]
        [--baseline-bench OLD/all_reduce_perf --baseline-python OLD_VENV/bin/python]

Every measurement is float32 sum in place over loopback TCP; time per call = max over the two
ranks of (timed loop / iterations), after a tenth of the iterations as warm-up and a barrier.
With ``--baseline-*`` an older build (its ``all_reduce_perf`` and a Python whose ``import
dtcomm`` is that build) runs in the same rounds, so the two builds are compared under the same
load. Prints medians over rounds with their range and writes the raw figures as JSON.
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
SIZES = (8, 64 << 20)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env_for(rank: int, port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        DTCOMM_SOCKET_IFNAME="lo",
        DTCOMM_QUIET="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def worker(iters: list[int]) -> None:
    """One rank of the Python measurement (env:// through RANK/MASTER_ADDR; rank 0 hosts)."""
    import numpy as np

    import dtcomm

    dtcomm.init(verbose=False)
    out = {}
    for size, n in zip(SIZES, iters):
        buf = np.zeros(size // 4, dtype=np.float32)
        for _ in range(n // 10 + 1):
            dtcomm.all_reduce(buf)
        dtcomm.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            dtcomm.all_reduce(buf)
        out[str(size)] = (time.perf_counter() - t0) / n * 1e6
    dtcomm.shutdown()
    print(json.dumps(out), flush=True)


def two_ranks(cmd: list[str], timeout: float) -> list[str]:
    port = free_port()
    procs = [
        subprocess.Popen(cmd, env=env_for(r, port), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(2)
    ]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        if p.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed ({p.returncode}):\n{out}\n{err}")
        outs.append(out)
    return outs


def python_run(py: str, iters: list[int]) -> dict[int, float]:
    outs = two_ranks([py, __file__, "--worker", "--iters", *map(str, iters)], 600)
    per = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    return {s: max(p[str(s)] for p in per) for s in SIZES}


def c_run(exe: Path, iters: list[int]) -> dict[int, float]:
    outs = two_ranks([str(exe), "--bench", *map(str, iters)], 600)
    got: dict[int, float] = {}
    for o in outs:
        for line in o.splitlines():
            if line.startswith("BENCH"):
                f = line.split()
                size, us = int(f[4]), float(f[8])
                got[size] = max(got.get(size, 0.0), us)
    return got


def rust_run(bench: Path, iters: list[int], outdir: Path, tag: str) -> dict[int, float]:
    got = {}
    for size, n in zip(SIZES, iters):
        js = outdir / f"rust_{tag}_{size}.json"
        subprocess.run(
            [str(bench), "--world", "2", "--sizes", str(size), "-n", str(n), "-w", str(n // 10 + 1),
             "-c", "0", "-d", "float", "-o", "sum", "--json", str(js)],
            env={**os.environ, "DTCOMM_SOCKET_IFNAME": "lo"}, check=True, stdout=subprocess.DEVNULL,
            timeout=600,
        )
        got[size] = json.loads(js.read_text())["results"][0]["in_place"]["time"]
    return got


def compile_c(target: Path, outdir: Path) -> Path:
    exe = outdir / "allreduce_c"
    lib = target / "release"
    subprocess.run(
        [os.environ.get("CC", "cc"), "-O2", "-D_GNU_SOURCE", "-I", str(ROOT / "ffi" / "include"),
         str(ROOT / "ffi" / "examples" / "allreduce.c"), "-L", str(lib), f"-Wl,-rpath,{lib}",
         "-ldtcomm_ffi", "-o", str(exe)],
        check=True,
    )
    return exe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, nargs="+", default=[20000, 10],
                    help="timed iterations at 8 B and at 64 MiB")
    ap.add_argument("--baseline-bench", type=Path, help="an older build's all_reduce_perf")
    ap.add_argument("--baseline-python", help="a python whose dtcomm is an older build")
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "bench-overhead")
    a = ap.parse_args()
    iters = (a.iters + [10])[:2]
    if a.worker:
        worker(iters)
        return
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    a.out.mkdir(parents=True, exist_ok=True)
    c_exe = compile_c(target, a.out)
    runs: dict[str, list[dict[int, float]]] = {}
    configs: list[tuple[str, object]] = [
        ("rust", lambda r: rust_run(target / "release" / "all_reduce_perf", iters, a.out, f"new{r}")),
        ("python", lambda r: python_run(sys.executable, iters)),
        ("c", lambda r: c_run(c_exe, iters)),
    ]
    if a.baseline_bench:
        configs.append(("rust (baseline)", lambda r: rust_run(a.baseline_bench, iters, a.out, f"old{r}")))
    if a.baseline_python:
        configs.append(("python (baseline)", lambda r: python_run(a.baseline_python, iters)))
    loads = []
    for r in range(a.rounds):
        for name, fn in configs:
            loads.append(os.getloadavg()[0])
            runs.setdefault(name, []).append(fn(r))  # type: ignore[operator]
    (a.out / "call_overhead.json").write_text(json.dumps({"runs": runs, "load1": loads}, indent=1))
    print(f"world 2, float32 sum in place, medians of {a.rounds} interleaved rounds [min-max], "
          f"µs per call; 1-min load {min(loads):.1f}-{max(loads):.1f}")
    print(f"| front end | 8 B | 64 MiB | 8 B vs Rust | 64 MiB vs Rust |")
    print("| --- | --- | --- | --- | --- |")
    med = {n: {s: statistics.median(x[s] for x in rs) for s in SIZES} for n, rs in runs.items()}
    for name, rs in runs.items():
        cells = []
        for s in SIZES:
            xs = [x[s] for x in rs]
            cells.append(f"{med[name][s]:.2f} [{min(xs):.2f}-{max(xs):.2f}]")
        d8 = med[name][8] - med["rust"][8]
        d64 = (med[name][64 << 20] / med["rust"][64 << 20] - 1) * 100
        print(f"| {name} | {cells[0]} | {cells[1]} | {d8:+.2f} µs | {d64:+.1f} % |")


if __name__ == "__main__":
    main()
