"""What torch's own suite expects of a backend, at world 3 through ``init_process_group``:
Work.is_completed, subgroup backends, batch_isend_irecv in the order that hangs a naive
backend, monitored_barrier's messages, timeouts in torch's words, sparse all_reduce,
all_gather_coalesced. Plus the batch order itself, checked without processes."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server, torch_env  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")


def test_what_torch_suite_expects(tmp_path: Path, server: dtcomm.RdzvServer) -> None:
    res = run_group(tmp_path, 3, WORKERS / "torch_conformance.py", torch_env(server), timeout=180)
    check(res)


# --- the batch order, without processes ---------------------------------------------------


def _simulate(batches: dict[int, list[tuple[str, int, int]]]) -> dict[tuple[int, int, int], int]:
    """Runs each rank's ordered (kind, peer, tag) calls one at a time, a call blocking until the
    peer's current call is its counterpart (the engine's semantics, no buffering). Returns how
    many messages went from (src, dst, tag); fails on a deadlock or a tag mismatch."""
    pos = {r: 0 for r in batches}
    sent: dict[tuple[int, int, int], int] = {}
    while any(pos[r] < len(batches[r]) for r in batches):
        progressed = False
        for r in batches:
            if pos[r] >= len(batches[r]):
                continue
            kind, peer, tag = batches[r][pos[r]]
            if kind != "send" or pos[peer] >= len(batches[peer]):
                continue
            pkind, ppeer, ptag = batches[peer][pos[peer]]
            if pkind == "recv" and ppeer == r:
                assert ptag == tag, f"rank {r}'s send (tag {tag}) met rank {peer}'s recv (tag {ptag})"
                sent[(r, peer, tag)] = sent.get((r, peer, tag), 0) + 1
                pos[r] += 1
                pos[peer] += 1
                progressed = True
        assert progressed, f"deadlock: {[(r, batches[r][pos[r]:]) for r in batches]}"
    return sent


@pytest.mark.parametrize("seed", range(20))
def test_batch_order_cannot_hang(seed: int) -> None:
    from dtcomm._torch_batch import P2pBatch
    from dtcomm._torch_work import DtcommWork

    rng = random.Random(seed)
    world = rng.randint(2, 5)
    # every ordered pair exchanges 0-3 messages, each with one of two tags
    msgs = [(a, b, rng.choice((0, 7))) for a, b in itertools.permutations(range(world), 2)
            for _ in range(rng.randint(0, 3))]
    calls: dict[int, list[tuple[str, int, int]]] = {r: [] for r in range(world)}
    for a, b, tag in msgs:
        calls[a].append(("send", b, tag))
        calls[b].append(("recv", a, tag))
    ordered = {}
    for r in range(world):
        rng.shuffle(calls[r])  # the user's order: anything
        batch = P2pBatch(r)
        for kind, peer, tag in calls[r]:
            batch.add(kind, torch.empty(1), peer, tag, DtcommWork([], r, kind))
        ordered[r] = [(op.kind, op.peer, op.tag) for op in batch.order()]
    sent = _simulate(ordered)
    want: dict[tuple[int, int, int], int] = {}
    for m in msgs:
        want[m] = want.get(m, 0) + 1
    assert sent == want
