"""torch's distributed test files that the wheel does not ship, run with dtcomm in gloo's place.

    python tests/torch_suite/c10d_files.py [--files NAME,...] [--modes gloo,dtcomm-as-gloo]
        [--select EXPR] [--out FILE.md]

The files (``test/distributed/test_c10d_gloo.py`` with its ``test_c10d_common.py``,
``test_c10d_object_collectives.py``, ``tensor/test_redistribute.py``, the FSDP2 tests that run
on CPU) are pytorch's, at the commit of the installed torch (``torch.version.git_version``).
Their code stays out of this repository: they are taken from ``DTCOMM_TORCH_TESTS_DIR`` (a
checkout's ``test/`` directory, or any directory holding those paths) or downloaded from
GitHub into ``~/.cache/dtcomm/torch-tests/<commit>/``. When neither works (a machine that
reaches only package registries), the run says so and exits 0 with every file skipped; the
recorded table is in ``docs/torch-suite.md``.

Each (file, mode) is one pytest process. ``dtcomm-as-gloo`` puts ``sitecustomize.py`` from
``c10d_as_gloo/`` on ``PYTHONPATH``: every interpreter the tests start (spawned ranks too)
makes ``"gloo"`` a dtcomm group, as ``dist_suite.py``'s mode of that name does.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from run_suite import parse  # noqa: E402

#: The files, by the path under pytorch's ``test/``; the first ones' helpers come along.
FILES = {
    "test_c10d_gloo": ["distributed/test_c10d_gloo.py", "distributed/test_c10d_common.py"],
    "test_c10d_object_collectives": ["distributed/test_c10d_object_collectives.py"],
    "test_redistribute": ["distributed/tensor/test_redistribute.py"],
    "test_fully_shard_comm": ["distributed/_composable/fsdp/test_fully_shard_comm.py"],
}
MODES = ("gloo", "dtcomm-as-gloo")
RAW = "https://raw.githubusercontent.com/pytorch/pytorch/{commit}/test/{path}"


def torch_commit() -> str:
    import torch

    return str(torch.version.git_version)


def obtain(paths: list[str], commit: str, timeout: float = 20.0) -> tuple[Path | None, str]:
    """The directory holding ``paths`` (pytorch's ``test/`` layout), or None and why not."""
    given = os.environ.get("DTCOMM_TORCH_TESTS_DIR")
    if given:
        root = Path(given)
        missing = [p for p in paths if not (root / p).is_file()]
        if missing:
            return None, f"DTCOMM_TORCH_TESTS_DIR={given} lacks {missing}"
        return root, ""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dtcomm" / \
        "torch-tests" / commit
    for p in paths:
        dest = cache / p
        if dest.is_file():
            continue
        url = RAW.format(commit=commit, path=p)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - fixed host
                body = r.read()
        except OSError as e:
            return None, f"cannot download {url}: {e} (set DTCOMM_TORCH_TESTS_DIR to a copy)"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(body)
    return cache, ""


def run(name: str, root: Path, mode: str, results: Path, select: str | None,
        timeout: int) -> Path:
    """One pytest run of one file in one mode; returns its junit XML path."""
    xml = results / f"{name}-{mode}.xml"
    target = root / FILES[name][0]
    env = {**os.environ, "DTCOMM_SUITE_MODE": mode, "BACKEND": "gloo"}
    paths = [str(target.parent), str(root)]
    if mode == "dtcomm-as-gloo":
        paths.insert(0, str(HERE / "c10d_as_gloo"))
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target),
           f"--junitxml={xml}", f"--timeout={timeout}"]
    if select:
        cmd += ["-k", select]
    with open(results / f"{name}-{mode}.log", "w") as f:
        subprocess.run(cmd, cwd=target.parent, env=env, stdout=f, stderr=subprocess.STDOUT,
                       check=False)
    return xml


def table(outcomes: dict[str, dict[str, dict[str, tuple[str, str]]]], commit: str) -> str:
    """Markdown: per file, counts per mode, then the tests gloo passes and dtcomm does not."""
    lines = [f"torch {commit[:12]}, CPU, each file's own world size (MultiProcessTestCase: 4).",
             "",
             "| file | " + " | ".join(MODES) + " |", "|---" * (len(MODES) + 1) + "|"]
    gaps: list[str] = []
    for name, by_mode in outcomes.items():
        cells = []
        for m in MODES:
            res = by_mode.get(m, {})
            n = {s: sum(1 for v in res.values() if v[0] == s) for s in ("pass", "FAIL", "skip")}
            cells.append(f"{n['pass']} pass, {n['FAIL']} fail, {n['skip']} skip" if res else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        ref, ours = by_mode.get("gloo", {}), by_mode.get("dtcomm-as-gloo", {})
        for test, (status, _) in sorted(ref.items()):
            mine = ours.get(test)
            if status == "pass" and mine is not None and mine[0] != "pass":
                gaps.append(f"| {name} | {test} | {mine[0]}: {mine[1][:160]} |")
    if gaps:
        lines += ["", "| file | test gloo passes | dtcomm as gloo |", "|---|---|---|", *gaps]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", default=",".join(FILES))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--select", default=None, help="pytest -k expression")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per test")
    ap.add_argument("--results", type=Path, default=ROOT / "target" / "torch-c10d-files")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    commit = torch_commit()
    args.results.mkdir(parents=True, exist_ok=True)
    outcomes: dict[str, dict[str, dict[str, tuple[str, str]]]] = {}
    for name in args.files.split(","):
        root, why = obtain(FILES[name], commit)
        if root is None:
            print(f"[c10d-files] SKIP {name}: {why}", flush=True)
            continue
        outcomes[name] = {}
        for mode in args.modes.split(","):
            xml = run(name, root, mode, args.results, args.select, args.timeout)
            outcomes[name][mode] = {k: (v.status, v.why) for k, v in parse(xml).items()}
            print(f"[c10d-files] {name} {mode}: {xml}", flush=True)
    text = table(outcomes, commit)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
