"""``dtcomm.cuda_status()``: an answer, never an exception, on a machine without a GPU.

The venv's NCCL (torch's ``nvidia-nccl-cu13`` wheel) is found with its version; the driver
``libcuda.so.1`` is absent here, so ``usable`` is False with the reason. Cases that need a
different environment (``DTCOMM_NCCL_LIBRARY``, ``VIRTUAL_ENV`` unset, torch imported first)
run in a subprocess, since a loaded NCCL stays loaded.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import os
import subprocess
import sys
from typing import Any

import pytest

import dtcomm
from dtgroup import WORKERS

KEYS = {"usable", "reason", "device_count", "built_with_cuda", "cuda_api", "driver", "nccl"}
LIB_KEYS = {"found", "path", "version", "source", "error", "features", "tried"}


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _nccl_wheel_version() -> str | None:
    try:
        return importlib.metadata.version("nvidia-nccl-cu13")
    except importlib.metadata.PackageNotFoundError:
        return None


def _status_in_subprocess(
    env_changes: dict[str, str | None], torch_first: bool = False, with_lines: bool = False
) -> Any:
    env = dict(os.environ)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    argv = [sys.executable, str(WORKERS / "cuda_status_json.py")]
    if torch_first:
        argv.append("--torch-first")
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    status = json.loads(lines[-1])
    return (status, lines[:-1]) if with_lines else status


def test_the_shape_of_the_answer() -> None:
    status = dtcomm.cuda_status()
    assert set(status) == KEYS
    assert set(status["driver"]) == LIB_KEYS and set(status["nccl"]) == LIB_KEYS
    assert isinstance(status["usable"], bool)
    assert status["usable"] == (status["reason"] is None)
    assert status["built_with_cuda"] is True, "the wheel is built with the feature `cuda`"
    assert status["cuda_api"] == "12.8"
    # Calling again gives the same answer (the libraries stay loaded).
    again = dtcomm.cuda_status()
    assert (again["usable"], again["nccl"]["path"]) == (status["usable"], status["nccl"]["path"])


@pytest.mark.skipif(_driver_present(), reason="this machine has an NVIDIA driver")
def test_without_a_driver_it_is_unusable_and_says_why() -> None:
    status = dtcomm.cuda_status()
    driver = status["driver"]
    assert driver["found"] is False
    assert driver["path"] is None and driver["version"] is None
    assert driver["error"].startswith("libcuda.so.1 not found: no NVIDIA driver on this machine")
    assert status["device_count"] is None
    assert status["usable"] is False
    assert driver["error"] in status["reason"]


@pytest.mark.skipif(_nccl_wheel_version() is None, reason="no nvidia-nccl-cu13 wheel installed")
def test_the_venvs_nccl_is_found_with_its_version() -> None:
    nccl = dtcomm.cuda_status()["nccl"]
    assert nccl["found"] is True, nccl["error"]
    assert nccl["error"] is None
    assert nccl["version"] == _nccl_wheel_version()
    assert nccl["version"].startswith("2.30.")
    assert nccl["path"].endswith("site-packages/nvidia/nccl/lib/libnccl.so.2")
    assert os.path.exists(nccl["path"])
    assert "ncclCommSplit" in nccl["features"] and "ncclSend" in nccl["features"]
    assert nccl["source"] in {"VIRTUAL_ENV", "python prefix", "already loaded"}


def test_a_missing_nccl_library_is_named() -> None:
    status = _status_in_subprocess({"DTCOMM_NCCL_LIBRARY": "/nonexistent"})
    nccl = status["nccl"]
    assert nccl["found"] is False
    assert nccl["path"] is None and nccl["version"] is None
    assert nccl["error"].startswith("DTCOMM_NCCL_LIBRARY=/nonexistent: dlopen failed:")
    assert "/nonexistent" in status["reason"]
    assert status["usable"] is False


@pytest.mark.skipif(_nccl_wheel_version() is None, reason="no nvidia-nccl-cu13 wheel installed")
def test_an_unactivated_venv_finds_its_nccl_through_sys_prefix() -> None:
    status = _status_in_subprocess(
        {"VIRTUAL_ENV": None, "DTCOMM_NCCL_LIBRARY": None, "DTCOMM_NCCL_SEARCH_PATH": None}
    )
    assert status["nccl"]["found"] is True, status["nccl"]["error"]
    assert status["nccl"]["source"] == "python prefix"
    assert status["nccl"]["path"].startswith(os.path.realpath(sys.prefix))


@pytest.mark.skipif(_nccl_wheel_version() is None, reason="no nvidia-nccl-cu13 wheel installed")
def test_inside_torch_it_reports_torchs_nccl() -> None:
    # Whether importing torch maps libnccl.so.2 (without a GPU it may not), printed as a line
    # of its own before the status.
    env = {"DTCOMM_NCCL_LIBRARY": None, "DTCOMM_NCCL_SEARCH_PATH": None}
    status, lines = _status_in_subprocess(env, torch_first=True, with_lines=True)
    assert status["nccl"]["found"] is True, status["nccl"]["error"]
    assert status["nccl"]["version"] == _nccl_wheel_version()
    if "TORCH_NCCL mapped" in lines:
        assert status["nccl"]["source"] == "already loaded"
