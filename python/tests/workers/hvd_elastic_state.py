"""Run by python/tests/test_horovod_elastic_state.py at world 2 (``dtgroup.run_group``, the
TCP store, no member lost): ``hvd.elastic.ElasticSampler`` (partition, padding, processed
samples after a reset, ``set_epoch``) and ``hvd.elastic.TorchState`` (sync from rank 0,
commit and restore, a newly assigned model, reset callbacks), and ``hvd.elastic.run`` refusing
to run without the native rendezvous. Prints ``ok <rank>`` when every assert passed."""

from __future__ import annotations

import math
import random

import torch

import dtcomm.horovod.torch as hvd
from dtcomm import _dtcomm

hvd.init()
r, n = hvd.rank(), hvd.size()
E = hvd.elastic


def order(size: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    o = list(range(size))
    if shuffle:
        random.Random(seed + epoch).shuffle(o)
    return o


# --- ElasticSampler
data = list(range(10))
s = E.ElasticSampler(data, shuffle=True, seed=5)
o = order(10, 5, 0)
assert len(s) == 5 and list(s) == o[r::n], (list(s), o)
everyone = hvd.allgather_object(list(s))
assert sorted(i for part in everyone for i in part) == list(range(10))

s.record_batch(0, 2)                 # one batch of 2 on each of the 2 ranks: 4 samples
assert s.processed_num == 4
s.reset()
assert list(s) == o[4:][r::n] and len(s) == 3

s.record_indices([o[4], o[5]])       # older Horovod's form: these exact indices
s.load_state_dict(s.state_dict())   # a restore/sync repartitions
rest = o[6:]
assert list(s) == rest[r::n], (list(s), rest)

s.set_epoch(1)
o1 = order(10, 5, 1)
assert s.processed_num == 0 and not s.processed_indices and list(s) == o1[r::n]
assert o1 != o

# Padding: 5 samples over 2 ranks -> 6, the first one repeated.
p = E.ElasticSampler(list(range(5)), shuffle=False)
assert list(p) == [0, 2, 4] if r == 0 else list(p) == [1, 3, 0], list(p)

# --- TorchState
torch.manual_seed(r)                 # every rank starts different
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.ones(1, 3)).sum().backward(); opt.step(); opt.zero_grad()
sampler = E.ElasticSampler(data, seed=1)
sampler.record_batch(0, 1 + r)
state = E.TorchState(model=model, optimizer=opt, sampler=sampler, epoch=10 * r,
                     history=[r], batch=r)
calls = []
state.register_reset_callbacks([lambda: calls.append(hvd.size())])

state.sync()
w = hvd.allgather_object([model.weight.detach(), model.bias.detach()])
assert all(torch.equal(x[0], w[0][0]) and torch.equal(x[1], w[0][1]) for x in w)
mom = hvd.allgather_object(opt.state_dict()["state"][0]["momentum_buffer"])
assert all(torch.equal(m, mom[0]) for m in mom)
assert state.epoch == 0 and state.history == [0] and state.batch == 0
assert sampler.processed_num == 1 * n, sampler.processed_num   # rank 0's record_batch(0, 1)

# commit, then change everything, then restore: back to the commit.
state.epoch = 3
state.history.append(7)
state.commit()                      # no round change: no interrupt
w0 = model.weight.detach().clone()
m0 = opt.state_dict()["state"][0]["momentum_buffer"].clone()
model(torch.ones(1, 3)).sum().backward(); opt.step(); opt.zero_grad()
assert not torch.equal(model.weight, w0)
state.epoch = 4
state.history.append(8)
sampler.record_batch(1, 1)
state.restore()
assert torch.equal(model.weight.detach(), w0)
assert torch.equal(opt.state_dict()["state"][0]["momentum_buffer"], m0)
assert state.epoch == 3 and state.history == [0, 7], (state.epoch, state.history)
assert sampler.processed_num == n and len(sampler) == math.ceil((10 - n) / n)

# A new model assigned to the state is tracked (saved at once).
other = torch.nn.Linear(3, 2)
state.model = other
v0 = other.weight.detach().clone()
with torch.no_grad():
    other.weight.add_(1.0)
state.restore()
assert torch.equal(other.weight.detach(), v0)

state.on_reset()
assert calls == [n]

# run needs the native rendezvous (this group used the TCP store).
try:
    E.run(lambda st: None)(state)
    raise SystemExit("run without the native rendezvous")
except _dtcomm.SetupError as e:
    assert "native rendezvous" in str(e), e

hvd.shutdown()
print("ok", r, flush=True)
