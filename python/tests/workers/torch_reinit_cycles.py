"""Run by python/tests/test_reinit.py: ``cycles`` rounds of ``init_process_group("dtcomm",
init_method=...)``, an all_reduce checked against the world's sum, and
``destroy_process_group()``, as ``mp.spawn`` scripts that re-form their group do (rank 0
hosting torch's store under ``env://``). Prints ``ok <cycles>``."""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

import dtcomm  # noqa: F401 - registers dtcomm://


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cycles", type=int)
    ap.add_argument("--init-method", default="env://")
    a = ap.parse_args()
    for cycle in range(a.cycles):
        # Where each cycle got to, so that a hang shows it (the test prints it at its deadline).
        print(f"cycle {cycle}: init", flush=True)
        dist.init_process_group("dtcomm", init_method=a.init_method)
        world, me = dist.get_world_size(), dist.get_rank()
        t = torch.full((8,), float(me + cycle))
        print(f"cycle {cycle}: rank {me} all_reduce", flush=True)
        dist.all_reduce(t)
        want = world * (world - 1) / 2 + world * cycle
        assert torch.all(t == want), f"cycle {cycle}: rank {me} got {t[0]}, want {want}"
        print(f"cycle {cycle}: rank {me} destroy", flush=True)
        dist.destroy_process_group()
    print(f"ok {a.cycles}", flush=True)


if __name__ == "__main__":
    main()
