"""One rank of scripts/test_wheel.sh's jobs, run from the installed wheel (not the checkout).

``worker.py dtcomm``: dtcomm.init() + all_reduce on numpy (under dtrun, native rendezvous);
``worker.py torch``: init_process_group("dtcomm") + all_reduce (under torchrun
--rdzv-backend=dtcomm); ``worker.py horovod``: dtcomm.horovod.torch's allreduce (under
dtrun --horovod). Rank 0 prints ``FIRST_ALLREDUCE_AT <epoch seconds>`` once the first
all_reduce has returned the right sum, then ``OK <mode> world <n>``.
"""

from __future__ import annotations

import sys
import time


def main(mode: str) -> None:
    import dtcomm

    assert "site-packages" in dtcomm.__file__, f"dtcomm imported from {dtcomm.__file__}"
    if mode == "dtcomm":
        import numpy as np

        dtcomm.init()
        rank, world = dtcomm.rank(), dtcomm.size()
        x = np.full(1024, rank + 1, np.float32)
        dtcomm.all_reduce(x)
        done = time.time()
        dtcomm.shutdown()
    elif mode == "torch":
        import torch
        import torch.distributed as dist

        dist.init_process_group("dtcomm")
        rank, world = dist.get_rank(), dist.get_world_size()
        t = torch.full((1024,), float(rank + 1))
        dist.all_reduce(t)
        done = time.time()
        x = t.numpy()
        dist.destroy_process_group()
    elif mode == "horovod":
        import torch

        import dtcomm.horovod.torch as hvd

        hvd.init()
        rank, world = hvd.rank(), hvd.size()
        t = hvd.allreduce(torch.full((1024,), float(rank + 1)), op=hvd.Sum, name="wheel")
        done = time.time()
        x = t.numpy()
        hvd.shutdown()
    else:
        raise SystemExit(f"worker.py: unknown mode {mode!r}")
    want = world * (world + 1) / 2
    assert world == 2 and float(x.min()) == float(x.max()) == want, (world, x[:4], want)
    if rank == 0:
        print(f"FIRST_ALLREDUCE_AT {done:.3f}", flush=True)
        print(f"OK {mode} world {world}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
