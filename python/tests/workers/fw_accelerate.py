"""Hugging Face Accelerate on CPU with a launcher's environment (torchrun, dtrun):
``python -m torch.distributed.run --standalone --nproc-per-node 2 fw_accelerate.py MODE OUT``.

MODE
  dtcomm         the way that works on CPU: ``init_process_group("dtcomm")`` first, then
                 ``Accelerator(cpu=True)``, which uses the group it finds.
  gloo           the reference: ``Accelerator(cpu=True)`` alone (Accelerate starts gloo).
  dtcomm-kwargs  ``Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="dtcomm")],
                 cpu=True)``; Accelerate 1.15 rejects any backend but gloo (or mpi) on CPU
                 with a ValueError, which is saved instead of a training result.

Each rank saves what the test checks to ``OUT/rank{r}.pt``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs, set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

MODE, OUT = sys.argv[1], Path(sys.argv[2])


def dataset() -> TensorDataset:
    """64 samples of a noisy linear target; the prepared DataLoader gives each rank 32."""
    g = torch.Generator().manual_seed(4321)
    x = torch.randn(64, 8, generator=g)
    y = x @ torch.linspace(1.0, -1.0, 8).unsqueeze(1) + 0.01 * torch.randn(64, 1, generator=g)
    return TensorDataset(x, y)


def collectives() -> int:
    """How many operations dtcomm's torch backend ran in this process (0 under gloo)."""
    if "dtcomm.torch_backend" not in sys.modules:
        return 0
    from dtcomm.torch_backend import _LIVE

    return sum(b._get_sequence_number_for_group() for b in _LIVE)


def make_accelerator() -> Accelerator | str:
    """The Accelerator for MODE, or the error Accelerate raised for it."""
    if MODE == "dtcomm":
        dist.init_process_group("dtcomm")  # env:// from the launcher; Accelerate keeps it
        return Accelerator(cpu=True)
    if MODE == "gloo":
        return Accelerator(cpu=True)
    if MODE == "dtcomm-kwargs":
        try:
            return Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="dtcomm")], cpu=True)
        except ValueError as e:
            return f"ValueError: {e}"
    raise SystemExit(f"unknown mode {MODE}")


def main() -> None:
    acc = make_accelerator()
    if isinstance(acc, str):
        torch.save({"rejected": acc}, OUT / f"rank{os.environ['RANK']}.pt")
        print(f"fw_accelerate rejected {MODE} rank {os.environ['RANK']}: {acc}", flush=True)
        return
    set_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = DataLoader(dataset(), batch_size=8, shuffle=False)
    model, opt, data = acc.prepare(model, opt, data)
    losses: list[float] = []
    both: list[torch.Tensor] = []
    for _epoch in range(3):
        for x, y in data:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            acc.backward(loss)
            opt.step()
            losses.append(float(loss.detach()))
            both.append(acc.gather(loss.detach().reshape(1)))  # an all_gather through the group
    result: dict[str, Any] = {
        "rank": acc.process_index,
        "world": acc.num_processes,
        "backend": dist.get_backend(),
        "accelerate_label": acc.state.backend,
        "distributed_type": str(acc.distributed_type),
        "collectives": collectives(),
        "losses": losses,
        "gathered": torch.cat(both),
        "params": {k: v.detach().clone() for k, v in acc.unwrap_model(model).state_dict().items()},
    }
    torch.save(result, OUT / f"rank{acc.process_index}.pt")
    print(f"fw_accelerate done {MODE} rank {acc.process_index}", flush=True)
    acc.end_training()


if __name__ == "__main__":
    main()
