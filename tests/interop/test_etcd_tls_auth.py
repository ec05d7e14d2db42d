"""`dt-rdzv serve --backend` against an etcd that asks for TLS, a client certificate and a
user (etcd 3.4 from Debian's `etcd-server`, started here on loopback ports, stopped by PID):
what `deploy/k8s/dt-rdzv-ha.yaml` runs (issue 42: the HA manifest's etcd had no auth or TLS and
answered any pod). The certificates are made with openssl, the user and `auth enable` through
etcd's own JSON gateway.

A server with the CA, its client certificate and the user's password shares a job through that
etcd; one missing any of them is refused at start, naming the etcd and why."""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from etcd_servers import etcd_binary, start_etcd_tls
from native_server import dt_rdzv_bin, stop_process

pytestmark = [
    pytest.mark.skipif(etcd_binary() is None,
                       reason="etcd not installed (scripts/setup.sh installs etcd-server)"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed"),
]

PASSWORD = "s3cret-for-the-test"


@dataclass
class Pki:
    """A CA, etcd's server certificate (for 127.0.0.1) and dt-rdzv's client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d: Path) -> Pki:
    d.mkdir()
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-days", "2", "-subj", f"/CN=test {ca}", "-keyout", f"{ca}.key",
                "-out", f"{ca}.crt", cwd=d)
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
                      ("client", "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-subj", f"/CN=dt-rdzv-{name}", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", cwd=d)
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out",
                f"{name}.crt", cwd=d)
    return Pki(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt",
               d / "client.key", d / "other-ca.crt")


def gateway(url: str, path: str, body: dict[str, object], pki: Pki,
            token: str | None = None) -> dict[str, object]:
    """One call of etcd's JSON gateway (``/v3/...``) with the client certificate."""
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = token
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


@pytest.fixture
def secure_etcd(tmp_path: Path) -> Iterator[tuple[str, Pki]]:
    """A one-member etcd on https with --client-cert-auth, user root (role root) and auth
    enabled; its endpoint and the certificates."""
    pki = make_pki(tmp_path / "pki")
    etcd = start_etcd_tls(tmp_path, pki.ca, pki.server_cert, pki.server_key)
    url = f"https://{etcd.endpoint}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                gateway(url, "/v3/auth/role/add", {"name": "root"}, pki)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd did not answer\n{etcd.log()}") from None
                time.sleep(0.2)
        gateway(url, "/v3/auth/user/add", {"name": "root", "password": PASSWORD}, pki)
        gateway(url, "/v3/auth/user/grant", {"user": "root", "role": "root"}, pki)
        gateway(url, "/v3/auth/enable", {}, pki)
        # Auth is on: a call without a token is refused (by name: the client certificate's CN
        # is no user).
        with pytest.raises(urllib.error.HTTPError):
            gateway(url, "/v3/kv/range", {"key": base64.b64encode(b"x").decode()}, pki)
        yield etcd.endpoint, pki
    finally:
        etcd.stop()


def serve(tmp_path: Path, endpoint: str, *access: str,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str] | None:
    """``dt-rdzv serve --backend etcd://ENDPOINT ACCESS``: None if it came up (then it is
    stopped after ``/v1/backend`` was checked), else its finished run."""
    args = ["--host", "127.0.0.1", "--port", "0", "--native-port", "0", "--http-port", "0",
            "--no-auth", "--backend", f"etcd://{endpoint}", "--backend-timeout", "3s", *access]
    log = tmp_path / f"serve-{len(list(tmp_path.glob('serve-*.log')))}.log"
    proc = subprocess.Popen([dt_rdzv_bin(), "serve", *args], stdout=subprocess.PIPE,
                            stderr=open(log, "w"), text=True,
                            env={**os.environ, **(env or {}), "DTRDZV_LOG": "info"})
    assert proc.stdout is not None
    http = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("dt-rdzv listening http="):
            http = line.strip().split("=", 1)[1]
            break
    if http is None:
        proc.wait(timeout=30)
        return subprocess.CompletedProcess(args, proc.returncode, "", log.read_text())
    try:
        with urllib.request.urlopen(f"http://{http}/v1/backend", timeout=10) as r:
            backend = json.loads(r.read())
        # A lease granted and kept: calls etcd takes only from its user over TLS.
        assert str(backend.get("backend", "")).startswith("etcd://"), backend
        assert backend.get("lease") and not backend.get("degraded"), backend
    finally:
        assert stop_process(proc) == 0, log.read_text()  # type: ignore[arg-type]
    return None


def test_a_server_with_the_ca_its_certificate_and_the_user_shares_through_etcd(
        secure_etcd: tuple[str, Pki], tmp_path: Path) -> None:
    if not Path(dt_rdzv_bin()).exists():
        pytest.skip("dt-rdzv is not built")
    endpoint, pki = secure_etcd
    pw = tmp_path / "password"
    pw.write_text(PASSWORD + "\n")
    full = ["--backend-cacert", str(pki.ca), "--backend-cert", str(pki.client_cert),
            "--backend-key", str(pki.client_key), "--backend-user", "root"]
    r = serve(tmp_path, endpoint, *full, "--backend-password-file", str(pw))
    if r is not None and "without the `etcd` feature" in r.stderr:
        pytest.skip("dt-rdzv built without the etcd feature")
    assert r is None, r.stderr
    # The password from the environment, as the manifest gives it.
    assert serve(tmp_path, endpoint, *full, env={"DTRDZV_BACKEND_PASSWORD": PASSWORD}) is None


@pytest.mark.parametrize("missing", ["password", "user", "client certificate", "CA",
                                     "TLS at all", "the right CA"])
def test_a_server_missing_any_part_is_refused_at_start_naming_etcd(
        secure_etcd: tuple[str, Pki], tmp_path: Path, missing: str) -> None:
    endpoint, pki = secure_etcd
    cert = ["--backend-cert", str(pki.client_cert), "--backend-key", str(pki.client_key)]
    ca = ["--backend-cacert", str(pki.ca)]
    user = ["--backend-user", "root"]
    env = {"DTRDZV_BACKEND_PASSWORD": PASSWORD}
    access, why = {
        "password": (ca + cert + user, "needs a password"),
        "user": (ca + cert, ""),
        "client certificate": (ca + user, ""),
        "CA": (cert + user, ""),
        "TLS at all": (user, ""),
        "the right CA": (["--backend-cacert", str(pki.other_ca)] + cert + user, ""),
    }[missing]
    r = serve(tmp_path, endpoint, *access, env=env if "--backend-user" in access and
              missing != "password" else {})
    assert r is not None, f"dt-rdzv came up without {missing}"
    if "without the `etcd` feature" in r.stderr:
        pytest.skip("dt-rdzv built without the etcd feature")
    assert r.returncode != 0
    if why:
        assert why in r.stderr, r.stderr
    else:
        assert f"etcd://{endpoint}" in r.stderr, r.stderr
