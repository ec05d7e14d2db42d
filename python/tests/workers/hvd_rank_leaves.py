"""A rank leaves a Horovod negotiation while the others wait: run by
python/tests/test_horovod_suite_regressions.py with HVD_CASE and DTCOMM_TIMEOUT (the stall
deadline) set; the last rank is the one that leaves.

- ``stall``: it raises in the middle of a step, catches it and goes on to another tensor: the
  others' wait fails at the stall deadline naming it and the tensor, and its own fails naming
  theirs; the job goes on.
- ``shutdown``: it calls ``hvd.shutdown()``: the others' pending operation fails at once (not
  at the deadline) naming it, later submissions too; ``is_initialized()`` turns False there
  and ``hvd.init()`` on every rank starts over.
- ``crash``: it raises and the process exits: the others' pending operation fails at once
  naming it (its exit shuts its negotiation down first, as Horovod's does).
"""

from __future__ import annotations

import os
import time

import torch

import dtcomm.horovod.torch as hvd

CASE = os.environ["HVD_CASE"]
DEADLINE = float(os.environ["DTCOMM_TIMEOUT"])


def report(what: str, t0: float, e: BaseException) -> None:
    print(f"{what} after {time.monotonic() - t0:.1f}s: {type(e).__name__}: {e}", flush=True)


def main() -> None:
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    leaver = n - 1
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="warm").item() == n
    t0 = time.monotonic()
    if r == leaver:
        if CASE == "shutdown":
            hvd.shutdown()
        elif CASE == "crash":
            raise RuntimeError("user code failed mid-step")
        else:
            try:
                raise RuntimeError("user code failed mid-step")
            except RuntimeError:
                pass
            try:
                hvd.allreduce(torch.ones(3), name="grad.other")
                raise SystemExit("grad.other completed")
            except hvd.HorovodInternalError as e:
                report("LEAVER", t0, e)
                assert "grad.other" in str(e) and f"{list(range(leaver))}" in str(e), e
    else:
        try:
            hvd.allreduce(torch.ones(3), name="grad.w")
            raise SystemExit("grad.w completed without the leaving rank")
        except hvd.HorovodInternalError as e:
            took = time.monotonic() - t0
            report("WAITER", t0, e)
            assert "grad.w" in str(e) and f"{leaver}" in str(e), e
            if CASE == "stall":
                assert took >= 0.8 * DEADLINE, took
            else:
                assert took < DEADLINE / 3, f"{took:.1f}s: not at once"
                assert f"shut down by rank {leaver}" in str(e), e
        if CASE != "stall":
            try:
                hvd.allreduce(torch.ones(1), name="later")
                raise SystemExit("a submission after the shutdown was taken")
            except hvd.HorovodInternalError as e:
                assert f"rank {leaver}" in str(e), e
        if CASE == "crash":
            print("ok", r, flush=True)
            os._exit(0)  # the world has lost a rank for good: nothing collective is left
    if CASE == "shutdown":
        # Ended by another rank: not initialised any more, and init() starts over (as Horovod's
        # own tests rely on: their tearDown skips barrier and shutdown when not initialised).
        assert not hvd.is_initialized()
    hvd.init()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="again").item() == n
    print("ok", r, flush=True)


if __name__ == "__main__":
    main()
