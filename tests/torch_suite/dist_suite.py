"""torch's own distributed test suite (``DistributedTest._DistTestBase``) for one backend mode.

The equivalent of pytorch's ``test/distributed/test_distributed_spawn.py`` (not shipped in the
wheel): every test spawns ``WORLD_SIZE`` ranks that meet through a FileStore
(``init_method=file://``). The mode comes from ``DTCOMM_SUITE_MODE`` and is applied at import,
so the spawned ranks (which import this module to unpickle the test class) apply it too:

* ``gloo``: torch's gloo, the reference.
* ``dtcomm``: dtcomm as a plugin backend (``BACKEND=dtcomm``), declared to the suite as a
  plugin with DDP and subgroups.
* ``dtcomm-as-gloo``: the suite is told it tests gloo, and every process group it creates for
  ``"gloo"`` is a dtcomm one (the ``GLOO`` plugin's creator is dtcomm's).

Run through ``run_suite.py`` (all modes and worlds, the table in ``docs/torch-suite.md``) or
``test_torch_suite_fast.py`` (the subset CI runs). Not collected by a plain ``pytest tests``
(the file name does not start with ``test_``).
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile

MODES = ("gloo", "dtcomm", "dtcomm-as-gloo")
MODE = os.environ.get("DTCOMM_SUITE_MODE", "gloo")
if MODE not in MODES:
    raise ValueError(f"DTCOMM_SUITE_MODE={MODE!r}: expected one of {MODES}")

# distributed_test reads these at import.
os.environ["BACKEND"] = "dtcomm" if MODE == "dtcomm" else "gloo"
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="dtcomm-torch-suite-"))
# fork (default): the ranks inherit the imported suite instead of importing it again (~15 s of
# CPU per rank per test under spawn, which pytorch needs for CUDA only).
START_METHOD = os.environ.get("DTCOMM_SUITE_START", "fork")
# A hung test fails after this many seconds instead of torch's 300.
os.environ.setdefault("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "90")

import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402
from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

from dtcomm import torch_backend  # noqa: E402


def _install() -> None:
    torch_backend.register()
    if MODE == "dtcomm":
        for feature in ("plugin", "ddp", "subgroup"):
            DistTestCases.backend_feature[feature].add("dtcomm")
    elif MODE == "dtcomm-as-gloo":
        dist.Backend._ensure_backend_registered("gloo")
        dist.Backend._plugins["GLOO"] = dist.Backend._BackendPlugin(torch_backend._create, False)
        # Registered as a CUSTOM backend type: torch's C++ code casts a GLOO-typed backend to
        # ProcessGroupGloo (DDP's logger reads gloo's thread count: a segfault on dtcomm's).
        dist.Backend.backend_type_map["gloo"] = dist.ProcessGroup.BackendType.CUSTOM
        # The suite expects gloo's own profiler events ("gloo:all_reduce" with its input
        # shapes, recorded by gloo's C++ Work); they are gloo's instrumentation, not a
        # property of the collectives, so this mode does not assert them.
        for name in ("PROFILING_SUPPORTED_BACKENDS", "CUDA_PROFILING_SUPPORTED_BACKENDS",
                     "SEND_RECV_PROFILING_SUPPORTED_BACKENDS"):
            backends = getattr(distributed_test, name, [])
            while "gloo" in backends:
                backends.remove("gloo")


_install()


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """Each test starts the ranks (torch's MultiProcessTestCase)."""

    def setUp(self) -> None:
        super().setUp()
        if START_METHOD == "spawn":
            self._spawn_processes()
        else:
            self._start_processes(multiprocessing.get_context(START_METHOD).Process)
