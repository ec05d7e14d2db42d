"""Run by python/tests/test_horovod_elastic.py as each member of a native-rendezvous job
(``2:3`` members, ``HOROVOD_ELASTIC=1``) one of which is SIGKILLed mid-training:
``python hvd_elastic_train.py N BATCH EPOCHS SEED``. ``hvd.elastic.run`` trains a small model
for EPOCHS epochs over an ``ElasticSampler`` of N samples (shuffled with SEED), BATCH samples
per rank per step, committing after each step.

Prints ``ROUND <round> rank <r> world <n> epoch <e> processed <samples>`` when a round starts,
``STEP <steps> round <round> world <n> epoch <e> idx <i,j,...>`` per step, ``FAILED <type of
the cause>: <message>`` when a step fails with ``HorovodInternalError`` (then re-raised), and
at the end ``DONE world <n> steps <steps> resets <[world sizes at each reset]> same <whether
every rank holds the same parameters>``."""

from __future__ import annotations

import sys
import time

import torch

import dtcomm.horovod.torch as hvd

N, BATCH, EPOCHS, SEED = (int(a) for a in sys.argv[1:5])

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5),
                               named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(list(range(N)), shuffle=True, seed=SEED)
state = hvd.elastic.TorchState(model=model, optimizer=opt, sampler=sampler, epoch=0, steps=0)
resets: list[int] = []
state.register_reset_callbacks([lambda: resets.append(hvd.size())])


@hvd.elastic.run
def train(state: hvd.elastic.TorchState) -> hvd.elastic.TorchState:
    import dtcomm
    w = dtcomm._api._g("test").member.welcome
    print(f"ROUND {w.round} rank {hvd.rank()} world {hvd.size()} epoch {state.epoch} "
          f"processed {sampler.processed_num}", flush=True)
    while state.epoch < EPOCHS:
        idx = list(sampler)
        for b in range(0, len(idx), BATCH):
            batch = idx[b:b + BATCH]
            x = torch.tensor(batch, dtype=torch.float32).unsqueeze(1).repeat(1, 4) / N
            try:
                opt.zero_grad()
                (model(x) - 1).pow(2).mean().backward()
                opt.step()
                sampler.record_batch(b // BATCH, BATCH)
                state.steps += 1
                print(f"STEP {state.steps} round {w.round} world {hvd.size()} "
                      f"epoch {state.epoch} idx {','.join(map(str, batch))}", flush=True)
                time.sleep(0.05)
                state.commit()
            except hvd.HorovodInternalError as e:
                print(f"FAILED {type(e.__cause__).__name__}: {e}", flush=True)
                raise
        state.epoch += 1
        sampler.set_epoch(state.epoch)
        state.commit()
    return state


train(state)
params = hvd.allgather_object([p.detach() for p in model.parameters()])
same = all(torch.equal(a, b) for ps in params for a, b in zip(ps, params[0]))
print(f"DONE world {hvd.size()} steps {state.steps} resets {resets} same {same}", flush=True)
hvd.shutdown()
