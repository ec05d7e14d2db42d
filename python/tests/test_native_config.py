"""Resolution of the native rendezvous settings: DTCOMM_RDZV_* over the OCI Data Science
variables over defaults, with provenance; when DTCOMM_RDZV_ENDPOINT means the native protocol."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtcomm import _config, _native
from dtcomm._config import ConfigError

FP = "sha256:" + "ab" * 32
BASE = {"DTCOMM_RDZV_ENDPOINT": "rdzv.example:29401", "DTCOMM_RDZV_FINGERPRINT": FP}


def test_oci_main_maps_onto_the_job() -> None:
    s = _native.settings({**BASE, "OCI__MODE": "MAIN", "OCI__WORKER_COUNT": "3",
                          "OCI__TIMEOUT": "120", "OCI__EPHEMERAL": "True",
                          "JOB_OCID": "ocid1.job.x"})
    assert s.main.value is True and s.main.source == "OCI__MODE"
    assert s.members.value == (4, 4) and s.members.source == "OCI__WORKER_COUNT + 1 (main)"
    assert s.join_timeout.value == 120.0 and s.join_timeout.source == "OCI__TIMEOUT"
    assert s.ephemeral.value is True and s.ephemeral.source == "OCI__EPHEMERAL"
    assert s.job.value == "ocid1.job.x" and s.job.source == "JOB_OCID"
    spec = s.spec()
    assert spec["main"] is True and spec["min_members"] == spec["max_members"] == 4
    assert spec["join_timeout"] == 120.0 and spec["ephemeral"] is True
    assert s.store.value == "rdzv.example:29400"


@pytest.mark.parametrize("value,expected", [("1", True), ("true", True), ("None", False),
                                            ("0", False), ("False", False)])
def test_oci_ephemeral_parses_loosely(value: str, expected: bool) -> None:
    s = _native.settings({**BASE, "OCI__MODE": "WORKER", "OCI__EPHEMERAL": value})
    assert s.ephemeral.value is expected
    assert s.main.value is False
    assert s.members.value == (2, 2) and "OCI default" in s.members.source


def test_dtcomm_variables_win_over_oci(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("s3cret\nignored\n")
    s = _native.settings({**BASE, "OCI__MODE": "WORKER", "OCI__WORKER_COUNT": "3",
                          "OCI__TIMEOUT": "120", "OCI__EPHEMERAL": "1", "JOB_OCID": "ocid",
                          "DTCOMM_RDZV_MEMBERS": "2:8", "DTCOMM_RDZV_JOIN_TIMEOUT": "30",
                          "DTCOMM_RDZV_EPHEMERAL": "0", "DTCOMM_RUN_ID": "mine",
                          "DTCOMM_RDZV_TOKEN_FILE": str(tok), "DTCOMM_RDZV_STORE": "[::1]:5000",
                          "DTCOMM_RDZV_MEMBER": "m7", "DTCOMM_RDZV_NODE": "n3"})
    assert s.members.value == (2, 8) and s.members.source == "DTCOMM_RDZV_MEMBERS"
    assert s.join_timeout.value == 30.0 and s.ephemeral.value is False
    assert s.job.value == "mine" and s.token.value == "s3cret"
    assert s.store.value == "[::1]:5000"
    assert (s.member.value, s.node.value) == ("m7", "n3")


def test_settings_errors_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="DTCOMM_RDZV_FINGERPRINT"):
        _native.settings({"DTCOMM_RDZV_ENDPOINT": "h:29401"})
    with pytest.raises(ConfigError, match="DTCOMM_RDZV_MEMBERS"):
        _native.settings({**BASE, "DTCOMM_RDZV_MEMBERS": "3:2"})
    with pytest.raises(ConfigError, match="OCI__WORKER_COUNT"):
        _native.settings({**BASE, "OCI__MODE": "MAIN", "OCI__WORKER_COUNT": "many"})
    with pytest.raises(ConfigError, match="OCI__TIMEOUT"):
        _native.settings({**BASE, "OCI__TIMEOUT": "soon"})


def test_when_the_endpoint_is_native() -> None:
    assert _native.is_native({}, "h:29401").value
    assert not _native.is_native({}, "h:29400").value
    assert _native.is_native({"DTCOMM_RDZV_FINGERPRINT": FP}, "h:7000").value
    assert _native.is_native({"DTCOMM_RDZV_BACKEND": "native"}, "h:7000").value
    assert not _native.is_native({"DTCOMM_RDZV_BACKEND": "store"}, "h:29401").value
    with pytest.raises(ConfigError, match="DTCOMM_RDZV_BACKEND"):
        _native.is_native({"DTCOMM_RDZV_BACKEND": "etcd"}, "h:29401")


def test_resolve_native_leaves_ranks_to_the_server() -> None:
    r = _config.resolve(env={**BASE, "OCI__MODE": "WORKER", "OCI__WORKER_COUNT": "2"})
    assert r.native.value and r.rank.value is None and "native rendezvous" in r.rank.source
    assert r.endpoint.value == "rdzv.example:29401" and r.host_store.value is False
    # a launcher that assigned ranks already did the rendezvous: its store is used
    r = _config.resolve(env={**BASE, "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1",
                             "MASTER_PORT": "29500"})
    assert not r.native.value and "RANK" in r.native.source
    assert r.endpoint.value == "10.0.0.1:29500" and r.rank.value == 1
    # the TCPStore protocol on the same variable, as dtrun's workers have it
    r = _config.resolve(env={"DTCOMM_RDZV_ENDPOINT": "127.0.0.1:4000", "DTCOMM_RANK": "0",
                             "DTCOMM_WORLD_SIZE": "2"})
    assert not r.native.value and r.endpoint.value == "127.0.0.1:4000"


def test_reconnect_window_from_the_environment() -> None:
    base = {"DTCOMM_RDZV_ENDPOINT": "127.0.0.1:29401", "DTCOMM_RDZV_FINGERPRINT": "sha256:" + "00" * 32}
    s = _native.settings(env=base)
    assert (s.reconnect.value, s.reconnect.source) == (60.0, "default")
    s = _native.settings(env={**base, "DTCOMM_RDZV_RECONNECT": "0"})
    assert (s.reconnect.value, s.reconnect.source) == (0.0, "DTCOMM_RDZV_RECONNECT")
    with pytest.raises(ConfigError, match="DTCOMM_RDZV_RECONNECT"):
        _native.settings(env={**base, "DTCOMM_RDZV_RECONNECT": "soon"})
