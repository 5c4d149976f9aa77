"""The Helm chart (deploy/helm/loom) lints, renders, and every object it renders is valid.

No cluster runs here: ``helm lint --strict`` and ``helm template`` render the chart offline,
``deploy/validate.mjs`` checks each object against the Kubernetes API's schemas (npm
``kubernetes-models``), and the assertions below are what an operator reading the manifests
would check. helm, node and the schema packages come from ``scripts/tools/install.sh``
(``make tools``); a missing one fails these tests rather than skipping them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from server.config import ServerSettings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "loom"
VALIDATOR = ROOT / "deploy" / "validate.mjs"
TLS_JWT_VALUES = CHART / "ci" / "tls-jwt-values.yaml"
CACHE = Path(os.environ.get("LOOM_CACHE_DIR") or Path.home() / ".cache" / "loom")
TOOLS_BIN = CACHE / "bin"
UID = 10001
MISSING = "is not installed: run scripts/tools/install.sh (make tools)"

Manifest = dict[str, Any]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(TOOLS_BIN)) or shutil.which(name)
    assert found, f"{name} {MISSING}"
    return found


def _run(args: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def _template(*options: str) -> subprocess.CompletedProcess[str]:
    return _run([_tool("helm"), "template", "loom", str(CHART), "--namespace", "loom", *options])


def _validate(stream: str) -> subprocess.CompletedProcess[str]:
    return _run([_tool("node"), str(VALIDATOR), "--json"], stdin=stream)


def _render_valid(*options: str) -> list[Manifest]:
    rendered = _template(*options)
    assert rendered.returncode == 0, rendered.stderr
    checked = _validate(rendered.stdout)
    assert checked.returncode == 0, checked.stderr
    objects: list[Manifest] = json.loads(checked.stdout)
    return objects


@pytest.fixture(scope="module")
def default_objects() -> list[Manifest]:
    return _render_valid()


@pytest.fixture(scope="module")
def secure_objects() -> list[Manifest]:
    return _render_valid("-f", str(TLS_JWT_VALUES))


def _one(objects: list[Manifest], kind: str) -> Manifest:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects rendered"
    return found[0]


def _container(objects: list[Manifest]) -> Manifest:
    containers = _one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["loom"]
    return dict(containers[0])


def _env(objects: list[Manifest]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in _container(objects)["env"]}


def test_helm_lint_strict_passes() -> None:
    """`helm lint --strict` finds nothing, with the defaults and with TLS + JWT values."""
    helm = _tool("helm")
    for options in ([], ["-f", str(TLS_JWT_VALUES)]):
        result = _run([helm, "lint", "--strict", str(CHART), *options])
        assert result.returncode == 0, result.stdout + result.stderr


def test_default_render_is_valid_and_complete(default_objects: list[Manifest]) -> None:
    """`helm template` with the defaults renders a Deployment, Service, PodDisruptionBudget
    and ServiceAccount, each valid against the Kubernetes schemas (the fixture validates)."""
    kinds = sorted(o["kind"] for o in default_objects)
    assert kinds == ["Deployment", "PodDisruptionBudget", "Service", "ServiceAccount"]
    for obj in default_objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "loom"
        assert labels["app.kubernetes.io/instance"] == "loom"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
    assert _one(default_objects, "Deployment")["spec"]["replicas"] == 2


def test_tls_jwt_render_is_valid(secure_objects: list[Manifest]) -> None:
    """The TLS + JWT example values render objects that all pass schema validation too."""
    assert {o["kind"] for o in secure_objects} >= {"Deployment", "Service"}
    assert _one(secure_objects, "Deployment")["spec"]["replicas"] == 3


def test_probes_run_loom_probe(
    default_objects: list[Manifest], secure_objects: list[Manifest]
) -> None:
    """Readiness is `loom probe --ready`, liveness and start-up `loom probe --live`, as exec
    probes (the native grpc probe cannot speak TLS), with or without TLS."""
    for objects in (default_objects, secure_objects):
        container = _container(objects)
        assert container["readinessProbe"]["exec"]["command"] == ["loom", "probe", "--ready"]
        assert container["livenessProbe"]["exec"]["command"] == ["loom", "probe", "--live"]
        assert container["startupProbe"]["exec"]["command"] == ["loom", "probe", "--live"]


def test_pod_runs_as_uid_10001_locked_down(default_objects: list[Manifest]) -> None:
    """The pod runs as the image's uid/gid 10001, non-root, no privilege escalation, no
    capabilities, on a read-only root filesystem with /tmp and the data dir as volumes."""
    pod = _one(default_objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == UID
    assert pod["securityContext"]["runAsGroup"] == UID
    assert pod["securityContext"]["fsGroup"] == UID
    assert pod["automountServiceAccountToken"] is False
    container = _container(default_objects)
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    data_dir = _env(default_objects)["LOOM_SQLITE__DATA_DIR"]
    assert data_dir == "/home/loom/data"
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert "emptyDir" in volumes[mounts[data_dir]]
    account = _one(default_objects, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False


def test_resources_requested_and_limited(default_objects: list[Manifest]) -> None:
    """The container requests and limits CPU and memory (the scheduler places it; a leak
    cannot take the node)."""
    resources = _container(default_objects)["resources"]
    for section in ("requests", "limits"):
        assert set(resources[section]) >= {"cpu", "memory"}, section


def test_disruption_budget_covers_the_pods(default_objects: list[Manifest]) -> None:
    """A PodDisruptionBudget selects the Deployment's pods and lets at most one go at once."""
    pdb = _one(default_objects, "PodDisruptionBudget")
    deployment = _one(default_objects, "Deployment")
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert pdb["spec"].get("maxUnavailable") == 1 or pdb["spec"].get("minAvailable") == 1


def test_service_and_metrics_annotations(default_objects: list[Manifest]) -> None:
    """The Service exposes gRPC on 50051 (appProtocol grpc) and metrics; the pod template's
    prometheus.io annotations name the port the server's metrics listen on."""
    service = _one(default_objects, "Service")
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports["grpc"]["port"] == 50051
    assert ports["grpc"]["appProtocol"] == "grpc"
    assert ports["metrics"]["port"] == 9464
    template = _one(default_objects, "Deployment")["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    env = _env(default_objects)
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == env["LOOM_SERVER__METRICS_PORT"] == "9464"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert env["LOOM_SERVER__METRICS_HOST"] == env["LOOM_SERVER__HOST"] == "0.0.0.0"
    container_ports = {p["name"]: p["containerPort"] for p in _container(default_objects)["ports"]}
    assert container_ports == {"grpc": 50051, "metrics": 9464}
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()


def test_secrets_mounted_read_only(secure_objects: list[Manifest]) -> None:
    """With TLS and JWT values, the Secrets are mounted read-only with mode 0440 and the
    LOOM_* variables point at the mounted files."""
    pod = _one(secure_objects, "Deployment")["spec"]["template"]["spec"]
    container = _container(secure_objects)
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    env = _env(secure_objects)
    expected = {
        "tls": ("loom-tls", "/run/secrets/tls"),
        "jwt": ("loom-jwt", "/run/secrets/jwt"),
    }
    for name, (secret, path) in expected.items():
        assert mounts[name]["readOnly"] is True
        assert mounts[name]["mountPath"] == path
        assert volumes[name]["secret"]["secretName"] == secret
        assert volumes[name]["secret"]["defaultMode"] == 0o440
    files = {
        f"/run/secrets/{name}/{item['path']}"
        for name in expected
        for item in volumes[name]["secret"]["items"]
    }
    assert env["LOOM_SERVER__TLS_CERT_FILE"] == "/run/secrets/tls/tls.crt"
    assert env["LOOM_SERVER__TLS_KEY_FILE"] == "/run/secrets/tls/tls.key"
    assert env["LOOM_PROBE__CA_FILE"] == "/run/secrets/tls/ca.crt"
    assert env["LOOM_AUTH__JWT_PUBLIC_KEY_FILE"] == "/run/secrets/jwt/issuer.pub"
    assert "LOOM_AUTH__JWT_SECRET_FILE" not in env
    for variable in (
        "LOOM_SERVER__TLS_CERT_FILE",
        "LOOM_SERVER__TLS_KEY_FILE",
        "LOOM_PROBE__CA_FILE",
        "LOOM_AUTH__JWT_PUBLIC_KEY_FILE",
    ):
        assert env[variable] in files, variable
    assert env["LOOM_STORAGE__THREADWEAVER_STORE"] == "cassandra"


def test_termination_grace_exceeds_the_drain(
    default_objects: list[Manifest], secure_objects: list[Manifest]
) -> None:
    """terminationGracePeriodSeconds exceeds the preStop sleep plus the server's drain
    (LOOM_SERVER__GRACE_S, whose default the chart keeps), so SIGKILL never cuts a drain."""
    assert float(_env(default_objects)["LOOM_SERVER__GRACE_S"]) == ServerSettings().grace_s
    for objects in (default_objects, secure_objects):
        pod = _one(objects, "Deployment")["spec"]["template"]["spec"]
        pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
        assert pre_stop[0] == "sleep"
        drain = float(pre_stop[1]) + float(_env(objects)["LOOM_SERVER__GRACE_S"])
        assert pod["terminationGracePeriodSeconds"] > drain


def test_chart_refuses_unsafe_values() -> None:
    """The chart will not render a grace period shorter than the drain, nor two JWT keys."""
    short = _template("--set", "terminationGracePeriodSeconds=12")
    assert short.returncode != 0
    assert "terminationGracePeriodSeconds" in short.stderr
    both = _template(
        "--set", "auth.jwtSecret.secretName=a", "--set", "auth.jwtPublicKey.secretName=b"
    )
    assert both.returncode != 0
    assert "not both" in both.stderr


def _notes(tmp_path: Path, *options: str) -> str:
    # helm template never renders NOTES.txt and helm lint reports its errors only as INFO,
    # so a copy of the chart renders it as the value of an ordinary template.
    chart = tmp_path / "loom"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "notes.yaml").write_text(
        '{{- define "notes" }}' + notes + '{{- end }}\nnotes: {{ include "notes" . | toJson }}\n'
    )
    helm = _tool("helm")
    result = _run(
        [helm, "template", "loom", str(chart), "--show-only", "templates/notes.yaml", *options]
    )
    assert result.returncode == 0, result.stderr
    text: str = json.loads(result.stdout.split("notes: ", 1)[1])
    return text


def test_notes_say_how_to_reach_it_and_warn_of_sqlite(tmp_path: Path) -> None:
    """What `helm install` prints renders, and warns when several replicas would each keep
    their own SQLite state; with every store distributed (the example values) it does not."""
    default = _notes(tmp_path / "default")
    assert "rollout status deployment/loom" in default
    assert "PLAINTEXT" in default
    assert "WARNING" in default
    assert "THREADWEAVER_STORE" in default
    secure = _notes(tmp_path / "secure", "-f", str(TLS_JWT_VALUES))
    assert "TLS, Secret loom-tls" in secure
    assert "LOOM_AUTH__JWT_PUBLIC_KEY_FILE" in secure
    assert "WARNING" not in secure


INVALID_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: broken}
spec:
  replicas: two
  selector: {matchLabels: {app: broken}}
  template:
    metadata: {labels: {app: broken}}
    spec:
      containers: [{name: loom, image: loom}]
"""


def test_validator_rejects_invalid_objects() -> None:
    """The validator fails on a Deployment whose replicas is a string and on a kind the
    Kubernetes API does not have, so a passing validation means something."""
    broken = _validate(INVALID_DEPLOYMENT)
    assert broken.returncode == 1, broken.stderr
    assert "INVALID apps/v1/Deployment broken" in broken.stderr
    assert "/spec/replicas" in broken.stderr
    fixed = _validate(INVALID_DEPLOYMENT.replace("replicas: two", "replicas: 2"))
    assert fixed.returncode == 0, fixed.stderr
    unknown = _validate(INVALID_DEPLOYMENT.replace("kind: Deployment", "kind: Deploymnet"))
    assert unknown.returncode == 1, unknown.stderr
    assert "unknown apiVersion/kind" in unknown.stderr
