"""The ``dt-rdzv`` command of the wheel: runs the server binary the wheel ships in
``dtcomm/_bin/`` (the way ruff's wheel runs its binary). ``exec`` replaces this process, so the
PID the caller started is the server's and signals reach it directly."""

from __future__ import annotations

import os
import sys

from ._install import rdzv_bin


def main() -> int:
    """Replace this process with ``dt-rdzv`` (its arguments passed on), or say which file is
    missing or not executable."""
    path = rdzv_bin()
    if not os.path.isfile(path):
        print(
            f"dt-rdzv: {path} is missing: this dtcomm was built without the server binary (a "
            "build from the sdist, or `maturin develop`); the wheels from "
            "scripts/build_wheels.sh carry it, or install the server alone with "
            "`cargo install --path rdzv --features etcd`",
            file=sys.stderr,
        )
        return 127
    if not os.access(path, os.X_OK):
        print(f"dt-rdzv: {path} is not executable (chmod +x it, or reinstall dtcomm)",
              file=sys.stderr)
        return 126
    try:
        os.execv(path, [path, *sys.argv[1:]])
    except OSError as e:
        print(f"dt-rdzv: cannot run {path}: {e}", file=sys.stderr)
        return 126


if __name__ == "__main__":
    sys.exit(main())
