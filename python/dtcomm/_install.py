"""Where this installation keeps its files, and whether it is the only one on ``sys.path``.

The wheel carries, beside the Python package and its extension module, three files that
``scripts/build_wheels.sh`` stages into the package before maturin packs it:

* ``_bin/dt-rdzv``: the rendezvous server (the ``dt-rdzv`` command runs it, see
  ``dtcomm._rdzv_cli``);
* ``include/dtcomm.h``: the C ABI's header (``get_include()``);
* ``lib/libdtcomm_ffi.so``: the C ABI's library (``get_lib()``).

A build from the sdist (or ``maturin develop``) has only the extension module; the functions
below then name the file that is missing and how to get it.
"""

from __future__ import annotations

import os
import sys
import warnings

_HERE = os.path.dirname(os.path.abspath(__file__))


def rdzv_bin() -> str:
    """The path of the ``dt-rdzv`` server binary shipped in this installation (it may be
    missing in a build from source: ``dt-rdzv`` then says so)."""
    return os.path.join(_HERE, "_bin", "dt-rdzv")


def get_include() -> str:
    """The directory holding ``dtcomm.h``, the C ABI's header: ``cc -I$(python -c 'import
    dtcomm; print(dtcomm.get_include())') ...``."""
    return _existing(os.path.join(_HERE, "include"), "dtcomm.h")


def get_lib() -> str:
    """The directory holding ``libdtcomm_ffi.so``, the C ABI's library: link with
    ``-L<dir> -ldtcomm_ffi -Wl,-rpath,<dir>``."""
    return _existing(os.path.join(_HERE, "lib"), "libdtcomm_ffi.so")


def _existing(folder: str, name: str) -> str:
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"dtcomm: {path} is not in this installation (a build from source carries only the "
            "Python module: the wheels from scripts/build_wheels.sh carry the C header and "
            "library; or build them with `cargo build --release -p dtcomm-ffi` and use "
            "ffi/include and target/release)"
        )
    return folder


def installed_copies() -> list[str]:
    """Every ``dtcomm`` package directory on ``sys.path``, the imported one first (real paths,
    each once)."""
    seen = [os.path.realpath(_HERE)]
    for entry in sys.path:
        pkg = os.path.realpath(os.path.join(entry or os.getcwd(), "dtcomm"))
        if pkg not in seen and os.path.isfile(os.path.join(pkg, "__init__.py")):
            seen.append(pkg)
    return seen


def warn_if_duplicated() -> None:
    """Warn, naming them, when more than one dtcomm is importable (a wheel and an editable
    build): the one imported is the first on ``sys.path``, and which one that is depends on
    the path's order, so the other's Python files and extension module are silently unused."""
    copies = installed_copies()
    if len(copies) > 1:
        others = ", ".join(copies[1:])
        warnings.warn(
            f"dtcomm is installed more than once: imported {copies[0]}, also on sys.path "
            f"{others} (a wheel and an editable build?); uninstall one "
            "(`pip uninstall dtcomm` removes the one pip knows of)",
            RuntimeWarning,
            stacklevel=3,
        )
