"""Run by python/tests/test_numpy_collectives.py at world 3 (``dtgroup.run_group``): every
collective, dtype and count on numpy arrays against numpy's answer (``numpy_expect``), receive
from any source, and async handles in order with sync calls. Prints ``ok <rank>``."""

from __future__ import annotations

import numpy as np
from numpy_expect import COUNTS, DTYPES, OPS, data, reduced

import dtcomm

dtcomm.init(verbose=False)
r, w = dtcomm.rank(), dtcomm.size()
assert w == 3, w
eq = np.testing.assert_array_equal
for dt in DTYPES:
    for n in COUNTS:
        for op in OPS:
            x = data(r, n, dt, op)
            ptr = x.ctypes.data
            out = dtcomm.all_reduce(x, dtcomm.ReduceOp(op))
            assert out is x and x.ctypes.data == ptr          # in place
            eq(x, reduced(w, n, dt, op, op), err_msg=f"all_reduce {dt} n={n} op={OPS[op]}")
            x = data(r, n, dt, op)
            dtcomm.reduce(x, dtcomm.ReduceOp(op), root=1)
            eq(x, reduced(w, n, dt, op, op) if r == 1 else data(r, n, dt, op), err_msg=f"reduce {dt} {n} {op}")
        # broadcast from each root
        for root in range(w):
            x = data(r, n, dt, 7)
            dtcomm.broadcast(x, root)
            eq(x, data(root, n, dt, 7), err_msg=f"broadcast {dt} {n} root {root}")
        # all_gather
        g = dtcomm.all_gather(data(r, n, dt, 8))
        eq(g, np.stack([data(p, n, dt, 8) for p in range(w)]), err_msg=f"all_gather {dt} {n}")
        # all_gather_v: rank p gives n + p elements
        counts = [n + p for p in range(w)]
        g = dtcomm.all_gather(data(r, n + r, dt, 9), counts=counts)
        eq(g, np.concatenate([data(p, n + p, dt, 9) for p in range(w)]), err_msg="all_gather_v")
        # reduce_scatter over w blocks of n
        x = data(r, n * w, dt, 10)
        got = dtcomm.reduce_scatter(x)
        eq(got, reduced(w, n * w, dt, 1, 10)[r * n:(r + 1) * n], err_msg=f"reduce_scatter {dt} {n}")
        # gather / scatter
        g = dtcomm.gather(data(r, n, dt, 11), root=2)
        if r == 2:
            eq(g, np.stack([data(p, n, dt, 11) for p in range(w)]), err_msg="gather")
        else:
            assert g is None
        src = data(0, n * w, dt, 12) if r == 0 else None
        out = np.zeros(n, dtype=dt)
        dtcomm.scatter(src, out, root=0)
        eq(out, data(0, n * w, dt, 12)[r * n:(r + 1) * n], err_msg="scatter")
        # all_to_all, equal blocks
        x = data(r, n * w, dt, 13)
        got = dtcomm.all_to_all(x)
        eq(got, np.concatenate([data(p, n * w, dt, 13)[r * n:(r + 1) * n] for p in range(w)]), err_msg="all_to_all")
        # all_to_all_v: rank p sends (p + q) elements to rank q
        sc = [r + q for q in range(w)]
        rc = [p + r for p in range(w)]
        x = data(r, sum(sc), dt, 14)
        got = dtcomm.all_to_all(x, send_counts=sc, recv_counts=rc)
        want = []
        for p in range(w):
            xp = data(p, sum(p + q for q in range(w)), dt, 14)
            off = sum(p + q for q in range(r))
            want.append(xp[off:off + p + r])
        eq(got, np.concatenate(want), err_msg="all_to_all_v")
        # send / recv around the ring
        nxt, prv = (r + 1) % w, (r - 1) % w
        if r % 2 == 0:
            dtcomm.send(data(r, n, dt, 15), nxt)
            got = dtcomm.recv(np.empty(n, dt), prv)
        else:
            got = dtcomm.recv(np.empty(n, dt), prv)
            dtcomm.send(data(r, n, dt, 15), nxt)
        eq(got, data(prv, n, dt, 15), err_msg="send/recv")
dtcomm.barrier()

# receive from any source: rank 0 takes every other rank's message, in whatever order, and
# learns each sender
if r == 0:
    senders = []
    for _ in range(w - 1):
        buf = np.empty(4, "int64")
        src = dtcomm.recv_any(buf)
        assert (buf == src).all(), (src, buf)
        senders.append(src)
    assert sorted(senders) == list(range(1, w)), senders
else:
    dtcomm.send(np.full(4, r, "int64"), 0)
dtcomm.barrier()

# async: every collective returns a handle, in order with sync calls
xs = [data(r, 1000, "float32", 20 + i) for i in range(4)]
works = [dtcomm.all_reduce(x, async_op=True) for x in xs]
b = data(r, 10, "int64", 30)
wb = dtcomm.broadcast(b, 1, async_op=True)
s = data(r, 5, "int32", 31)
dtcomm.all_reduce(s)  # sync call after async ones: runs after them
for i, wk in enumerate(works):
    assert wk.wait(timeout=60) is xs[i]
    assert wk.is_completed()
    eq(xs[i], reduced(w, 1000, "float32", 1, 20 + i))
wb.wait()
eq(b, data(1, 10, "int64", 30))
eq(s, reduced(w, 5, "int32", 1, 31))
g = dtcomm.all_gather(data(r, 3, "uint8", 32), async_op=True).wait()
eq(g, np.stack([data(p, 3, "uint8", 32) for p in range(w)]))
dtcomm.barrier(async_op=True).wait()
dtcomm.shutdown()
print("ok", r)
