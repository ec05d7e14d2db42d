"""Horovod's own PyTorch test suite against ``dtcomm.horovod``, started the way
``horovodrun --gloo -np N`` starts it (here ``dtrun --horovod -np N``: Horovod's rank
variables, ``import horovod.torch`` is dtcomm's), at each world size asked for.

Horovod's code is not kept in this repository: point ``--horovod-src`` (or
``DTCOMM_HOROVOD_SRC``) at a checkout of its public repository at the tag in
``horovod_expectations.HOROVOD_TAG``::

    git clone --depth 1 --branch v0.28.1 https://github.com/horovod/horovod.git ~/horovod
    python tests/horovod_suite/run_horovod_suite.py --horovod-src ~/horovod

Without it the run is skipped, saying so. Each world gets a folder under ``--out`` with each
rank's log and JUnit file (``rank<N>.log``, ``junit-rank<N>.xml``) and dtrun's log (``main/``, and
``alone-<test>/`` for each test expected to fail, run apart so its failure cannot leak); each test has
a limit (pytest-timeout) and each world a wall-clock limit. The outcome of every test, merged
over the ranks, is checked against ``horovod_expectations.py`` and written as a Markdown table
(``summary.md``); the exit status is 1 when a test failed that is not expected to, or passed
while listed as unable to.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from horovod_expectations import HOROVOD_TAG, expected_failures  # noqa: E402

RANK_PY = HERE / "horovod_rank.py"
SUITE = Path("test/parallel/test_torch.py")
#: Horovod's other torch tests that apply here: (file, ranks; None: the world size).
EXTRA: tuple[tuple[Path, int | None], ...] = (
    (Path("test/parallel/test_timeline.py"), None),
    (Path("test/single/test_torch_elastic.py"), 1),  # (its sampler counts assume one rank)
)
ORDER = {"failed": 0, "error": 1, "skipped": 2, "passed": 3}


@dataclass
class Outcome:
    """One test at one world size, merged over the ranks: the worst rank's outcome."""

    status: str = "passed"
    detail: str = ""
    ranks: int = 0
    #: Ranks that ran it (the world, or 1 for Horovod's single-process tests).
    want: int = 0

    def add(self, status: str, detail: str) -> None:
        self.ranks += 1
        if ORDER[status] < ORDER[self.status]:
            self.status, self.detail = status, detail


@dataclass
class WorldRun:
    """What one world size's run left."""

    world: int
    seconds: float
    exit_code: int | None
    timed_out: bool
    tests: dict[str, Outcome] = field(default_factory=dict)


def read_junit(path: Path, into: dict[str, Outcome], want: int) -> None:
    """Adds one rank's JUnit results (of a job of ``want`` ranks) to ``into`` (by test name)."""
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "?")
        status, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                status = "failed" if tag == "failure" else tag
                detail = (el.get("message") or "").strip().splitlines()[0:1]
                detail = detail[0][:300] if detail else ""
                break
        into.setdefault(name, Outcome(want=want)).add(status, detail)


def _run_ranks(cmd: list[str], out: Path, env: dict[str, str], limit: float) -> tuple[int | None, bool]:
    """Runs one ``dtrun --horovod`` in ``out`` (its own session: at ``limit`` the whole group,
    dtrun and every rank, is stopped); its exit code and whether it hit the limit."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*"):
        old.unlink()
    with open(out / "dtrun.log", "w") as log:
        p = subprocess.Popen(cmd, cwd=out, env={**env, "DTCOMM_HVD_OUT": str(out)}, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            p.wait(timeout=limit)
            return p.returncode, False
        except subprocess.TimeoutExpired:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
                p.wait(timeout=10)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        return p.returncode, True


def run_world(src: Path, world: int, out: Path, test_timeout: int, limit: float,
              stall: int, select: list[str]) -> WorldRun:
    """Runs the suite at ``world`` ranks; returns the merged outcomes. The tests that cannot
    pass here run apart, each in its own job (``alone-<test>/``): one that fails on some ranks
    and not others leaves the ranks at different places, and Horovod's tests resynchronise
    only at the next test's barrier, so its failure would leak into the next test otherwise."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DTCOMM_", "HOROVOD_"))}
    env.update(DTCOMM_HVD_TEST_TIMEOUT=str(test_timeout), DTCOMM_TIMEOUT=str(stall),
               PYTHONUNBUFFERED="1")
    suite = src / SUITE
    def ranks(n: int) -> list[str]:
        return [sys.executable, "-m", "dtcomm", "--horovod", "-np", str(n), str(RANK_PY)]

    base = ranks(world)
    apart = sorted(expected_failures(world))
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("**/*"):
        if old.is_file():
            old.unlink()
    t0 = time.monotonic()
    jobs = [(out / "main", [*base, str(suite), *select], ",".join(apart), world)]
    jobs += [(out / f"alone-{t}", [*base, f"{suite}::TorchTests::{t}", *select], "", world)
             for t in apart]
    for extra, n in EXTRA:
        n = n or world
        cmd = [*ranks(n), str(src / extra), *select]
        jobs.append((out / extra.stem, cmd, "", n))
    code, timed_out = 0, False
    for folder, cmd, leave_out, _ in jobs:
        left = limit - (time.monotonic() - t0)
        c, late = _run_ranks(cmd, folder, {**env, "DTCOMM_HVD_LEAVE_OUT": leave_out},
                             max(left, 1.0))
        timed_out |= late
        if folder.name == "main":
            code = c if c is not None else -1
        if late:
            break
    run = WorldRun(world, time.monotonic() - t0, code, timed_out)
    for folder, _, _, n in jobs:
        for junit in sorted(folder.glob("junit-rank*.xml")):
            read_junit(junit, run.tests, n)
    return run


def verdicts(run: WorldRun) -> dict[str, tuple[str, str]]:
    """Test name -> (verdict, note): ``pass``, ``skip`` (Horovod's reason), ``expected``
    (cannot pass here: why), ``UNEXPECTED`` (failed), ``STALE`` (listed, but passed) or
    ``MISSING`` (some rank has no result: it died or the run hit its limit)."""
    expected = expected_failures(run.world)
    out: dict[str, tuple[str, str]] = {}
    for name, o in sorted(run.tests.items()):
        if o.ranks < o.want:
            out[name] = ("MISSING", f"results from {o.ranks} of {o.want} ranks")
        elif o.status == "skipped":
            out[name] = ("skip", o.detail)
        elif o.status == "passed":
            out[name] = ("STALE", "listed as unable to pass, but passed") if name in expected \
                else ("pass", "")
        elif name in expected:
            out[name] = ("expected", expected[name])
        else:
            out[name] = ("UNEXPECTED", o.detail)
    return out


def summary(runs: list[WorldRun]) -> str:
    """The Markdown table: one row per test, one column per world, then the notes."""
    tables = {r.world: verdicts(r) for r in runs}
    names = sorted({n for t in tables.values() for n in t})
    head = " | ".join(f"world {r.world}" for r in runs)
    lines = [f"Horovod {HOROVOD_TAG}'s torch tests against dtcomm.horovod", "",
             "| world | passed | skipped | cannot pass here | unexpected | time | exit |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        v = [x[0] for x in tables[r.world].values()]
        bad = sum(x in ("UNEXPECTED", "STALE", "MISSING") for x in v)
        lines.append(f"| {r.world} | {v.count('pass')} | {v.count('skip')} | "
                     f"{v.count('expected')} | {bad} | {r.seconds:.0f} s | "
                     f"{'limit' if r.timed_out else r.exit_code} |")
    lines += ["", f"| test | {head} | note |", "|---|" + "---|" * len(runs) + "---|"]
    for n in names:
        cells = [tables[r.world].get(n, ("-", ""))for r in runs]
        notes = sorted({c[1] for c in cells if c[1] and c[0] != "pass"})
        lines.append(f"| `{n}` | " + " | ".join(c[0] for c in cells) + " | "
                     + "; ".join(x.replace("|", "/") for x in notes) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--horovod-src", type=Path, default=os.environ.get("DTCOMM_HOROVOD_SRC"),
                    help="a checkout of Horovod's repository (env DTCOMM_HOROVOD_SRC)")
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--out", type=Path, default=HERE.parents[1] / "target" / "horovod-suite")
    ap.add_argument("--test-timeout", type=int, default=120, help="seconds per test")
    ap.add_argument("--limit", type=float, default=1200, help="seconds per world size")
    ap.add_argument("--stall", type=int, default=60,
                    help="dtcomm's deadline (DTCOMM_TIMEOUT): a name some ranks never submit "
                         "fails on the others after this many seconds")
    ap.add_argument("select", nargs="*", help="extra pytest arguments (-k EXPR, ...)")
    a = ap.parse_args(argv)
    if a.horovod_src is None or not (Path(a.horovod_src) / SUITE).is_file():
        print(f"skipped: Horovod's suite is not here ({a.horovod_src or 'no --horovod-src'}): "
              f"git clone --depth 1 --branch {HOROVOD_TAG} "
              "https://github.com/horovod/horovod.git DIR, then --horovod-src DIR")
        return 0
    runs = []
    for w in a.worlds:
        run = run_world(Path(a.horovod_src).resolve(), w, a.out / f"world{w}", a.test_timeout,
                        a.limit, a.stall, a.select)
        runs.append(run)
        print(f"world {w}: {len(run.tests)} tests in {run.seconds:.0f} s "
              f"(exit {'limit' if run.timed_out else run.exit_code})", flush=True)
    text = summary(runs)
    (a.out / "summary.md").write_text(text)
    (a.out / "results.json").write_text(json.dumps(
        {r.world: verdicts(r) for r in runs}, indent=1, sort_keys=True))
    print(text)
    bad = [(r.world, n, v) for r in runs for n, (v, _) in verdicts(r).items()
           if v in ("UNEXPECTED", "STALE", "MISSING")]
    if any(r.timed_out or not r.tests for r in runs) or bad:
        for w, n, v in bad:
            print(f"world {w}: {n}: {v}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
