"""Offline checks of deploy/ (docs/kubernetes.md, "What the tests check"): the manifests
against Kubernetes' schemas (kubernetes-validate; the CRDs' templates as core objects), against
the server's ports, routes and variables in the source, and the Deployment's, HA StatefulSet's
and Indexed Job's container commands run here on loopback with deploy/make-secret.sh's output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from native_server import dt_rdzv_bin, stop_process  # tests/conftest.py puts it on sys.path

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read deploy/k8s (pip install pyyaml)")

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
MANIFESTS = sorted(K8S.glob("*.yaml"))
#: The Kubernetes versions validated against: the oldest this material claims, and the newest
#: kubernetes-validate carries (added at run time).
OLDEST_K8S = "1.27"
SECRET_KEYS = {"token", "tls.crt", "tls.key", "fingerprint"}
"""The server's Secret `dt-rdzv` (deploy/make-secret.sh DIR)."""
JOB_SECRET_KEYS = {"token", "fingerprint"}
"""A training job's Secret `dt-rdzv-job-JOB` (deploy/make-secret.sh --job JOB DIR)."""
ETCD_SECRET_KEYS = {"ca.crt", "member.crt", "member.key", "client.crt", "client.key"}
"""The HA manifest's etcd Secret `dt-rdzv-etcd` (deploy/make-secret.sh --etcd DIR)."""
SOURCE_DIRS = ("rdzv", "python/dtcomm", "python/src", "collectives/src", "launch/src")

Doc = dict[str, Any]


# --- reading ------------------------------------------------------------------------------


def load(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_docs() -> list[tuple[str, Doc]]:
    return [(p.name, d) for p in MANIFESTS for d in load(p)]


def pod_specs(node: Any) -> Iterator[Doc]:
    """Every pod spec (a mapping with ``containers``) anywhere in a document."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield node
        for v in node.values():
            yield from pod_specs(v)
    elif isinstance(node, list):
        for v in node:
            yield from pod_specs(v)


def containers(doc: Doc) -> Iterator[tuple[Doc, Doc]]:
    for spec in pod_specs(doc):
        for c in spec.get("initContainers", []) + spec["containers"]:
            yield spec, c


def server_containers() -> list[tuple[str, Doc, Doc]]:
    return [(name, spec, c) for name, d in all_docs() for spec, c in containers(d)
            if c["image"].startswith("dt-rdzv:")]


def train_containers() -> list[tuple[str, Doc, Doc, Doc]]:
    return [(name, d, spec, c) for name, d in all_docs() if name.startswith("train-")
            for spec, c in containers(d)]


def the(name: str, kind: str, doc_name: str | None = None) -> Doc:
    found = [d for d in load(K8S / name) if d["kind"] == kind
             and (doc_name is None or d["metadata"]["name"] == doc_name)]
    assert len(found) == 1, f"{name}: expected one {kind} {doc_name or ''}, found {len(found)}"
    return found[0]


def env_of(c: Doc) -> dict[str, Doc]:
    return {e["name"]: e for e in c.get("env", [])}


def default_ports() -> dict[str, tuple[int, str]]:
    """The server's default ports as `dt-rdzv serve` declares them (its flags in
    rdzv/src/server/config.rs, whose values are the constants of rdzv/proto/src/ports.rs), by
    port name in the manifests, with their protocols."""
    src = (ROOT / "rdzv/src/server/config.rs").read_text()
    consts = dict(re.findall(r"pub const (\w+): u16 = (\d+);",
                             (ROOT / "rdzv/proto/src/ports.rs").read_text()))
    found = dict((field, int(consts[name])) for name, field in re.findall(
        r"default_value_t = dt_rdzv_proto::ports::(\w+)\)\]\s*pub (port|native_port|http_port)"
        r": u16", src))
    assert set(found) == {"port", "native_port", "http_port"}, found
    return {"tcpstore": (found["port"], "TCP"), "native": (found["native_port"], "UDP"),
            "http": (found["http_port"], "TCP")}


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):  # comments go, inside continuations too
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        full = (buf + line).strip()
        buf = ""
        if full:
            word, _, rest = full.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def server_binary() -> str:
    """native_server.dt_rdzv_bin(), else the debug build where .ci/run builds it."""
    binary = dt_rdzv_bin()
    ci = Path.home() / ".cache/dtcomm/target/debug/dt-rdzv"
    if not os.environ.get("DT_RDZV_BIN") and not os.access(binary, os.X_OK) and os.access(ci, os.X_OK):
        return str(ci)
    return binary


def need_binary() -> str:
    binary = server_binary()
    if not os.access(binary, os.X_OK):
        pytest.skip(f"no dt-rdzv binary at {binary} (build it, or set DT_RDZV_BIN)")
    return binary


# --- schemas ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kv() -> Any:
    return pytest.importorskip(
        "kubernetes_validate.utils",
        reason="kubernetes-validate is not installed: the manifests' schema checks need it "
               "(pip install -r requirements-dev.txt)")


def versions(kv: Any) -> list[str]:
    return [OLDEST_K8S, kv.latest_version()]


def check_jobset(kv: Any, doc: Doc, version: str) -> None:
    """JobSet (jobset.x-k8s.io/v1alpha2): its shape, and each replicated Job's template as a
    batch/v1 Job."""
    assert doc["apiVersion"] == "jobset.x-k8s.io/v1alpha2", doc["apiVersion"]
    spec = doc["spec"]
    assert set(spec) <= {"replicatedJobs", "failurePolicy", "successPolicy", "network",
                         "startupPolicy", "suspend", "coordinator", "managedBy",
                         "ttlSecondsAfterFinished"}, sorted(spec)
    rjs = spec["replicatedJobs"]
    assert isinstance(rjs, list) and rjs, "replicatedJobs: a non-empty list"
    for rj in rjs:
        assert set(rj) <= {"name", "replicas", "template", "dependsOn"}, sorted(rj)
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", rj["name"]), rj["name"]
        assert isinstance(rj["replicas"], int) and rj["replicas"] >= 1, rj["replicas"]
        t = rj["template"]
        assert set(t) <= {"metadata", "spec"}, sorted(t)
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {**t.get("metadata", {}), "name": f"{doc['metadata']['name']}-{rj['name']}"},
               "spec": t["spec"]}
        kv.validate(job, version, strict=True)


PYTORCH_REPLICA_TYPES = {"Master", "Worker"}


def check_pytorchjob(kv: Any, doc: Doc, version: str) -> None:
    """PyTorchJob (kubeflow.org/v1): its shape as the training operator wants it, and each
    replica's template as a PodTemplateSpec."""
    assert doc["apiVersion"] == "kubeflow.org/v1", doc["apiVersion"]
    spec = doc["spec"]
    assert set(spec) <= {"pytorchReplicaSpecs", "runPolicy", "elasticPolicy", "nprocPerNode"}
    replicas = spec["pytorchReplicaSpecs"]
    assert replicas and set(replicas) <= PYTORCH_REPLICA_TYPES, sorted(replicas)
    if "Master" in replicas:
        assert replicas["Master"]["replicas"] == 1, "a PyTorchJob has at most one Master"
    for rtype, r in replicas.items():
        assert set(r) <= {"replicas", "restartPolicy", "template"}, (rtype, sorted(r))
        assert isinstance(r["replicas"], int) and r["replicas"] >= 1, (rtype, r["replicas"])
        assert r["restartPolicy"] in ("Always", "OnFailure", "Never", "ExitCode"), rtype
        names = [c["name"] for c in r["template"]["spec"]["containers"]]
        assert "pytorch" in names, f"{rtype}: the operator wants a container named pytorch"
        tmpl = {"apiVersion": "v1", "kind": "PodTemplate",
                "metadata": {"name": f"{doc['metadata']['name']}-{rtype.lower()}"},
                "template": r["template"]}
        kv.validate(tmpl, version, strict=True)


CRD_CHECKS = {"JobSet": check_jobset, "PyTorchJob": check_pytorchjob}


def validate_doc(kv: Any, doc: Doc, version: str) -> None:
    """Raises (a ValidationError or an AssertionError) unless ``doc`` is valid."""
    if doc["kind"] in CRD_CHECKS:
        try:
            kv.validate(doc, version, strict=True)  # should a schema ever appear: use it too
        except kv.SchemaNotFoundError:
            pass
        CRD_CHECKS[doc["kind"]](kv, doc, version)
    else:
        kv.validate(doc, version, strict=True)


def test_there_are_the_manifests_the_docs_name() -> None:
    names = {p.name for p in MANIFESTS}
    assert {"dt-rdzv.yaml", "dt-rdzv-ha.yaml", "train-indexed-job.yaml", "train-jobset.yaml",
            "train-pytorchjob.yaml"} <= names, names
    docs = (ROOT / "docs/kubernetes.md").read_text()
    for n in names:
        assert f"deploy/k8s/{n}" in docs, f"docs/kubernetes.md does not mention {n}"


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_document_validates_against_the_kubernetes_schemas(kv: Any, path: Path) -> None:
    docs = load(path)
    assert docs, f"{path.name}: no document"
    for v in versions(kv):
        for doc in docs:
            try:
                validate_doc(kv, doc, v)
            except kv.ValidationError as e:
                where = ".".join(str(p) for p in e.path)
                pytest.fail(f"{path.name}: {doc['kind']}/{doc['metadata']['name']} "
                            f"(Kubernetes {v}): {where}: {e.message}")


def test_kubernetes_validate_has_no_schema_for_the_crds(kv: Any) -> None:
    """Why the CRDs get their own checks: kubernetes-validate raises for kinds it lacks."""
    for name, kind in (("train-jobset.yaml", "JobSet"), ("train-pytorchjob.yaml", "PyTorchJob")):
        with pytest.raises(kv.SchemaNotFoundError):
            kv.validate(the(name, kind), kv.latest_version(), strict=True)


def broken(path: str, kind: str, where: str, value: Any = None, rename: str = "") -> Doc:
    """The manifest's ``kind`` with the field at dotted ``where`` set to ``value``, or renamed."""
    doc = the(path, kind)
    *parents, last = where.split(".")
    node: Any = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if rename:
        node[rename] = node.pop(last)
    else:
        node[last] = value
    return doc


DEPLOYMENT_C0 = "spec.template.spec.containers.0"
JOBSET_JOB = "spec.replicatedJobs.0.template.spec"
PYTORCH_C0 = "spec.pytorchReplicaSpecs.{}.template.spec.containers.0"


@pytest.mark.parametrize("doc", [
    pytest.param(broken("dt-rdzv.yaml", "Deployment", f"{DEPLOYMENT_C0}.imagePullPolicy",
                        rename="imagePulPolicy"), id="deployment-typo"),
    pytest.param(broken("dt-rdzv.yaml", "Deployment", f"{DEPLOYMENT_C0}.ports.0.containerPort",
                        "29400/tcp"), id="deployment-port-type"),
    pytest.param(broken("train-jobset.yaml", "JobSet", f"{JOBSET_JOB}.template.spec.containers",
                        rename="contaniers"), id="jobset-pod-typo"),
    pytest.param(broken("train-jobset.yaml", "JobSet", f"{JOBSET_JOB}.paralelism", 2),
                 id="jobset-job-typo"),
    pytest.param(broken("train-pytorchjob.yaml", "PyTorchJob",
                        PYTORCH_C0.format("Worker") + ".name", "train"),
                 id="pytorchjob-container-name"),
    pytest.param(broken("train-pytorchjob.yaml", "PyTorchJob",
                        PYTORCH_C0.format("Master") + ".env.0.valueFrom.secretKeyRef.key",
                        rename="keyName"), id="pytorchjob-env-typo"),
])
def test_a_broken_manifest_is_caught(kv: Any, doc: Doc) -> None:
    with pytest.raises((kv.ValidationError, AssertionError)):
        validate_doc(kv, doc, kv.latest_version())


# --- ports, probes, image -----------------------------------------------------------------


def test_the_dockerfile_exposes_the_default_ports_and_checks_healthz() -> None:
    ports = default_ports()
    inst = dockerfile_instructions(DOCKERFILE)
    exposed = {tuple(p.split("/")) for word, rest in inst if word == "EXPOSE" for p in rest.split()}
    assert exposed == {(str(n), proto.lower()) for n, proto in ports.values()}, exposed
    health = [rest for word, rest in inst if word == "HEALTHCHECK"]
    assert len(health) == 1 and "/healthz" in health[0], health
    assert f"DTRDZV_HTTP_PORT:-{ports['http'][0]}" in health[0], health[0]
    assert ("ENTRYPOINT", '["dt-rdzv"]') in inst and ("CMD", '["serve"]') in inst, inst
    users = [rest for word, rest in inst if word == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0", users
    # The image's binary is the wheel's, which scripts/build_wheels.sh builds with etcd (and
    # refuses to build without scripts/features.sh's etcd feature).
    builds = " ".join(rest for word, rest in inst if word == "RUN")
    assert "dtcomm/_bin/dt-rdzv" in builds and ".whl" in builds, builds
    assert ("COPY", "--from=wheel /out/dt-rdzv /usr/local/bin/dt-rdzv") in inst, inst
    wheels = (ROOT / "scripts/build_wheels.sh").read_text()
    assert "scripts/features.sh" in wheels and "-p dt-rdzv" in wheels, wheels
    features = (ROOT / "scripts/features.sh").read_text()
    assert "--features dt-rdzv/etcd" in features and "dt-rdzv/etcd" in wheels
    assert re.search(r"^etcd = \[", (ROOT / "rdzv/Cargo.toml").read_text(), re.M)


def test_the_server_routes_the_probes_and_scrapes_use() -> None:
    http = (ROOT / "rdzv/src/server/http.rs").read_text()
    for route in ("/healthz", "/metrics"):
        assert f'.route("{route}"' in http, route


def test_server_pods_open_the_default_ports_and_probe_healthz() -> None:
    ports = default_ports()
    found = server_containers()
    assert len(found) == 2, [n for n, _, _ in found]  # dt-rdzv.yaml and dt-rdzv-ha.yaml
    for name, spec, c in found:
        assert {p["name"]: (p["containerPort"], p.get("protocol", "TCP")) for p in c["ports"]} \
            == ports, name
        env = env_of(c)
        for var, port in (("DTRDZV_PORT", "tcpstore"), ("DTRDZV_NATIVE_PORT", "native"),
                          ("DTRDZV_HTTP_PORT", "http")):
            assert env[var]["value"] == str(ports[port][0]), (name, var)
        for probe in ("readinessProbe", "livenessProbe"):
            get = c[probe]["httpGet"]
            assert get["path"] == "/healthz" and get["port"] == "http", (name, probe)
        assert c["command"] == ["dt-rdzv"] and c["args"][0] == "serve", name
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert c["resources"]["requests"], name
        assert env["DTRDZV_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "dt-rdzv", "key": "token"}


def test_services_and_scrape_annotations_match_the_server_ports() -> None:
    ports = default_ports()
    services = [(n, d) for n, d in all_docs() if d["kind"] == "Service"
                and d["spec"].get("selector", {}).get("app.kubernetes.io/name", "").startswith("dt-rdzv")
                and "etcd" not in d["metadata"]["name"]]
    assert len(services) == 3, [d["metadata"]["name"] for _, d in services]
    for name, svc in services:
        got = {p["name"]: (p["port"], p.get("protocol", "TCP")) for p in svc["spec"]["ports"]}
        assert got == ports, (name, svc["metadata"]["name"], got)
        for p in svc["spec"]["ports"]:
            assert p.get("targetPort", p["name"]) in (p["name"], p["port"]), p
    objects = [o for _, d in all_docs() for o in (d, d.get("spec", {}).get("template", {}))]
    annotated = [o for o in objects
                 if "prometheus.io/scrape" in o.get("metadata", {}).get("annotations", {})]
    assert len(annotated) >= 3, "the Services and server pods carry the scrape annotations"
    for d in annotated:
        a = d["metadata"]["annotations"]
        assert a == {"prometheus.io/scrape": "true", "prometheus.io/port": str(ports["http"][0]),
                     "prometheus.io/path": "/metrics"}, a


def test_the_ha_servers_name_the_etcd_members_and_advertise_their_pod_ip() -> None:
    etcd = the("dt-rdzv-ha.yaml", "StatefulSet", "dt-rdzv-etcd")
    client = {p["name"]: p["containerPort"] for p in etcd["spec"]["template"]["spec"]["containers"][0]["ports"]}["client"]
    members = [f"{etcd['metadata']['name']}-{i}.{etcd['spec']['serviceName']}:{client}"
               for i in range(etcd["spec"]["replicas"])]
    ha = the("dt-rdzv-ha.yaml", "StatefulSet", "dt-rdzv-ha")
    c = ha["spec"]["template"]["spec"]["containers"][0]
    env = env_of(c)
    assert env["DTRDZV_BACKEND"]["value"] == "etcd://" + ",".join(members)
    names = [e["name"] for e in c["env"]]
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert names.index("POD_IP") < names.index("DTRDZV_ADVERTISE"), "$(POD_IP) must come first"
    assert env["DTRDZV_ADVERTISE"]["value"] == f"$(POD_IP):{default_ports()['native'][0]}"
    headless = the("dt-rdzv-ha.yaml", "Service", ha["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"


# --- names: variables, secrets, dtrun's arguments -----------------------------------------


def source_text() -> str:
    parts = []
    for d in SOURCE_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            if p.suffix in (".rs", ".py") and "target" not in p.parts:
                parts.append(p.read_text(errors="replace"))
    return "\n".join(parts)


def unknown_variables(names: set[str], source: str) -> list[str]:
    """Those of ``names`` (DTRDZV_, DTCOMM_, DTRUN_) no source file spells as a string."""
    ours = {n for n in names if n.startswith(("DTRDZV_", "DTCOMM_", "DTRUN_"))}
    return sorted(n for n in ours if f'"{n}"' not in source)


def test_every_variable_the_manifests_set_exists_in_the_source() -> None:
    names = {e["name"] for _, d in all_docs() for _, c in containers(d) for e in c.get("env", [])}
    assert {"DTRDZV_TOKEN", "DTCOMM_RDZV_TOKEN", "DTCOMM_RDZV_FINGERPRINT"} <= names, names
    source = source_text()
    assert unknown_variables(names, source) == []
    # the check can fail: a variable nobody reads is reported
    assert unknown_variables({"DTRDZV_TOKEN", "DTCOMM_RDZV_NO_SUCH"}, source) == ["DTCOMM_RDZV_NO_SUCH"]


def test_server_variables_are_flags_of_dt_rdzv_serve() -> None:
    binary = need_binary()
    helptext = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True,
                              timeout=30, check=True).stdout
    flags = set(re.findall(r"\[env: (DTRDZV_\w+)=", helptext))
    assert "DTRDZV_TOKEN" in helptext and "DTRDZV_BACKEND" in flags, helptext[:500]
    for name, _, c in server_containers():
        used = {n for n in env_of(c) if n.startswith("DTRDZV_")} - {"DTRDZV_LOG", "DTRDZV_TOKEN"}
        assert used <= flags, (name, sorted(used - flags))


def test_secret_references_name_what_make_secret_writes() -> None:
    refs = [(name, e["valueFrom"]["secretKeyRef"]) for name, d in all_docs()
            for _, c in containers(d) for e in c.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})]
    refs += [(name, {"name": v["secret"]["secretName"], "key": i["key"]})
             for name, d in all_docs() for spec in pod_specs(d)
             for v in spec.get("volumes", []) if "secret" in v for i in v["secret"]["items"]]
    assert len(refs) > 10, refs
    jobs = {name: d["metadata"]["name"] for name, d, _, _ in train_containers()}
    for name, ref in refs:
        if name in jobs:
            # A training pod holds its job's own token, never the server's token or key.
            assert ref["name"] == f"dt-rdzv-job-{jobs[name]}", (name, ref)
            assert ref["key"] in JOB_SECRET_KEYS, (name, ref)
        elif ref["name"] == "dt-rdzv-etcd":
            assert ref["key"] in ETCD_SECRET_KEYS, (name, ref)
        else:
            assert ref["name"] == "dt-rdzv" and ref["key"] in SECRET_KEYS, (name, ref)
    script = (DEPLOY / "make-secret.sh").read_text()
    for key in SECRET_KEYS:
        assert f'"$dir/{key}"' in script, key
    for key in ETCD_SECRET_KEYS:
        assert key.split(".")[0] in script, key


def pods_of(doc: Doc) -> int:
    if doc["kind"] == "Job":
        return int(doc["spec"]["parallelism"])
    if doc["kind"] == "JobSet":
        return sum(rj["replicas"] * rj["template"]["spec"]["parallelism"]
                   for rj in doc["spec"]["replicatedJobs"])
    if doc["kind"] == "PyTorchJob":
        return sum(r["replicas"] for r in doc["spec"]["pytorchReplicaSpecs"].values())
    raise AssertionError(f"not a training job: {doc['kind']}")


def test_training_pods_run_dtrun_against_the_dt_rdzv_service() -> None:
    cli = pytest.importorskip("dtcomm.launcher.cli", reason="dtcomm is not importable (build it: "
                              "scripts/setup.sh) so dtrun's arguments cannot be parsed")
    svc = the("dt-rdzv.yaml", "Service", "dt-rdzv")
    native = next(p for p in svc["spec"]["ports"] if p["name"] == "native")
    found = train_containers()
    assert {n for n, *_ in found} == {"train-indexed-job.yaml", "train-jobset.yaml",
                                      "train-pytorchjob.yaml"}
    for name, doc, _, c in found:
        assert c["command"] == ["dtrun"], name
        parser = cli.parser()
        a = parser.parse_args(c["args"])
        options = {o for action in parser._actions for o in action.option_strings}
        spelled = [t.split("=")[0] for t in c["args"] if t.startswith("-")]
        assert set(spelled) <= options, (name, "not spelled out", sorted(set(spelled) - options))
        assert a.rdzv_backend == "native", name
        assert a.rdzv_endpoint == f"{svc['metadata']['name']}:{native['port']}", name
        assert native["protocol"] == "UDP"
        assert a.rdzv_id == doc["metadata"]["name"], (name, "--rdzv-id is the job's name")
        assert a.nnodes == str(pods_of(doc)), (name, a.nnodes, pods_of(doc))
        env = env_of(c)
        job_secret = f"dt-rdzv-job-{a.rdzv_id}"
        assert env["DTCOMM_RDZV_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": job_secret, "key": "token"}, name
        assert env["DTCOMM_RDZV_FINGERPRINT"]["valueFrom"]["secretKeyRef"] == {
            "name": job_secret, "key": "fingerprint"}, name


# --- running the containers' commands -----------------------------------------------------


@pytest.fixture
def secret_dir(tmp_path: Path) -> Path:
    """What deploy/make-secret.sh writes (the Secret's four values)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: deploy/make-secret.sh needs it")
    out = tmp_path / "secret"
    subprocess.run(["bash", str(DEPLOY / "make-secret.sh"), str(out)], check=True,
                   capture_output=True, text=True, timeout=60)
    assert {p.name for p in out.iterdir()} == SECRET_KEYS
    for key in ("token", "fingerprint"):
        assert not (out / key).read_bytes().endswith(b"\n"), f"{key} ends in a newline"
    # Each training manifest's job Secret, beside it (resolve_env finds it by name).
    for job in sorted({d["metadata"]["name"] for _, d, _, _ in train_containers()}):
        job_dir = tmp_path / f"dt-rdzv-job-{job}"
        subprocess.run(["bash", str(DEPLOY / "make-secret.sh"), "--job", job, str(out),
                        str(job_dir)], check=True, capture_output=True, text=True, timeout=60)
        assert {p.name for p in job_dir.iterdir()} == JOB_SECRET_KEYS
        assert (job_dir / "fingerprint").read_text() == (out / "fingerprint").read_text()
        assert (job_dir / "token").read_text().startswith("dtj1_")
    # The HA manifest's etcd Secret, beside it too.
    etcd_dir = tmp_path / "dt-rdzv-etcd"
    subprocess.run(["bash", str(DEPLOY / "make-secret.sh"), "--etcd", str(etcd_dir)],
                   check=True, capture_output=True, text=True, timeout=60)
    assert {p.name for p in etcd_dir.iterdir()} == ETCD_SECRET_KEYS
    assert (tmp_path / "dt-rdzv-etcd.ca.key").exists(), "the CA's key is kept out of the Secret"
    return out


def secret_file(secret: Path, ref: Doc) -> Path:
    """The file of a secretKeyRef: the server's Secret is ``secret``, a job's Secret
    (``dt-rdzv-job-JOB``) the folder of that name beside it."""
    folder = secret if ref["name"] == "dt-rdzv" else secret.parent / ref["name"]
    return folder / ref["key"]


def resolve_env(spec: Doc, c: Doc, secret: Path, overrides: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: Secret keys from ``secret``,
    the pod's IP and name, mounted Secret files at their local paths, $(VAR) expanded from the
    variables before; then ``overrides`` (loopback, free ports)."""
    mounts: dict[str, Path] = {}
    for vm in c.get("volumeMounts", []):
        vol = next(v for v in spec.get("volumes", []) if v["name"] == vm["name"])
        if "secret" in vol:
            for item in vol["secret"]["items"]:
                ref = {"name": vol["secret"]["secretName"], "key": item["key"]}
                mounts[f"{vm['mountPath']}/{item['path']}"] = secret_file(secret, ref)
    env: dict[str, str] = {}
    for e in c.get("env", []):
        if "value" in e:
            value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        elif "secretKeyRef" in e["valueFrom"]:
            value = secret_file(secret, e["valueFrom"]["secretKeyRef"]).read_text()
        else:
            field = e["valueFrom"]["fieldRef"]["fieldPath"]
            value = {"status.podIP": "127.0.0.1", "metadata.name": "pod-0"}[field]
        env[e["name"]] = str(mounts.get(value, value))
    env.update(overrides)
    return env


def base_env() -> dict[str, str]:
    drop = ("DTRDZV_", "DTCOMM_", "DTRUN_", "RANK", "WORLD_SIZE", "LOCAL_", "MASTER_",
            "TORCHELASTIC", "OCI__")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


LOOPBACK = {"DTRDZV_HOST": "127.0.0.1", "DTRDZV_PORT": "0", "DTRDZV_NATIVE_PORT": "0",
            "DTRDZV_HTTP_PORT": "0"}


def start_container(binary: str, spec: Doc, c: Doc, secret: Path, log: Path,
                    overrides: dict[str, str]) -> subprocess.Popen[str]:
    argv = [binary if c["command"][0] == "dt-rdzv" else c["command"][0], *c["command"][1:],
            *c["args"]]
    env = {**base_env(), **resolve_env(spec, c, secret, {**LOOPBACK, **overrides})}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True,
                            env=env)


def ready_lines(proc: subprocess.Popen[str], log: Path, timeout: float = 60) -> dict[str, str]:
    """tcpstore, native, fingerprint, http from `dt-rdzv serve`'s ready lines."""
    got: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while not {"tcpstore", "native", "http"} <= set(got) and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("dt-rdzv listening "):
            got.update(p.split("=", 1) for p in line.split()[2:])
    if not {"tcpstore", "native", "http"} <= set(got):
        proc.kill()
        pytest.fail(f"dt-rdzv did not start as the container does: {got}\n{log.read_text()}")
    return got


def http_get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def cli(binary: str, *args: str, token: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60,
                          env={**base_env(), "DTRDZV_TOKEN": token})


WORKER = """import os
print("WORKER rank", os.environ["RANK"], "world", os.environ["WORLD_SIZE"],
      "node", os.environ["GROUP_RANK"], flush=True)
"""


def test_the_deployment_container_command_serves(secret_dir: Path, tmp_path: Path) -> None:
    binary = need_binary()
    deployment = the("dt-rdzv.yaml", "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    c = spec["containers"][0]
    log = tmp_path / "dt-rdzv.log"
    proc = start_container(binary, spec, c, secret_dir, log, {})
    try:
        ready = ready_lines(proc, log)
        assert ready["fingerprint"] == (secret_dir / "fingerprint").read_text(), \
            "the server's fingerprint is not the Secret's: members could not pin it"
        assert "no token given" not in log.read_text(), "the Secret's token was not used"
        path = c["livenessProbe"]["httpGet"]["path"]
        assert http_get(f"http://{ready['http']}{path}") == (200, "ok\n")
        status, metrics = http_get(f"http://{ready['http']}/metrics")
        assert status == 200 and metrics.strip(), metrics[:200]
        # The image's HEALTHCHECK command, with the HTTP port this run got.
        health = next(r for w, r in dockerfile_instructions(DOCKERFILE) if w == "HEALTHCHECK")
        cmd = health.split(" CMD ", 1)[1]
        if shutil.which("curl"):
            port = ready["http"].rsplit(":", 1)[1]
            r = subprocess.run(["sh", "-c", cmd], env={**base_env(), "DTRDZV_HTTP_PORT": port},
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, (cmd, r.stderr)
            r = subprocess.run(["sh", "-c", cmd], env={**base_env(), "DTRDZV_HTTP_PORT": "9"},
                               capture_output=True, text=True, timeout=30)
            assert r.returncode != 0, "the HEALTHCHECK passes with nothing listening"
        # A client pinning the Secret's fingerprint, with its token, gets in; others do not.
        token = (secret_dir / "token").read_text()
        fp = (secret_dir / "fingerprint").read_text()
        ok = cli(binary, "jobs", "--native", ready["native"], "--fingerprint", fp, token=token)
        assert ok.returncode == 0, ok.stderr
        other = "sha256:" + ":".join(["00"] * 32)
        bad = cli(binary, "jobs", "--native", ready["native"], "--fingerprint", other,
                  "--timeout", "3s", token=token)
        assert bad.returncode != 0 and "pinned" in bad.stderr, bad.stderr
        # The Indexed Job's Secret holds the token `dt-rdzv token --job` derives: it reads its
        # own job, not the server's list of jobs nor another job.
        job = the("train-indexed-job.yaml", "Job")["metadata"]["name"]
        job_token = (secret_dir.parent / f"dt-rdzv-job-{job}" / "token").read_text()
        derived = cli(binary, "token", "--job", job, token=token)
        assert derived.returncode == 0 and derived.stdout.strip() == job_token, derived
        own = cli(binary, "status", job, "--native", ready["native"], "--fingerprint", fp,
                  token=job_token)  # no such job yet: the token is taken, the job is not there
        assert "UnknownJob" in own.stderr and "BadToken" not in own.stderr, own.stderr
        for args in (["jobs"], ["status", "another-job"]):
            r = cli(binary, *args, "--native", ready["native"], "--fingerprint", fp,
                    "--timeout", "3s", token=job_token)
            assert r.returncode != 0 and "BadToken" in r.stderr, (args, r.stderr)
        # Two dtruns with the Indexed Job's command and environment form one world of 2.
        train_on(ready["native"], secret_dir, tmp_path)
    finally:
        code = stop_process(proc)
    assert code == 0, f"dt-rdzv exited {code} on SIGTERM\n{log.read_text()}"


def train_on(native: str, secret: Path, tmp_path: Path) -> None:
    pytest.importorskip("dtcomm", reason="dtcomm is not importable: dtrun cannot run")
    job = the("train-indexed-job.yaml", "Job")
    spec = job["spec"]["template"]["spec"]
    c = spec["containers"][0]
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    args = list(c["args"])
    args[args.index("--rdzv-endpoint") + 1] = native
    args[-1] = str(script)  # the training script, last
    env = {**base_env(), **resolve_env(spec, c, secret, {"DTCOMM_RDZV_JOIN_TIMEOUT": "60"})}
    procs = [subprocess.Popen([sys.executable, "-m", "dtcomm", *args], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for _ in range(pods_of(job))]
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=120)
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                stop_process(p)  # type: ignore[arg-type]
    assert all(p.returncode == 0 for p in procs), "\n---\n".join(outs)
    lines = sorted(re.findall(r"WORKER rank (\d+) world (\d+)", "".join(outs)))
    assert lines == [("0", "2"), ("1", "2")], "\n---\n".join(outs)


def etcd_for_test(tmp_path: Path, tls: Path) -> Any:
    """A one-member etcd (tests/interop/etcd_servers.py) as the HA manifest runs its members:
    TLS with the member certificate of the ``dt-rdzv-etcd`` Secret in ``tls``, clients
    checked against its CA; or None without etcd."""
    sys.path.insert(0, str(ROOT / "tests" / "interop"))
    try:
        import etcd_servers
    finally:
        sys.path.pop(0)
    if etcd_servers.etcd_binary() is None:
        return None
    return etcd_servers.start_etcd_tls(tmp_path, tls / "ca.crt", tls / "member.crt",
                                       tls / "member.key")


def test_the_ha_container_command_serves_through_etcd(secret_dir: Path, tmp_path: Path) -> None:
    binary = need_binary()
    sts = the("dt-rdzv-ha.yaml", "StatefulSet", "dt-rdzv-ha")
    spec = sts["spec"]["template"]["spec"]
    c = spec["containers"][0]
    # Without etcd: the invocation parses and gets as far as opening the backend (a clap
    # error would exit 2 naming the flag).
    log = tmp_path / "dt-rdzv-ha-noetcd.log"
    proc = start_container(binary, spec, c, secret_dir, log, {
        "DTRDZV_BACKEND": "etcd://127.0.0.1:9", "DTRDZV_BACKEND_TIMEOUT": "500ms"})
    assert proc.wait(timeout=60) == 1, log.read_text()
    text = log.read_text()
    assert "dt-rdzv: --backend etcd://127.0.0.1:9" in text, text
    if "without the `etcd` feature" in text:
        pytest.skip("this dt-rdzv was built without the etcd feature (the image has it: "
                    "deploy/Dockerfile); the HA command parsed and reached --backend")
    # The members' certificate names every member the servers' DTRDZV_BACKEND lists.
    tls = secret_dir.parent / "dt-rdzv-etcd"
    sans = subprocess.run(["openssl", "x509", "-in", str(tls / "member.crt"), "-noout", "-ext",
                           "subjectAltName"], capture_output=True, text=True, check=True).stdout
    for member in env_of(c)["DTRDZV_BACKEND"]["value"].removeprefix("etcd://").split(","):
        assert f"DNS:{member.rsplit(':', 1)[0]}" in sans, (member, sans)
    etcd = etcd_for_test(tmp_path, tls)
    if etcd is None:
        pytest.skip("etcd is not installed (scripts/setup.sh installs etcd-server); the HA "
                    "command parsed and reached --backend")
    try:
        log = tmp_path / "dt-rdzv-ha.log"
        proc = start_container(binary, spec, c, secret_dir, log,
                               {"DTRDZV_BACKEND": f"etcd://{etcd.endpoint}"})
        try:
            ready = ready_lines(proc, log)
            assert http_get(f"http://{ready['http']}/healthz") == (200, "ok\n")
            token = (secret_dir / "token").read_text()
            req = urllib.request.Request(f"http://{ready['http']}/v1/backend",
                                         headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, timeout=10) as r:
                body = r.read().decode()
            # $(POD_IP):29401, as the kubelet expands it
            assert "127.0.0.1:29401" in body, body
        finally:
            code = stop_process(proc)
        assert code == 0, log.read_text()
    finally:
        etcd.stop()
