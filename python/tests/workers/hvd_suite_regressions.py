"""What Horovod's own test suite (test/parallel/test_torch.py) found, kept as dtcomm's own
checks: run by python/tests/test_horovod_suite_regressions.py in 2 and 3 processes, each rank
with DTCOMM_RANK / DTCOMM_WORLD_SIZE and HOROVOD_DYNAMIC_PROCESS_SETS=1. Like Horovod's
suite, every part calls ``hvd.init()`` again without a shutdown in between."""

from __future__ import annotations

import os
import tempfile

import torch

import dtcomm.horovod.torch as hvd


def int_dtypes() -> None:
    """int16 (and the other integers) through allgather, broadcast, alltoall and allreduce."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    for dt in (torch.int16, torch.int8, torch.uint8, torch.int32, torch.int64):
        x = torch.full((2, 3), r + 1, dtype=dt)
        g = hvd.allgather(x, name=f"ag.{dt}")
        assert g.dtype == dt and g.shape == (2 * n, 3), (dt, g)
        assert g[::2, 0].tolist() == list(range(1, n + 1)), (dt, g)
        b = hvd.broadcast(x, root_rank=n - 1, name=f"bc.{dt}")
        assert b.dtype == dt and b.eq(n).all(), (dt, b)
        a = hvd.alltoall(torch.arange(n, dtype=dt) + 10 * r, name=f"a2a.{dt}")
        assert a.tolist() == [10 * k + r for k in range(n)], (dt, a)
    s = hvd.allreduce(torch.full((4,), 30000 if r == 0 else 1, dtype=torch.int16), op=hvd.Sum)
    assert s.dtype == torch.int16 and s[0].item() == ((30000 + n - 1 + 32768) % 65536) - 32768


def barrier_among_async_ops() -> None:
    """A barrier while a broadcast, two allgathers and an allreduce are in flight."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    hb = hvd.broadcast_async(torch.full((3,), float(r)), root_rank=0, name="mix.b")
    hg1 = hvd.allgather_async(torch.full((1, 2), float(r)), name="mix.g1")
    hg2 = hvd.allgather_async(torch.full((2, 2), float(r)), name="mix.g2")
    ha = hvd.allreduce_async(torch.ones(5), op=hvd.Sum, name="mix.a")
    hvd.barrier()
    assert hvd.synchronize(ha).tolist() == [float(n)] * 5
    assert hvd.synchronize(hb).tolist() == [0.0] * 3
    assert hvd.synchronize(hg1).shape == (n, 2) and hvd.synchronize(hg2).shape == (2 * n, 2)


def one_rank_sets_come_and_go() -> None:
    """Each rank alone in a dynamically added set, used and removed, twice, after other ops."""
    for round_ in range(2):
        hvd.init()
        r, n = hvd.rank(), hvd.size()
        hvd.allreduce(torch.ones(2), name=f"before.{round_}")
        sets = [hvd.add_process_set([k]) for k in range(n)]
        mine = sets[r]
        assert mine.included() and mine.size() == 1 and mine.rank() == 0
        got = hvd.broadcast_object({"rank": r, "round": round_}, root_rank=r, process_set=mine)
        assert got == {"rank": r, "round": round_}, got
        for s in sets:
            hvd.remove_process_set(s)
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name=f"after.{round_}").item() == n


def optimizer_outside_its_set() -> None:
    """A DistributedOptimizer on a set this rank is not in steps on local gradients; its
    parameter-name table is Horovod's; a new optimizer's state is made before broadcasting."""
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    evens = hvd.add_process_set([k for k in range(n) if k % 2 == 0])
    torch.manual_seed(r)
    model = torch.nn.Linear(4, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), process_set=evens)
    assert set(opt._parameter_names.values()) == {"weight", "bias"}
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    names = hvd.allgather_object(set(opt._parameter_names.values()))
    assert names == [{"weight", "bias"}] * n, names
    hvd.remove_process_set(evens)

    fresh = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_optimizer_state(fresh, root_rank=0)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    assert len(fresh.state_dict()["state"]) == 2


def timeline_dynamic_writes_no_file() -> None:
    """HOROVOD_TIMELINE=DYNAMIC means 'start later', not a file named DYNAMIC."""
    here = os.getcwd()
    os.chdir(tempfile.mkdtemp(prefix=f"hvd-tl-{hvd.rank()}-"))
    os.environ["HOROVOD_TIMELINE"] = "DYNAMIC"
    try:
        hvd.init()
        hvd.allreduce(torch.ones(1), name="tl")
        assert not os.path.exists("DYNAMIC"), "a timeline file named DYNAMIC was written"
    finally:
        del os.environ["HOROVOD_TIMELINE"]
        os.chdir(here)


def main() -> None:
    int_dtypes()
    barrier_among_async_ops()
    one_rank_sets_come_and_go()
    optimizer_outside_its_set()
    timeline_dynamic_writes_no_file()
    hvd.barrier()
    print("ok", hvd.rank(), flush=True)


if __name__ == "__main__":
    main()
