"""dtcomm under a real Slurm (Debian's slurm-wlm and munge, one node started by the test,
``slurm_cluster.py``): ``srun -n 4`` tasks form one world with no endpoint and no
``MASTER_ADDR``; DDP over dtcomm trains with ``init_method="dtcomm://"`` (every rank ends with
the same parameters); ``srun --mpi=pmi2`` gives distinct local ranks; ``srun --mpi=pmix`` meets through Slurm's
PMIx server; ``torchrun`` under
``srun`` keeps torchrun's ranks; ``dtrun`` as the step of an allocation starts its workers;
``sbatch --wait examples/slurm/train.sbatch`` runs the example
batch script end to end."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from slurm_cluster import Slurm, slurm  # noqa: F401 (fixture)

WORKERS = Path(__file__).parent / "workers"
ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


#: What each tagged line holds (matched anywhere: two tasks' lines can share one line of
#: srun's output when their writes interleave).
PAYLOAD = {
    "RESULT": r"rank=\d+ world=\d+ local=\d+ sum=[\d.]+ gathered=\[[\d, ]*\]",
    "DDP": r"rank=\d+ world=\d+ local=\S+ first=[\d.]+ last=[\d.]+ checksum=-?[\d.]+",
}


def results(out: str, tag: str) -> list[str]:
    return sorted(re.findall(rf"{tag} ({PAYLOAD[tag]})", out))


def test_srun_four_tasks_form_one_world(slurm: Slurm) -> None:
    p = slurm.run("srun", "-n", "4", "--export=ALL,DTCOMM_TIMEOUT=60", PY,
                  str(WORKERS / "slurm_task.py"))
    assert p.returncode == 0, p.stdout + p.stderr + slurm.logs()
    assert results(p.stdout, "RESULT") == [
        f"rank={r} world=4 local={r} sum=10 gathered=[0, 1, 2, 3]" for r in range(4)], p.stdout


@pytest.mark.parametrize("backend", ["dtcomm", "gloo"])
def test_ddp_under_srun_with_the_dtcomm_rendezvous(slurm: Slurm, backend: str) -> None:
    p = slurm.run("srun", "-n", "4", f"--export=ALL,DTCOMM_TIMEOUT=60,BACKEND={backend}", PY,
                  str(WORKERS / "slurm_ddp.py"))
    assert p.returncode == 0, p.stdout + p.stderr + slurm.logs()
    lines = results(p.stdout, "DDP")
    assert len(lines) == 4, p.stdout
    sums = set()
    for r, line in enumerate(lines):
        m = re.match(r"rank=(\d) world=4 local=(\d) first=([\d.]+) last=([\d.]+) checksum=(\S+)",
                     line)
        assert m and int(m[1]) == r and int(m[2]) == r, line
        assert float(m[4]) < float(m[3]) / 10, f"the loss did not fall: {line}"
        sums.add(m[5])
    assert len(sums) == 1, f"ranks ended with different parameters: {lines}"
    assert "dtcomm:// rendezvous:" in p.stderr and "SLURM_PROCID" in p.stderr, p.stderr


def test_srun_pmi2_gives_distinct_local_ranks(slurm: Slurm) -> None:
    p = slurm.run("srun", "--mpi=pmi2", "-n", "3", "--export=ALL,DTCOMM_TIMEOUT=60", PY,
                  str(WORKERS / "slurm_task.py"))
    assert p.returncode == 0, p.stdout + p.stderr + slurm.logs()
    assert results(p.stdout, "RESULT") == [
        f"rank={r} world=3 local={r} sum=6 gathered=[0, 1, 2]" for r in range(3)], p.stdout


def test_srun_pmix_meets_through_slurms_pmix_server(slurm: Slurm) -> None:
    """``srun --mpi=pmix``: Slurm's ranks; rank 0's store address travels through the step's
    PMIx server (no derived port)."""
    p = slurm.run("srun", "--mpi=pmix", "-n", "3", "--export=ALL,DTCOMM_TIMEOUT=60", PY,
                  str(WORKERS / "slurm_task.py"))
    assert p.returncode == 0, p.stdout + p.stderr + slurm.logs()
    assert results(p.stdout, "RESULT") == [
        f"rank={r} world=3 local={r} sum=6 gathered=[0, 1, 2]" for r in range(3)], p.stdout
    assert "RDZV Slurm's PMIx server (srun --mpi=pmix)" in p.stdout, p.stdout


def test_torchrun_under_srun_keeps_torchruns_ranks(slurm: Slurm) -> None:
    p = slurm.run("srun", "-n", "1", "--export=ALL,DTCOMM_TIMEOUT=60", PY, "-m",
                  "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                  str(WORKERS / "slurm_task.py"))
    assert p.returncode == 0, p.stdout + p.stderr + slurm.logs()
    assert results(p.stdout, "RESULT") == [
        f"rank={r} world=2 local={r} sum=3 gathered=[0, 1]" for r in range(2)], p.stdout


def test_dtrun_as_the_step_of_an_allocation(slurm: Slurm) -> None:
    """``srun --ntasks-per-node=1 dtrun --nproc-per-node 2``: dtrun reads the step (one node
    here) and starts its workers."""
    p = slurm.run("srun", "--ntasks-per-node=1", "-n", "1", "--export=ALL,DTCOMM_TIMEOUT=60",
                  PY, "-m", "dtcomm", "--nproc-per-node", "2", str(WORKERS / "slurm_task.py"))
    assert p.returncode == 0, p.stdout + p.stderr + slurm.logs()
    got = results(p.stdout, "RESULT")
    assert got == [f"rank={r} world=2 local={r} sum=3 gathered=[0, 1]" for r in range(2)], p.stdout
    assert "Slurm step slurm-" in p.stderr and "node 0 of 1" in p.stderr, p.stderr


def test_the_sbatch_example_trains(slurm: Slurm, tmp_path: Path) -> None:
    out = tmp_path / "train-%j.out"
    p = slurm.run("sbatch", "--wait", "--ntasks-per-node=2", f"--output={out}",
                  f"--chdir={ROOT}", str(ROOT / "examples" / "slurm" / "train.sbatch"),
                  env={"PYTHON": PY, "DTCOMM_TIMEOUT": "60"}, timeout=300)
    logs = list(tmp_path.glob("train-*.out"))
    text = logs[0].read_text() if logs else ""
    assert p.returncode == 0, p.stdout + p.stderr + text + slurm.logs()
    losses = [float(x) for x in re.findall(r"step +\d+ +loss ([\d.]+)", text)]
    assert len(losses) >= 2 and losses[-1] < losses[0], text
    assert "all_reduce 16 MiB float32 over dtcomm, world 2" in text, text
