"""Ray Train's TorchTrainer on CPU with 2 workers and ``TorchConfig(backend=BACKEND)``, one
training run per backend named (``dtcomm``; ``gloo`` for the reference) in one local Ray
instance, which is most of the time: ``python fw_ray.py OUT BACKEND [BACKEND ...]``.

The driver starts Ray on loopback (2 CPUs, no dashboard); Ray Train starts the two workers as
actors and calls ``init_process_group(BACKEND, "env://", ...)`` in each (its rank 0 hosts the
TCPStore). Each worker saves what the test checks to ``OUT/BACKEND/rank{r}.pt``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

OUT, BACKENDS = Path(sys.argv[1]), sys.argv[2:]
PASS_ENV = ("OMP_NUM_THREADS", "DTCOMM_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")  # to the workers


def train_loop(config: dict[str, Any]) -> None:
    """Runs in each Ray Train worker: DDP through ``prepare_model``, data sharded by
    ``prepare_data_loader``."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    g = torch.Generator().manual_seed(2468)
    x = torch.randn(64, 8, generator=g)
    y = x @ torch.linspace(-0.5, 1.5, 8).unsqueeze(1) + 0.01 * torch.randn(64, 1, generator=g)
    data = ray.train.torch.prepare_data_loader(
        DataLoader(TensorDataset(x, y), batch_size=8, shuffle=False)
    )
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(
        nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses: list[float] = []
    for _epoch in range(3):
        for xb, yb in data:
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    count = 0
    if "dtcomm.torch_backend" in sys.modules:
        from dtcomm.torch_backend import _LIVE

        count = sum(b._get_sequence_number_for_group() for b in _LIVE)
    inner = model.module if hasattr(model, "module") else model
    result = {
        "rank": rank,
        "world": ctx.get_world_size(),
        "backend": dist.get_backend(),
        "collectives": count,
        "losses": losses,
        "params": {k: v.detach().clone() for k, v in inner.state_dict().items()},
    }
    torch.save(result, Path(config["out"]) / f"rank{rank}.pt")
    print(f"fw_ray done {config['backend']} rank {rank}", flush=True)
    ray.train.report({"loss": losses[-1]})


def main() -> None:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    # Ray waits a fixed 30 s for its raylet to register with its GCS; on a loaded 2-core VM that
    # start-up alone can take longer ("The current node timed out during startup"), which says
    # nothing of dtcomm: start Ray once more then.
    for attempt in range(3):
        try:
            ray.init(
                num_cpus=2,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                runtime_env={"env_vars": {k: os.environ[k] for k in PASS_ENV if k in os.environ}},
            )
            break
        except Exception as e:  # Ray raises a bare Exception for this
            if "timed out during startup" not in str(e) or attempt == 2:
                raise
            print(f"fw_ray: Ray's start-up timed out ({e}); starting it again", flush=True)
            ray.shutdown()
    for backend in BACKENDS:
        (OUT / backend).mkdir(parents=True, exist_ok=True)
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={"backend": backend, "out": str(OUT / backend)},
            torch_config=TorchConfig(backend=backend, timeout_s=60),
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            run_config=RunConfig(name=f"fw-ray-{backend}", storage_path=str(OUT / "ray_results")),
        )
        trainer.fit()
        print(f"fw_ray finished {backend}", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
