"""FSDP2, tensor parallel and distributed checkpointing on CPU at world 2 with dtcomm: losses
and gradients equal to gloo's (each backend in its own run of the same script, same seeds),
and a sharded model saved with ``torch.distributed.checkpoint`` loads back bit-identical.
Started as ``torch.multiprocessing.spawn`` users start them: torch's default threads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import dtcomm
from dtgroup import WORKERS, check, run_group, server, torch_env  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("what", ["fsdp2", "tp", "dcp"])
def test_equal_to_gloo(tmp_path: Path, server: dtcomm.RdzvServer, what: str) -> None:
    outs = {}
    for backend in ("dtcomm", "gloo"):
        out = tmp_path / f"{backend}.pt"
        env = {**torch_env(server), "BACKEND": backend, "WHAT": what, "OUT": str(out),
               "CKPT": str(tmp_path / f"ckpt-{backend}")}
        res = run_group(tmp_path, 2, WORKERS / "torch_parallel.py", env, timeout=240)
        if backend == "gloo" and all(f"done {what} gloo {r.rank}" in r.out for r in res):
            # The reference finished its work; gloo itself sometimes aborts at exit on these
            # VMs ("terminate called without an active exception", SIGABRT after
            # destroy_process_group; seen in 1 of ~11 benchmark runs too). Not what is tested.
            res = [r if r.code != -6 else dataclasses.replace(r, code=0) for r in res]
        check(res)
        outs[backend] = torch.load(out)
    (l_ours, g_ours, p_ours), (l_gloo, g_gloo, p_gloo) = outs["dtcomm"], outs["gloo"]
    for step, (a, b) in enumerate(zip(l_ours, l_gloo)):
        assert torch.equal(a, b), f"{what}: loss at step {step}: {a} vs {b}"
    for step, (ga, gb) in enumerate(zip(g_ours, g_gloo)):
        for i, (a, b) in enumerate(zip(ga, gb)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6,
                                       msg=lambda m: f"{what}: step {step} grad {i}: {m}")
    for a, b in zip(p_ours, p_gloo):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
