"""Run by python/tests/test_cuda_status.py in a fresh process (a loaded NCCL stays loaded, so
each environment gets its own): prints ``dtcomm.cuda_status()`` as one JSON line, the last line
of its output.

``--torch-first``: imports torch before dtcomm and first prints ``TORCH_NCCL mapped`` or
``TORCH_NCCL absent``, whether importing torch mapped ``libnccl.so.2`` into the process."""

from __future__ import annotations

import sys

if "--torch-first" in sys.argv[1:]:
    import torch  # noqa: F401

    maps = open("/proc/self/maps").read()
    print("TORCH_NCCL", "mapped" if "/libnccl.so.2" in maps else "absent")

import json

import dtcomm

print(json.dumps(dtcomm.cuda_status()))
