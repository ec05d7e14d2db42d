"""``dtrun [options] script.py args...`` (or ``-m module``): the command line."""

from __future__ import annotations

import argparse
import os
import sys
import uuid

from . import rendezvous, workers


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dtrun",
        description=(
            "Start a distributed job's workers on this node with torchrun's environment "
            "(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...). "
            "One node: an embedded dt-rdzv. Several: join a running `dt-rdzv serve`."
        ),
    )
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int,
                   default=int(os.environ.get("DTRUN_NPROC_PER_NODE", "1")),
                   help="workers on this node (default 1; env DTRUN_NPROC_PER_NODE)")
    p.add_argument("--nnodes", type=int, default=int(os.environ.get("DTRUN_NNODES", "1")),
                   help="nodes in the job (default 1; env DTRUN_NNODES)")
    p.add_argument("--rdzv-endpoint", "--rdzv_endpoint",
                   default=os.environ.get("DTRUN_RDZV_ENDPOINT"),
                   help="host:port of a running dt-rdzv serve (several nodes); env DTRUN_RDZV_ENDPOINT")
    p.add_argument("--rdzv-id", "--rdzv_id", default=os.environ.get("DTRUN_RDZV_ID"),
                   help="run id shared by the nodes of one job (default: 'dtrun' with several "
                        "nodes, random with one)")
    p.add_argument("--rdzv-host", action="store_true",
                   help="host the dt-rdzv server at --rdzv-endpoint's port on this node")
    p.add_argument("--node-rank", "--node_rank", type=int, default=None,
                   help="this node's rank (default: order of arrival)")
    p.add_argument("--rdzv-timeout", type=float, default=600.0,
                   help="seconds to wait for the other nodes (default 600)")
    p.add_argument("-m", "--module", action="store_true",
                   help="run the target as a module, like python -m")
    p.add_argument("--no-python", action="store_true",
                   help="run the target as an executable, not with this Python")
    p.add_argument("target", help="the training script (or module, or executable)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.nproc_per_node < 1 or a.nnodes < 1:
        raise SystemExit("dtrun: --nproc-per-node and --nnodes must be at least 1")
    if a.node_rank is not None and not 0 <= a.node_rank < a.nnodes:
        raise SystemExit(f"dtrun: --node-rank {a.node_rank} is not in 0..{a.nnodes - 1}")
    run_id = a.rdzv_id or ("dtrun" if a.nnodes > 1 else uuid.uuid4().hex[:12])
    if a.no_python:
        cmd = [a.target, *a.args]
    elif a.module:
        cmd = [sys.executable, "-u", "-m", a.target, *a.args]
    else:
        cmd = [sys.executable, "-u", a.target, *a.args]
    rdzv = rendezvous.setup(a.nnodes, a.rdzv_endpoint, run_id, a.node_rank, a.rdzv_host, a.rdzv_timeout)
    try:
        return workers.run(workers.Spec(cmd, a.nproc_per_node, a.nnodes, run_id), rdzv)
    finally:
        rdzv.close()


if __name__ == "__main__":
    sys.exit(main())
