"""One replica group of a fault-tolerant job: torchft's Manager, DistributedDataParallel and
Optimizer over dtcomm (``ProcessGroupDtcomm``) or gloo, the Lighthouse at
``TORCHFT_LIGHTHOUSE`` (``dt-rdzv serve --torchft-port 29510``, or torchft's own).

A replica group that dies is dropped at the next quorum while the others keep training; a
restarted one heals from a live peer. Start each replica group with its own id, as torchft's
examples do:

    dt-rdzv serve --torchft-port 29510 --torchft-min-replicas 1 &
    export TORCHFT_LIGHTHOUSE=http://127.0.0.1:29510
    REPLICA_GROUP_ID=0 torchrun --nproc-per-node 1 --master-port 29600 examples/torchft_train.py
    REPLICA_GROUP_ID=1 torchrun --nproc-per-node 1 --master-port 29601 examples/torchft_train.py

``--log FILE`` writes one JSON line per step (time, step, committed, participants, pid, the
parameters' sum), which ``benches/python/torchft_recovery.py`` and ``torchft_soak.py`` read.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn, optim
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replica-id", default=os.environ.get("REPLICA_GROUP_ID", "0"))
    ap.add_argument("--min-replicas", type=int, default=1)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--pg", choices=["dtcomm", "gloo"], default="dtcomm")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="the collective timeout (torchft's default 60 s)")
    ap.add_argument("--step-sleep", type=float, default=0.0,
                    help="seconds of 'compute' per step outside the collectives")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--log", default=None)
    ap.add_argument("--fault", default=None, metavar="STEP:KIND:WHERE[:N]",
                    help="for benches/python/torchft_recovery.py: after STEP steps of its own this "
                         "replica "
                         "kills (KIND=kill) or freezes (stop) itself, inside a collective "
                         "(WHERE=inside: after the forward pass, before the gradients' "
                         "allreduce, which the others are then waiting in) or outside one "
                         "(outside: after the commit); with N, only once a step was "
                         "committed by N replica groups (all of them, so that the fault "
                         "hits a quorum that has this replica)")
    a = ap.parse_args()
    fault = a.fault.split(":") if a.fault else None

    timeout = timedelta(seconds=a.timeout)
    if a.pg == "dtcomm":
        from dtcomm.torchft import ProcessGroupDtcomm

        pg: Any = ProcessGroupDtcomm(timeout=timeout)
    else:
        pg = ProcessGroupGloo(timeout=timeout)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(a.width, a.width), nn.ReLU(), nn.Linear(a.width, 10))
    opt = optim.SGD(model.parameters(), lr=0.01)

    def state_dict() -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    def load_state_dict(sd: dict[str, Any]) -> None:
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    # The replica group's own store: torchrun's (MASTER_ADDR/PORT), else one on this host.
    store_addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    store_port = int(os.environ.get("MASTER_PORT", "0"))
    keep: list[Any] = []
    if store_port == 0:
        s = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        keep.append(s)
        store_port = s.port
    manager = Manager(
        pg=pg,
        min_replica_size=a.min_replicas,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"train_{a.pg}_{a.replica_id}",
        store_addr=store_addr,
        store_port=store_port,
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        timeout=timeout,
        quorum_timeout=timeout,
    )
    ddp = DistributedDataParallel(manager, model)
    optimizer = Optimizer(manager, opt)
    loss_fn = nn.CrossEntropyLoss()
    log = open(a.log, "a", buffering=1) if a.log else None
    x = torch.randn(32, a.width)
    y = torch.randint(0, 10, (32,))
    mine = 0
    armed = not fault or len(fault) < 4
    while manager.current_step() < a.steps:
        before = manager.current_step()
        mine += 1
        optimizer.zero_grad()
        loss = loss_fn(ddp(x), y)
        if fault and armed and mine > int(fault[0]) and fault[2] == "inside":
            # In this step's quorum first, so that the others' allreduce waits for this
            # replica (a replica that fails before its quorum request lands is just left out).
            manager.wait_quorum()
            _fault(fault[1], log)
        loss.backward()
        if a.step_sleep:
            time.sleep(a.step_sleep)
        optimizer.step()  # commits only if every replica's allreduce succeeded
        committed = manager.current_step() > before
        if fault and committed and len(fault) > 3 and manager.num_participants() >= int(fault[3]):
            armed = True
        rec = {"t": time.time(), "step": manager.current_step(), "committed": bool(committed),
               "participants": manager.num_participants(), "members": _members(manager),
               "loss": float(loss),
               "pid": os.getpid(),
               # The parameters' sum: replicas at one committed step hold the same model.
               "psum": float(sum(float(p.double().sum()) for p in model.parameters()))}
        if log is not None:
            log.write(json.dumps(rec) + "\n")
        elif manager.current_step() % 50 == 0:
            print(rec, flush=True)
        if fault and armed and mine > int(fault[0]) and fault[2] == "outside":
            _fault(fault[1], log)
    manager.shutdown()


def _members(manager: Any) -> int | None:
    """The quorum's size: every replica group the process group was configured with, healing
    ones included (``num_participants`` leaves those out)."""
    try:
        return int(manager._pg.size())
    except Exception:  # noqa: BLE001 - a group not configured yet has no size
        return None


def _fault(kind: str, log: Any) -> None:
    """Kills (SIGKILL) or freezes (SIGSTOP) this process, first logging when."""
    if log is not None:
        log.write(json.dumps({"t": time.time(), "fault": kind}) + "\n")
        log.flush()
    os.kill(os.getpid(), signal.SIGKILL if kind == "kill" else signal.SIGSTOP)


if __name__ == "__main__":
    main()
