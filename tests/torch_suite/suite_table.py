"""The markdown of ``docs/torch-suite.md`` from the outcomes of the suite runs."""

from __future__ import annotations

from typing import NamedTuple

MODES = ("gloo", "dtcomm", "dtcomm-as-gloo")
TITLES = {"gloo": "gloo", "dtcomm": "dtcomm (plugin)", "dtcomm-as-gloo": "dtcomm as gloo"}
SHORT = {"pass": "pass", "FAIL": "**FAIL**", "skip": "skip", "xfail": "xfail", "-": "-"}


class Outcome(NamedTuple):
    """One test's outcome in one run: pass, FAIL, skip or xfail, and the reason."""

    status: str
    why: str


PREAMBLE = """\
# torch's distributed test suite against dtcomm

torch ships its distributed collective suite in the wheel
(`torch/testing/_internal/distributed/distributed_test.py`, `DistributedTest._DistTestBase`).
`tests/torch_suite/dist_suite.py` is our equivalent of pytorch's `test_distributed_spawn.py`:
each test starts the ranks (fork; `DTCOMM_SUITE_START=spawn` for pytorch's way), which meet
through a FileStore. Three modes:

* **gloo**: torch's gloo, the reference.
* **dtcomm (plugin)**: `BACKEND=dtcomm`, declared to the suite as a plugin with DDP and
  subgroups. Most tests are gated to backends the suite knows by name, so many skip.
* **dtcomm as gloo**: the suite is told it tests gloo and every process group it creates for
  `"gloo"` is a dtcomm one (the `GLOO` plugin's creator is dtcomm's). This runs everything
  gloo runs.

The selection is every test whose name does not mention cuda/gpu/nccl/profiling (237 in
torch 2.15.0). `tests/torch_suite/test_torch_suite_fast.py` runs a fast subset of them in the
normal test suite, with dtcomm's known failures marked strict xfail.

In **dtcomm as gloo** mode two things of gloo's own are not asserted: the profiler events
gloo's C++ Work records (`gloo:all_reduce` with input shapes; the suite's
`PROFILING_SUPPORTED_BACKENDS` lose `gloo`), and the backend type: the group is registered as
CUSTOM, because torch's C++ (DDP's logger) casts a GLOO-typed backend to `ProcessGroupGloo`
and crashes on any other. Tests that assert the name "gloo" fail in this mode by design.

## Before and after (world 2)

Before: measured on main before this work (spawn start, the same 237 tests).

| mode | before | after |
|---|---|---|
| gloo | 90 pass, 0 fail | see Counts |
| dtcomm (plugin) | 54 pass, 12 fail, 171 skip | see Counts |
| dtcomm as gloo | 68 pass, 19 fail (of the 87 gloo passes, 3 name-asserting tests left out) | see Counts |

Fixed in the backend (`python/dtcomm/torch_backend.py` and its helpers): `Work.is_completed()`
(torch's holder of a Python Work never forwarded it), subgroup backends kept alive
(`getBackendName is not implemented` was torch reaching the C++ base of a collected Python
backend), `monitored_barrier` (through the group's store, gloo's messages),
`batch_isend_irecv` (issued in an order every pair agrees on), timeouts in torch's words,
sparse COO `all_reduce`, `allgather_coalesced`, receive from any source (`recv_anysource`:
the engine takes the first peer whose next point-to-point frame is waiting; torch's holder
does not forward `sourceRank()`, so the sender travels with the received tensor, where a
patched `Work._source_rank` finds it).

Still failing, on purpose:

* `test_ddp_logging_data_cpu` (both modes): DDP's logger reads the backend name from the C++
  `ProcessGroup`, which names every plugin backend `custom` (in gloo's place dtcomm registers
  as CUSTOM too, see above); torch offers no hook. It asserts a name, nothing else.
"""


def counts(r: dict[str, Outcome]) -> str:
    n = {k: 0 for k in ("pass", "FAIL", "skip", "xfail")}
    for o in r.values():
        n[o.status] = n.get(o.status, 0) + 1
    return f"{n['pass']} pass, {n['FAIL']} fail, {n['skip'] + n['xfail']} skip"


def render(
    results: dict[tuple[str, int], dict[str, Outcome]], worlds: list[int], modes: list[str], command: str
) -> str:
    """The whole document: preamble, the command, the counts, one row per test."""
    out = [PREAMBLE, "## Regenerate", "", "```", command, "```", "", "## Counts", ""]
    out.append("| world | " + " | ".join(TITLES[m] for m in modes) + " |")
    out.append("|---|" + "---|" * len(modes))
    for w in worlds:
        out.append(f"| {w} | " + " | ".join(counts(results[(m, w)]) for m in modes) + " |")
    out += ["", "## Per test", "", f"Outcomes at world {', '.join(map(str, worlds))} (in that order)."]
    out += ["", "| test | " + " | ".join(TITLES[m] for m in modes) + " | why (dtcomm) |"]
    out.append("|---|" + "---|" * (len(modes) + 1))
    names = sorted({n for r in results.values() for n in r})
    for name in names:
        cells, why = [], ""
        for m in modes:
            seq = [results[(m, w)].get(name, Outcome("-", "")) for w in worlds]
            cells.append("/".join(SHORT.get(o.status, o.status) for o in seq))
            if m != "gloo" and not why:
                why = next((o.why for o in seq if o.status in ("FAIL", "xfail")), "")
        gloo_passes = any(results[("gloo", w)].get(name, Outcome("-", "")).status == "pass" for w in worlds) \
            if "gloo" in modes else True
        if not why and gloo_passes and any(c.startswith("skip") for c in cells[1:]):
            why = next((results[(m, w)][name].why for m in modes if m != "gloo" for w in worlds
                        if results[(m, w)].get(name, Outcome("-", "")).status == "skip"), "")
        out.append(f"| `{name}` | " + " | ".join(cells) + f" | {why.replace('|', '/')} |")
    out.append("")
    return "\n".join(out)
