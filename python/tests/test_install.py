"""What an installation without the wheel's extra files says (a build from source, an
editable install), and the warning for two dtcomm on sys.path. The wheel itself is tested in a
fresh venv by scripts/test_wheel.sh."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dtcomm import _install, _rdzv_cli


def test_a_missing_server_binary_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "_bin" / "dt-rdzv"
    monkeypatch.setattr(_rdzv_cli, "rdzv_bin", lambda: str(missing))
    assert _rdzv_cli.main() == 127
    err = capsys.readouterr().err
    assert f"{missing} is missing" in err and "cargo install --path rdzv" in err, err


def test_a_server_binary_that_is_not_executable_is_named(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "dt-rdzv"
    plain.write_text("#!/bin/sh\nexit 0\n")
    plain.chmod(0o644)
    monkeypatch.setattr(_rdzv_cli, "rdzv_bin", lambda: str(plain))
    assert _rdzv_cli.main() == 126
    assert f"{plain} is not executable" in capsys.readouterr().err


def test_the_server_binary_replaces_the_process(tmp_path: Path) -> None:
    """The command execs the binary with its arguments (the caller's PID is the server's)."""
    fake = tmp_path / "dt-rdzv"
    fake.write_text("#!/bin/sh\necho \"pid $$ args $*\"\n")
    fake.chmod(0o755)
    code = ("import sys, os; from dtcomm import _rdzv_cli; "
            f"_rdzv_cli.rdzv_bin = lambda: {str(fake)!r}; "
            "print('pid', os.getpid(), flush=True); "
            "sys.argv = ['dt-rdzv', 'serve', '--port', '0']; "
            "sys.exit(_rdzv_cli.main())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.split("\n")[:2]
    assert second == f"{first} args serve --port 0", out.stdout


def test_c_files_missing_are_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_install, "_HERE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"include/dtcomm\.h is not in this installation"):
        _install.get_include()
    with pytest.raises(FileNotFoundError, match=r"lib/libdtcomm_ffi\.so is not in this"):
        _install.get_lib()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libdtcomm_ffi.so").write_bytes(b"")
    assert _install.get_lib() == str(tmp_path / "lib")


def test_a_second_dtcomm_on_the_path_is_named(tmp_path: Path) -> None:
    other = tmp_path / "other" / "dtcomm"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    code = (f"import sys; sys.path.append({str(tmp_path / 'other')!r}); import dtcomm; "
            "print(dtcomm.__file__)")
    out = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    imported = os.path.dirname(os.path.realpath(out.stdout.strip()))
    assert "installed more than once" in out.stderr, out.stderr
    assert f"imported {imported}" in out.stderr and str(other) in out.stderr, out.stderr


def test_one_copy_is_quiet() -> None:
    """Only the imported copy on the path (no site: a .pth of another install stays out)."""
    import dtcomm

    top = os.path.dirname(os.path.dirname(os.path.realpath(dtcomm.__file__)))
    out = subprocess.run([sys.executable, "-S", "-W", "error::RuntimeWarning", "-c",
                          "import dtcomm"], env={**os.environ, "PYTHONPATH": top},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "more than once" not in out.stderr, out.stderr
