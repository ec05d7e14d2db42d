"""Runs torch's distributed test suite for gloo and dtcomm (both modes) and writes the table.

    python tests/torch_suite/run_suite.py --worlds 2,3,4 --jobs 2 --out docs/torch-suite.md

Each (mode, world) is one ``pytest tests/torch_suite/dist_suite.py`` process with its own
junit XML under ``--results``; ``--jobs`` of them run at once (every test starts its own ranks,
so one job keeps about ``world`` cores busy). A hung test fails after
``DISTRIBUTED_TESTS_DEFAULT_TIMEOUT`` seconds (``--test-timeout``). The selection is every test
of ``DistributedTest._DistTestBase`` whose name does not mention cuda/gpu/nccl/profiling
(``--select`` narrows it with a pytest ``-k`` expression).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from suite_table import MODES, Outcome, render  # noqa: E402

BASE_FILTER = "not cuda and not gpu and not nccl and not profiling"


def run_one(mode: str, world: int, select: str | None, results: Path, test_timeout: int) -> Path:
    """One pytest run of the suite; returns its junit XML path."""
    xml = results / f"{mode}-w{world}.xml"
    log = results / f"{mode}-w{world}.log"
    expr = BASE_FILTER if not select else f"({BASE_FILTER}) and ({select})"
    env = {
        **os.environ,
        "DTCOMM_SUITE_MODE": mode,
        "WORLD_SIZE": str(world),
        "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(test_timeout),
    }
    env.pop("TEMP_DIR", None)
    cmd = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
        str(HERE / "dist_suite.py"), "-k", expr, f"--junitxml={xml}",
        f"--timeout={test_timeout + 60}",
    ]
    t0 = time.monotonic()
    with open(log, "w") as f:
        subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, check=False)
    print(f"[torch-suite] {mode} world {world}: {time.monotonic() - t0:.0f} s -> {xml}", flush=True)
    return xml


def parse(xml: Path) -> dict[str, Outcome]:
    """Test name -> outcome from a junit XML (a missing file: nothing ran)."""
    out: dict[str, Outcome] = {}
    if not xml.exists():
        return out
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name", "")
        status, why = "pass", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status = "FAIL"
                why = _why(child.text or child.get("message") or "")
            elif child.tag == "skipped":
                status = "xfail" if child.get("type") == "pytest.xfail" else "skip"
                why = _why(child.get("message") or "")
        out[name] = Outcome(status, why)
    return out


def _why(report: str) -> str:
    """The exception line of a failure report (torch's multi-process failures carry the
    rank's traceback; pytest prefixes its lines with ``E``)."""
    lines = [re.sub(r"^E\s+", "", ln).strip() for ln in report.splitlines()]
    lines = [ln for ln in lines if ln]
    end = next((i for i, ln in enumerate(lines) if ln.startswith("To execute this test")), len(lines))
    for ln in reversed(lines[:end]):
        if re.match(r"^[\w.]*(Error|Exception|Failure)\b", ln) or "timed out after" in ln:
            if not ln.startswith("RuntimeError: Process ") or "timed out" in ln:
                return ln[:240]
    return (lines[0] if lines else "")[:240]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", default="2,3,4")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--select", default=None, help="pytest -k expression narrowing the selection")
    ap.add_argument("--test-timeout", type=int, default=90)
    ap.add_argument("--results", type=Path, default=ROOT / "target" / "torch-suite")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    ap.add_argument("--reuse", action="store_true", help="only re-render from existing XML files")
    args = ap.parse_args()

    worlds = [int(w) for w in args.worlds.split(",")]
    modes = args.modes.split(",")
    args.results.mkdir(parents=True, exist_ok=True)
    configs = [(m, w) for w in worlds for m in modes]
    if not args.reuse:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(lambda c: run_one(c[0], c[1], args.select, args.results, args.test_timeout), configs))
    results = {(m, w): parse(args.results / f"{m}-w{w}.xml") for m, w in configs}
    (args.results / "results.json").write_text(
        json.dumps({f"{m}-w{w}": {k: v._asdict() for k, v in r.items()} for (m, w), r in results.items()}, indent=1)
    )
    command = "python tests/torch_suite/run_suite.py " + shlex.join(a for a in sys.argv[1:] if a != "--reuse")
    text = render(results, worlds, modes, command)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"[torch-suite] wrote {args.out}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
