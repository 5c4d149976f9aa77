"""The container image, checked from outside the container as an operator would: health and
a real call of every service, the uid, a SIGTERM drain, TLS and JWT from mounted secret
files with realistic permissions, and a data directory that survives a restart.

Run by ``make image-test`` (after ``scripts/image/build.sh``), under podman or Docker
(``LOOM_IMAGE_TOOL``), never by ``make test``. Containers use the host network: Docker here
runs without a bridge, and podman's default network needs iptables rules these VMs refuse.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from loom.v1 import (
    inbox_pb2,
    inbox_pb2_grpc,
    iterator_pb2,
    iterator_pb2_grpc,
    summary_pb2,
    summary_pb2_grpc,
    templates_pb2,
    templates_pb2_grpc,
    threadweaver_pb2,
    threadweaver_pb2_grpc,
)

from loadtest.server import free_port
from server.config import AuthSettings
from server.runtime.auth import mint_token
from tests.pki import Authority

TOOL = os.environ.get("LOOM_IMAGE_TOOL", "podman")
IMAGE = os.environ.get("LOOM_IMAGE", "localhost/loom/loom:dev")
UID = 10001

pytestmark = pytest.mark.timeout(600)


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TOOL, *args], capture_output=True, text=True, check=check, timeout=300)


class Container:
    """One running container of the image, by name."""

    def __init__(self, name: str, port: int) -> None:
        self.name = name
        self.port = port

    def logs(self) -> str:
        done = _run("logs", self.name, check=False)
        return done.stdout + done.stderr

    def exit_code(self) -> int:
        return int(_run("inspect", self.name, "--format", "{{.State.ExitCode}}").stdout.strip())


def _image_health_check_passes(name: str) -> bool:
    """The image's own HEALTHCHECK (``loom probe --ready``), as the engine runs it: podman on
    demand; Docker on its interval, so its status is awaited (it reads "starting" first)."""
    if TOOL == "podman":
        return _run("healthcheck", "run", name, check=False).returncode == 0
    status = ""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and status != "healthy":
        time.sleep(1)
        status = _run(
            "inspect", name, "--format", "{{if .State.Health}}{{.State.Health.Status}}{{end}}"
        ).stdout.strip()
    return status == "healthy"


def start(name: str, port: int, volume: str, *extra: str) -> Container:
    """`IMAGE` serving on `port` (host network) with `volume` as its data directory."""
    _run(
        "run", "-d", "--name", name, "--network", "host",
        "-e", f"LOOM_SERVER__PORT={port}", "-e", "LOOM_SERVER__METRICS_PORT=0",
        "-v", f"{volume}:/home/loom/data", *extra, IMAGE,
    )  # fmt: skip
    return Container(name, port)


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Container and volume names this test makes, removed afterwards."""
    made: list[str] = []
    yield made
    for name in made:
        _run("rm", "-f", name, check=False)
        _run("volume", "rm", "-f", name, check=False)


def _serving(channel: grpc.Channel, timeout_s: float = 90) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass
        assert time.monotonic() < deadline, "the container never served"
        time.sleep(0.5)


def _every_service(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...] = ()) -> str:
    """One real call of each service; returns the unified thread woven."""
    sent = Timestamp(seconds=1_700_000_000)
    woven = threadweaver_pb2_grpc.ThreadWeaverStub(channel).WeaveMessage(
        threadweaver_pb2.WeaveMessageRequest(
            message=threadweaver_pb2.WovenMessage(
                gid="g", thread_id="t", rfc_message_id="<m@x>", sent_at=sent
            )
        ),
        metadata=metadata,
    )
    inbox_pb2_grpc.InboxStub(channel).PostMessage(
        inbox_pb2.PostMessageRequest(
            thread_id="t", message_id=1, sender_inbox_id="a", recipient_inbox_ids=["b"]
        ),
        metadata=metadata,
    )
    summary_pb2_grpc.SummaryStub(channel).RecordDeliveryEvents(
        summary_pb2.RecordDeliveryEventsRequest(
            message_id="m",
            events=[
                summary_pb2.DeliveryEvent(
                    recipient_id="b", status=summary_pb2.DELIVERY_STATUS_DELIVERED
                )
            ],
        ),
        metadata=metadata,
    )
    templates_pb2_grpc.TemplateInductionStub(channel).GetInductionStats(
        templates_pb2.GetInductionStatsRequest(), metadata=metadata
    )
    with pytest.raises(grpc.RpcError) as missing:
        iterator_pb2_grpc.IteratorStub(channel).GetJob(
            iterator_pb2.GetJobRequest(job_id="0" * 32), metadata=metadata
        )
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND  # answered by the Iterator
    return str(woven.unified_thread_id)


def test_serves_every_service_as_uid_10001_and_drains_on_sigterm(names: list[str]) -> None:
    """Health SERVING and one real call of every service from outside; the server runs as
    uid 10001 (not root); `stop` (SIGTERM) drains and exits 0; the image's own HEALTHCHECK
    (`loom probe --ready`) is in the image and passes as the engine runs it."""
    name = f"loom-it-{uuid.uuid4().hex[:8]}"
    names.append(name)
    port = free_port()
    box = start(name, port, name)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        _serving(channel)
        _every_service(channel)
    assert _run("exec", name, "id", "-u").stdout.strip() == str(UID)
    probe = _run("exec", name, "loom", "probe", "--ready", check=False)
    assert probe.returncode == 0, probe.stderr
    assert _image_health_check_passes(name), _run("inspect", name).stdout
    _run("stop", "-t", "60", name)
    assert box.exit_code() == 0, box.logs()
    logs = box.logs()
    assert '"event": "draining"' in logs, logs
    assert '"event": "stopped"' in logs, logs


def test_tls_and_jwt_from_mounted_secrets_with_realistic_permissions(
    names: list[str], tmp_path: Path
) -> None:
    """Certificate, key and JWT secret mounted read-only, owned by root, group 10001, key and
    secret mode 0640: the server serves TLS, refuses a call without a token and answers one
    with a token of the right scope."""
    ca = Authority(tmp_path / "pki")
    server = ca.issue("server", server=True)
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o750)
    (secrets / "tls.crt").write_bytes(server.cert)
    (secrets / "tls.key").write_bytes(server.key)
    (secrets / "ca.pem").write_bytes(ca.cert)
    (secrets / "jwt.secret").write_text(uuid.uuid4().hex + uuid.uuid4().hex)
    os.chown(secrets, 0, UID)
    for f, mode in (
        ("tls.crt", 0o644),
        ("ca.pem", 0o644),
        ("tls.key", 0o640),
        ("jwt.secret", 0o640),
    ):
        os.chown(secrets / f, 0, UID)
        os.chmod(secrets / f, mode)
    name = f"loom-tls-{uuid.uuid4().hex[:8]}"
    names.append(name)
    port = free_port()
    start(
        name, port, name, "-v", f"{secrets}:/run/secrets:ro",
        "-e", "LOOM_SERVER__TLS_CERT_FILE=/run/secrets/tls.crt",
        "-e", "LOOM_SERVER__TLS_KEY_FILE=/run/secrets/tls.key",
        "-e", "LOOM_AUTH__JWT_SECRET_FILE=/run/secrets/jwt.secret",
        "-e", "LOOM_PROBE__CA_FILE=/run/secrets/ca.pem",
    )  # fmt: skip
    token = mint_token(
        AuthSettings(jwt_secret_file=str(secrets / "jwt.secret")),
        [f"{s}:*" for s in ("threadweaver", "inbox", "summary", "templates", "iterator")],
        300,
    )
    creds = grpc.ssl_channel_credentials(ca.cert)
    options = (("grpc.ssl_target_name_override", "localhost"),)
    with grpc.secure_channel(f"127.0.0.1:{port}", creds, options=options) as channel:
        _serving(channel)
        with pytest.raises(grpc.RpcError) as refused:
            _every_service(channel)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        _every_service(channel, (("authorization", f"Bearer {token}"),))
    probe = _run("exec", name, "loom", "probe", "--ready", check=False)
    assert probe.returncode == 0, probe.stderr


def test_the_data_directory_survives_a_restart(names: list[str]) -> None:
    """A thread woven, the container stopped and started again on the same volume: the
    thread is still there (the volume is writable by the non-root user)."""
    name = f"loom-vol-{uuid.uuid4().hex[:8]}"
    names.append(name)
    port = free_port()
    start(name, port, name)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        _serving(channel)
        ut = _every_service(channel)
    _run("stop", "-t", "60", name)
    _run("start", name)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        _serving(channel)
        read = threadweaver_pb2_grpc.ThreadWeaverStub(channel).GetUnifiedThread(
            threadweaver_pb2.GetUnifiedThreadRequest(gid="g", thread_id="t")
        )
    assert ut in read.unified_thread_ids
    assert read.stats.message_count == 1
