"""Started by every interpreter of a ``c10d_files.py`` run in mode ``dtcomm-as-gloo`` (this
directory is first on its ``PYTHONPATH``): process groups created for ``"gloo"`` are dtcomm
ones, registered as a CUSTOM backend type (torch's C++ casts a GLOO-typed backend to
``ProcessGroupGloo``), as ``dist_suite.py``'s mode of that name does. Imports torch only in
that mode."""

from __future__ import annotations

import os

if os.environ.get("DTCOMM_SUITE_MODE") == "dtcomm-as-gloo":
    import torch.distributed as dist

    from dtcomm import torch_backend

    torch_backend.register()
    dist.Backend._ensure_backend_registered("gloo")
    dist.Backend._plugins["GLOO"] = dist.Backend._BackendPlugin(torch_backend._create, False)
    dist.Backend.backend_type_map["gloo"] = dist.ProcessGroup.BackendType.CUSTOM
