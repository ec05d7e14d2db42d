"""Run by python/tests/test_dtrun.py under ``dtrun`` (``python -m dtcomm``): prints the
torchrun-style environment dtrun gave it and its own arguments
(``RANK=.. LOCAL_RANK=.. ... ARGS=a,b``), ``LINKSECRET <DTCOMM_LINK_SECRET or none>``, a line
to stderr (``to stderr``), then joins the world and prints ``SUM <sum of ranks> LOCAL
<local rank> <local size>`` after an ``all_reduce``."""

from __future__ import annotations

import os
import sys

keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "TORCHELASTIC_RUN_ID"]
print(" ".join(f"{k}={os.environ[k]}" for k in keys), "ARGS=" + ",".join(sys.argv[1:]))
print("LINKSECRET", os.environ.get("DTCOMM_LINK_SECRET", "none"))
print("to stderr", file=sys.stderr)

import numpy as np  # noqa: E402

import dtcomm  # noqa: E402

dtcomm.init(verbose=False)
x = np.full(3, dtcomm.rank(), dtype=np.int64)
dtcomm.all_reduce(x)
print("SUM", int(x[0]), "LOCAL", dtcomm.local_rank(), dtcomm.local_size())
