"""PyTorch Lightning DDP on CPU at world 2 with the process group backend named on the
command line (``dtcomm`` or ``gloo`` for the reference): ``python fw_lightning.py BACKEND OUT``.

Started as one process, as a user starts it: ``Trainer(devices=2)`` re-executes this file for
rank 1 (Lightning's subprocess launcher), so this must be a real file, not ``python -c``.
Each rank saves what the test checks to ``OUT/rank{r}.pt``: the backend torch reports inside
``training_step``, the number of collectives the dtcomm backend ran, the losses, and the final
parameters. ``import dtcomm`` is not needed: torch loads the backend by its entry point."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch import LightningModule, Trainer, seed_everything
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

BACKEND, OUT = sys.argv[1], Path(sys.argv[2])
EPOCHS = 3


def dataset() -> TensorDataset:
    """64 samples of a noisy linear target; Lightning's DistributedSampler gives each rank 32."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 8, generator=g)
    y = x @ torch.linspace(-1.0, 1.0, 8).unsqueeze(1) + 0.01 * torch.randn(64, 1, generator=g)
    return TensorDataset(x, y)


class Tiny(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.seen_backends: set[str] = set()
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.seen_backends.add(dist.get_backend())
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def collectives() -> int:
    """How many operations dtcomm's torch backend ran in this process (0 under gloo)."""
    if "dtcomm.torch_backend" not in sys.modules:
        return 0
    from dtcomm.torch_backend import _LIVE

    return sum(b._get_sequence_number_for_group() for b in _LIVE)


def main() -> None:
    seed_everything(0, workers=True)
    model = Tiny()
    data = DataLoader(dataset(), batch_size=8, shuffle=False)
    trainer = Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(process_group_backend=BACKEND, timeout=timedelta(seconds=60)),
        max_epochs=EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, data)
    rank = trainer.global_rank
    result: dict[str, Any] = {
        "rank": rank,
        "world": trainer.world_size,
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        "backend": ",".join(sorted(model.seen_backends)),  # "dtcomm,gloo" if it changed
        "collectives": collectives(),
        "losses": model.losses,
        "params": {k: v.detach().clone() for k, v in model.state_dict().items()},
    }
    torch.save(result, OUT / f"rank{rank}.pt")
    print(f"fw_lightning done {BACKEND} rank {rank}", flush=True)


if __name__ == "__main__":
    main()
