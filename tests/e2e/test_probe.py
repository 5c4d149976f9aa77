"""`loom probe`, the health check of Loom's container and of an orchestrator's probes.

Each test starts a real `loom serve` (embedded engine) and runs `loom probe` as a process,
as Docker's HEALTHCHECK or a Kubernetes exec probe would: exit 0 only when every answer is
SERVING, exit 1 otherwise with one line on stderr per service that is not.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import subprocess
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from server import registry
from tests.pki import Authority
from tests.serving import Served, eventually, free_port, loom_process, run_loom


async def probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`loom probe <args>` to completion, off the event loop."""
    return await asyncio.to_thread(run_loom, "probe", *args, env=env)


async def test_live_and_ready_pass_on_a_healthy_server(tmp_path: Path) -> None:
    """On a freshly started server, `--live` and `--ready` (every service, or the ones
    named) exit 0 and print nothing; a service name the server does not have exits 1 and
    says SERVICE_UNKNOWN."""
    async with loom_process(tmp_path) as served:
        for args in (("--live",), ("--ready",), ("--ready", "--service", "loom.v1.Inbox")):
            done = await probe(*args, "--target", served.target)
            assert (done.returncode, done.stderr) == (0, ""), args
        done = await probe("--ready", "--service", "loom.v1.Nope", "--target", served.target)
        assert done.returncode == 1
        assert "loom.v1.Nope: SERVICE_UNKNOWN" in done.stderr


async def test_the_port_comes_from_the_servers_environment(tmp_path: Path) -> None:
    """Without --target the probe asks 127.0.0.1 on LOOM_SERVER__PORT, as inside the
    server's own container."""
    port = free_port()
    async with loom_process(tmp_path, port=port):
        done = await probe("--ready", env={"LOOM_SERVER__PORT": str(port)})
        assert (done.returncode, done.stderr) == (0, "")


async def _status(served: Served, service: str) -> int:
    async with grpc.aio.insecure_channel(served.target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5
        )
        return int(reply.status)


async def test_ready_fails_naming_the_service_whose_engine_is_down(tmp_path: Path) -> None:
    """With the Iterator's job state on a DynamoDB nobody listens on, the Iterator turns
    NOT_SERVING (its breaker opens): `--ready` exits 1 naming only it, `--ready --service`
    of another service and `--live` exit 0 (a restart would not bring a database back)."""
    env = {
        "LOOM_STORAGE__ITERATOR_STATE": "dynamodb",
        "LOOM_DYNAMODB__ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "LOOM_BREAKER__FAILURE_THRESHOLD": "1",
        # the breaker stays open for the test (half-open reads SERVING, letting probes through)
        "LOOM_BREAKER__RESET_TIMEOUT_S": "600",
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    async with loom_process(tmp_path, env=env) as served:
        await eventually(
            lambda: _status(served, "loom.v1.Iterator"),
            lambda s: s == health_pb2.HealthCheckResponse.NOT_SERVING,
            timeout_s=60.0,
            interval_s=0.5,
        )
        ready = await probe("--ready", "--target", served.target)
        assert ready.returncode == 1
        assert ready.stderr.splitlines() == ["loom probe: loom.v1.Iterator: NOT_SERVING"]
        others = [
            a for s in registry.proto_names() if s != "loom.v1.Iterator" for a in ("--service", s)
        ]
        assert (await probe("--ready", *others, "--target", served.target)).returncode == 0
        live = await probe("--live", "--target", served.target)
        assert (live.returncode, live.stderr) == (0, "")


async def test_nothing_listening_fails_within_the_timeout() -> None:
    """With no server on the port, the probe exits 1 (never hangs), saying UNREACHABLE."""
    done = await probe("--live", "--target", f"127.0.0.1:{free_port()}", "--timeout", "1")
    assert done.returncode == 1
    assert 'loom probe: "" (the server): UNREACHABLE' in done.stderr


async def test_mutual_tls_with_the_probes_ca_and_client_certificate(tmp_path: Path) -> None:
    """A server with TLS and required client certificates, started with the probe's
    variables in its own environment (as in its container, where the health check runs):
    it serves; the probe, given the CA and a client certificate through that environment,
    exits 0; without the client certificate the handshake fails and it exits 1."""
    ca = Authority(tmp_path / "pki")
    server = ca.issue("server", server=True)
    clients = Authority(tmp_path / "clients", "Client CA")
    client = clients.issue("probe", server=False)
    tls = {
        "LOOM_SERVER__TLS_CERT_FILE": str(server.cert_file),
        "LOOM_SERVER__TLS_KEY_FILE": str(server.key_file),
        "LOOM_SERVER__TLS_CLIENT_CA_FILE": str(clients.cert_file),
    }
    creds = grpc.ssl_channel_credentials(ca.cert, client.key, client.cert)
    shared = {**tls, "LOOM_PROBE__CA_FILE": str(ca.cert_file)}
    async with loom_process(tmp_path, env=shared, credentials=creds) as served:
        env = dict(shared)
        anonymous = await probe("--live", "--target", served.target, env=env)
        assert anonymous.returncode == 1
        env |= {
            "LOOM_PROBE__CLIENT_CERT_FILE": str(client.cert_file),
            "LOOM_PROBE__CLIENT_KEY_FILE": str(client.key_file),
        }
        done = await probe("--ready", "--target", served.target, env=env)
        assert (done.returncode, done.stderr) == (0, "")


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost / 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "loom")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "self.crt", directory / "self.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


async def test_a_self_signed_certificate_is_its_own_trust_root(tmp_path: Path) -> None:
    """With only the server's own settings (a self-signed certificate and its key), the
    probe connects over TLS trusting that certificate and exits 0; a name the certificate
    does not carry (--authority) fails the check."""
    cert_file, key_file = _self_signed(tmp_path)
    env = {"LOOM_SERVER__TLS_CERT_FILE": str(cert_file), "LOOM_SERVER__TLS_KEY_FILE": str(key_file)}
    creds = grpc.ssl_channel_credentials(cert_file.read_bytes())
    async with loom_process(tmp_path, env=env, credentials=creds) as served:
        done = await probe("--ready", "--target", served.target, env=env)
        assert (done.returncode, done.stderr) == (0, "")
        wrong = await probe("--live", "--target", served.target, "--authority", "x.test", env=env)
        assert wrong.returncode == 1
