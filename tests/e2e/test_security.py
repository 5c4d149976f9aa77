"""Transport and callers: TLS, mutual TLS, certificate reload, bearer tokens, bad settings.

Everything goes through a real server: in-process for the protocol checks, `loom serve` as a
process where a signal, an exit code or the command line is what a user would see.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from server.config import AuthSettings, Settings
from server.runtime.auth import mint_token
from tests.engines import settings_for
from tests.pki import Authority, Issued
from tests.serving import eventually, loom_process, run_loom, running_server

SECRET = b"k" * 48


@pytest.fixture
def pki(tmp_path: Path) -> tuple[Authority, Issued]:
    ca = Authority(tmp_path / "pki")
    return ca, ca.issue("server", server=True)


def tls_settings(tmp: Path, server: Issued, client_ca: Path | None = None) -> Settings:
    base = settings_for("sqlite", tmp)
    return replace(
        base,
        server=replace(
            base.server,
            tls_cert_file=str(server.cert_file),
            tls_key_file=str(server.key_file),
            tls_client_ca_file=str(client_ca or ""),
        ),
    )


async def unread(channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...] = ()) -> int:
    stub = inbox_pb2_grpc.InboxStub(channel)
    reply = await stub.GetUnreadCount(
        inbox_pb2.GetUnreadCountRequest(inbox_id="u1"), timeout=10, metadata=metadata
    )
    return int(reply.unread_count)


async def code_of(call: object) -> grpc.StatusCode:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def secure(port: int, ca: Path, client: Issued | None = None) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        ca.read_bytes(),
        client.key if client else None,
        client.cert if client else None,
    )
    return grpc.aio.secure_channel(f"localhost:{port}", credentials)


class TestTls:
    async def test_serves_tls_and_refuses_plaintext(
        self, tmp_path: Path, pki: tuple[Authority, Issued]
    ) -> None:
        """A client trusting the CA calls normally; a plaintext client cannot connect."""
        ca, server = pki
        async with running_server(tls_settings(tmp_path, server)) as running:
            async with secure(running.loom.port, ca.cert_file) as channel:
                assert await unread(channel) == 0
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.loom.port}") as plain:
                assert await code_of(unread(plain)) is grpc.StatusCode.UNAVAILABLE

    async def test_mutual_tls_requires_a_certificate_from_the_client_ca(
        self, tmp_path: Path, pki: tuple[Authority, Issued]
    ) -> None:
        """With tls_client_ca_file: no client certificate or a stranger's fails; ours passes."""
        ca, server = pki
        clients = Authority(tmp_path / "clients", "Client CA")
        strangers = Authority(tmp_path / "strangers", "Stranger CA")
        settings = tls_settings(tmp_path, server, clients.cert_file)
        async with running_server(settings) as running:
            async with secure(running.loom.port, ca.cert_file) as anonymous:
                assert await code_of(unread(anonymous)) is grpc.StatusCode.UNAVAILABLE
            stranger = strangers.issue("mallory", server=False)
            async with secure(running.loom.port, ca.cert_file, stranger) as forged:
                assert await code_of(unread(forged)) is grpc.StatusCode.UNAVAILABLE
            member = clients.issue("alice", server=False)
            async with secure(running.loom.port, ca.cert_file, member) as channel:
                assert await unread(channel) == 0

    async def test_sighup_reloads_certificates_without_dropping_connections(
        self, tmp_path: Path, pki: tuple[Authority, Issued]
    ) -> None:
        """New files + SIGHUP: new handshakes use them; an open connection keeps working."""
        old_ca, old = pki
        live_cert, live_key = tmp_path / "live.crt", tmp_path / "live.key"
        shutil.copy(old.cert_file, live_cert)
        shutil.copy(old.key_file, live_key)
        args = ("--tls-cert", str(live_cert), "--tls-key", str(live_key))
        creds = grpc.ssl_channel_credentials(old_ca.cert)
        async with loom_process(tmp_path, *args, credentials=creds) as served:
            port = int(served.target.rsplit(":", 1)[1])
            async with secure(port, old_ca.cert_file) as kept:
                assert await unread(kept) == 0
                new_ca = Authority(tmp_path / "rotated", "Rotated CA")
                new = new_ca.issue("server2", server=True)
                shutil.copy(new.cert_file, live_cert)
                shutil.copy(new.key_file, live_key)
                served.process.send_signal(signal.SIGHUP)

                async def new_ca_works() -> bool:
                    async with secure(port, new_ca.cert_file) as fresh:
                        return await code_of(unread(fresh)) is grpc.StatusCode.OK

                await eventually(new_ca_works, bool, timeout_s=30.0, interval_s=0.2)
                assert await unread(kept) == 0  # the connection opened before is still up
            async with secure(port, old_ca.cert_file) as stale:
                assert await code_of(unread(stale)) is grpc.StatusCode.UNAVAILABLE
        assert any(line.get("event") == "tls certificates reloaded" for line in served.log_lines())

    def test_misconfigured_tls_stops_start_up_naming_the_setting(
        self, tmp_path: Path, pki: tuple[Authority, Issued]
    ) -> None:
        """Missing file, mismatched key, half a pair: exit 2, the setting named, no serving."""
        ca, server = pki
        other = ca.issue("other", server=True)
        cases = {
            "server.tls_cert_file: cannot read": (
                "--tls-cert", str(tmp_path / "missing.crt"), "--tls-key", str(server.key_file)
            ),
            "server.tls_key_file: the private key does not match": (
                "--tls-cert", str(server.cert_file), "--tls-key", str(other.key_file)
            ),
            "server.tls_key_file: TLS needs both": ("--tls-cert", str(server.cert_file)),
            "server.tls_client_ca_file: cannot read": (
                "--tls-cert", str(server.cert_file), "--tls-key", str(server.key_file),
                "--tls-client-ca", str(tmp_path / "nope.pem"),
            ),
        }  # fmt: skip
        for message, args in cases.items():
            done = run_loom("serve", "--port", "0", "--data-dir", str(tmp_path / "d"), *args)
            assert done.returncode == 2, (message, done.stderr)
            assert message in done.stderr
            assert '"event": "serving"' not in done.stderr

    async def test_plaintext_on_a_public_interface_warns_loudly(self, tmp_path: Path) -> None:
        """`--host 0.0.0.0` without TLS starts, with a PLAINTEXT warning in the log."""
        async with loom_process(tmp_path, "--host", "0.0.0.0") as served:
            warnings = [
                line for line in served.log_lines() if "PLAINTEXT" in str(line.get("event"))
            ]
            assert warnings
            assert warnings[0]["level"] == "warning"


@pytest.fixture
def auth_settings(tmp_path: Path) -> Settings:
    secret = tmp_path / "jwt.secret"
    secret.write_bytes(SECRET)
    base = settings_for("sqlite", tmp_path)
    return replace(base, auth=AuthSettings(jwt_secret_file=str(secret)))


def bearer(settings: Settings, *scopes: str, ttl_s: float = 60) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {mint_token(settings.auth, scopes, ttl_s)}"),)


class TestBearerTokens:
    async def test_scopes_decide_per_method(self, auth_settings: Settings) -> None:
        """No token: UNAUTHENTICATED; read scope: reads pass, writes PERMISSION_DENIED."""
        async with running_server(auth_settings) as running:
            channel = running.channel
            stub = inbox_pb2_grpc.InboxStub(channel)
            post = inbox_pb2.PostMessageRequest(
                thread_id="t", message_id=1, sender_inbox_id="a", recipient_inbox_ids=["u1"]
            )
            assert await code_of(unread(channel)) is grpc.StatusCode.UNAUTHENTICATED
            reader = bearer(auth_settings, "inbox:read")
            assert await unread(channel, reader) == 0
            denied = await code_of(stub.PostMessage(post, metadata=reader))
            assert denied is grpc.StatusCode.PERMISSION_DENIED
            writer = bearer(auth_settings, "inbox:write")
            await stub.PostMessage(post, metadata=writer)
            assert await unread(channel, writer) == 1  # write implies read
            expired = bearer(auth_settings, "inbox:read", ttl_s=-3600)
            assert await code_of(unread(channel, expired)) is grpc.StatusCode.UNAUTHENTICATED

    async def test_health_and_reflection_stay_open(self, auth_settings: Settings) -> None:
        """Probes and tools need no token while every Loom method does."""
        async with running_server(auth_settings) as running:
            channel = running.channel
            health = health_pb2_grpc.HealthStub(channel)
            reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING

    async def test_loom_token_and_grpcurl_with_a_header(self, tmp_path: Path) -> None:
        """`loom token` mints what `loom serve` accepts; grpcurl passes it with -H."""
        secret = tmp_path / "jwt.secret"
        secret.write_bytes(SECRET)
        env = {"LOOM_AUTH__JWT_SECRET_FILE": str(secret)}
        minted = run_loom("token", "--scope", "inbox:read", "--ttl", "5m", env=env)
        assert minted.returncode == 0, minted.stderr
        token = minted.stdout.strip()
        async with loom_process(tmp_path, env=env) as served:
            grpcurl = shutil.which("grpcurl") or str(Path.home() / ".cache/loom/bin/grpcurl")
            call = [grpcurl, "-plaintext", "-d", '{"inbox_id": "u1"}']
            target = [served.target, "loom.v1.Inbox/GetUnreadCount"]
            refused = await asyncio.to_thread(_run, [*call, *target])
            assert refused.returncode != 0
            assert "Unauthenticated" in refused.stderr
            ok = await asyncio.to_thread(
                _run, [*call, "-H", f"authorization: Bearer {token}", *target]
            )
            assert ok.returncode == 0, ok.stderr

    def test_an_unreadable_key_stops_start_up(self, tmp_path: Path) -> None:
        """auth.jwt_secret_file naming a missing file: exit 2 with the setting named."""
        env = {"LOOM_AUTH__JWT_SECRET_FILE": str(tmp_path / "missing")}
        done = run_loom("serve", "--port", "0", "--data-dir", str(tmp_path / "d"), env=env)
        assert done.returncode == 2
        assert "auth.jwt_secret_file: cannot read" in done.stderr


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
