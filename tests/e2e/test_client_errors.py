"""Bad credentials and unreachable servers reach each client as its language's idiom.

UNAUTHENTICATED (no token, an expired token) and UNAVAILABLE (nothing listens at the target;
the server's certificate was not issued by the CA the client trusts) are what a user meets
first. Python raises `LoomError` with the gRPC code, and its CLI prints one line of JSON and
exits 1; the Go example prints one line, ``loom: <CODE>: <message>``, and exits 3 (credentials)
or 4 (no server answered). Neither shows a traceback or a panic. With the service config's
wait-for-ready, an unreachable server is a DEADLINE_EXCEEDED that names the connection error.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import threadweaver_pb2
from loom_client import LoomClient, LoomError

from loadtest.server import free_port
from server.config import AuthSettings, Settings
from server.runtime.auth import mint_token
from tests.engines import settings_for
from tests.pki import Authority
from tests.serving import Running, running_server

ROOT = Path(__file__).resolve().parents[2]
GO_DIR = ROOT / "clients" / "go"
SERVICE_CONFIG = ROOT / "clients" / "service_config.json"
EXIT_AUTH, EXIT_UNREACHABLE = 3, 4
"""The Go example's exit codes for bad credentials and for a server that did not answer."""

REQUEST = threadweaver_pb2.WeaveMessageRequest(
    message=threadweaver_pb2.WovenMessage(
        gid="alice", thread_id="t1", rfc_message_id="<e1@x>", sent_at=Timestamp(seconds=1)
    )
)


@dataclass
class Pki:
    """The CA that issued the TLS server's certificate, and one that did not."""

    ca: Path
    foreign_ca: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pki, Settings]:
    tmp = Path(tmp_path_factory.mktemp("errors-tls"))
    authority = Authority(tmp / "pki")
    foreign = Authority(tmp / "foreign", name="Foreign CA")
    issued = authority.issue("server", server=True)
    base = settings_for("sqlite", tmp)
    settings = replace(
        base,
        server=replace(
            base.server, tls_cert_file=str(issued.cert_file), tls_key_file=str(issued.key_file)
        ),
    )
    return Pki(authority.cert_file, foreign.cert_file), settings


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def tls_server(pki: tuple[Pki, Settings]) -> AsyncIterator[Running]:
    """A server with TLS, its certificate issued by `pki`'s CA."""
    async with running_server(pki[1]) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def auth_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """A server that requires bearer tokens (HS256 shared secret)."""
    tmp = Path(tmp_path_factory.mktemp("errors-auth"))
    secret = tmp / "jwt.secret"
    secret.write_bytes(b"s3cret-" * 8)
    settings = replace(settings_for("sqlite", tmp), auth=AuthSettings(jwt_secret_file=str(secret)))
    async with running_server(settings) as running:
        yield running


def tokens(server: Running) -> dict[str, str]:
    """The LOOM_TOKEN of each credential case: none, and one that expired ten minutes ago."""
    return {
        "missing": "",
        "expired": mint_token(server.settings.auth, ["threadweaver:write"], -600),
    }


GRPC_LOG_LINE = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ")
"""A line gRPC core logs on its own (absl format), not the CLI's."""
UNAUTHENTICATED_MESSAGES = {"missing": "missing bearer token", "expired": "token expired"}


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


async def run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> Outcome:
    """Runs a command without blocking the loop (the servers run in it); never raises on exit."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    process = await asyncio.create_subprocess_exec(
        *map(str, argv),
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**base, "NO_COLOR": "1", **(env or {})},
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), 300)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"{argv} did not finish within 300 s")
    assert process.returncode is not None
    return Outcome(process.returncode, out.decode(), err.decode())


def nothing_listens() -> str:
    """A local address no server listens on."""
    return f"127.0.0.1:{free_port()}"


class TestPythonClient:
    @pytest.mark.parametrize("credential", ["missing", "expired"])
    async def test_bad_credentials_raise_unauthenticated(
        self, auth_server: Running, credential: str
    ) -> None:
        """No token or an expired one: LoomError UNAUTHENTICATED saying which (never retried)."""
        token = tokens(auth_server)[credential] or None
        async with LoomClient.connect(
            auth_server.target, token=token, service_config=SERVICE_CONFIG
        ) as client:
            with pytest.raises(LoomError) as caught:
                await client.threadweaver.weave_message(REQUEST)
        assert caught.value.code is grpc.StatusCode.UNAUTHENTICATED
        assert UNAUTHENTICATED_MESSAGES[credential] in caught.value.message

    async def test_nothing_listening_is_unavailable(self) -> None:
        """Without the service config, a call to an address nobody serves fails UNAVAILABLE."""
        async with LoomClient.connect(nothing_listens()) as client:
            with pytest.raises(LoomError) as caught:
                await client.threadweaver.weave_message(REQUEST)
        assert caught.value.code is grpc.StatusCode.UNAVAILABLE

    async def test_nothing_listening_under_wait_for_ready_runs_out_of_time(self) -> None:
        """With the service config the call waits for a server, then DEADLINE_EXCEEDED."""
        async with LoomClient.connect(
            nothing_listens(), service_config=SERVICE_CONFIG, default_timeout=1.0
        ) as client:
            with pytest.raises(LoomError) as caught:
                await client.threadweaver.weave_message(REQUEST)
        assert caught.value.code is grpc.StatusCode.DEADLINE_EXCEEDED

    async def test_a_ca_that_did_not_issue_the_certificate_is_unavailable(
        self, tls_server: Running, pki: tuple[Pki, Settings]
    ) -> None:
        """TLS to a server whose certificate the trusted CA did not issue: UNAVAILABLE."""
        credentials = grpc.ssl_channel_credentials(pki[0].foreign_ca.read_bytes())
        target = f"localhost:{tls_server.loom.port}"
        async with LoomClient.connect(target, credentials=credentials) as client:
            with pytest.raises(LoomError) as caught:
                await client.threadweaver.weave_message(REQUEST)
        assert caught.value.code is grpc.StatusCode.UNAVAILABLE
        # ...while the CA that issued it connects.
        credentials = grpc.ssl_channel_credentials(pki[0].ca.read_bytes())
        async with LoomClient.connect(target, credentials=credentials) as client:
            assert await client.health() == "SERVING"


class TestPythonCli:
    async def cli(self, *args: str, env: dict[str, str] | None = None) -> Outcome:
        return await run(
            sys.executable, "-m", "loom_client", *args, "unified", "--gid", "a", "--thread", "t",
            cwd=ROOT, env=env,
        )  # fmt: skip

    def assert_error_line(self, outcome: Outcome, code: str) -> dict[str, object]:
        """Exit 1, one line of JSON naming `code` on stderr, no traceback, no stdout.

        gRPC core may log a TLS handshake failure first (``I1125 12:00:00.000 ... Handshake
        failed``; GRPC_VERBOSITY=ERROR silences it): the only other lines allowed.
        """
        assert outcome.returncode == 1, outcome
        assert "Traceback" not in outcome.stderr, outcome.stderr
        assert outcome.stdout == ""
        *before, last = outcome.stderr.splitlines()
        assert all(GRPC_LOG_LINE.match(line) for line in before), outcome.stderr
        error: dict[str, object] = json.loads(last)
        assert error["code"] == code, error
        return error

    @pytest.mark.parametrize("credential", ["missing", "expired"])
    async def test_bad_credentials(self, auth_server: Running, credential: str) -> None:
        """The CLI's answer to no token or an expired token: UNAUTHENTICATED, exit 1."""
        env = {"LOOM_TOKEN": tokens(auth_server)[credential]}
        outcome = await self.cli("--target", auth_server.target, env=env)
        error = self.assert_error_line(outcome, "UNAUTHENTICATED")
        assert UNAUTHENTICATED_MESSAGES[credential] in str(error["message"])

    async def test_nothing_listening(self) -> None:
        """An address nobody serves: UNAVAILABLE, exit 1."""
        self.assert_error_line(await self.cli("--target", nothing_listens()), "UNAVAILABLE")

    async def test_nothing_listening_with_the_service_config(self) -> None:
        """--service-config: the call waits for a server until its deadline."""
        outcome = await self.cli(
            "--target", nothing_listens(), "--service-config", str(SERVICE_CONFIG),
            "--timeout", "1",
        )  # fmt: skip
        self.assert_error_line(outcome, "DEADLINE_EXCEEDED")

    async def test_foreign_ca(self, tls_server: Running, pki: tuple[Pki, Settings]) -> None:
        """--tls-ca naming a CA that did not issue the server's certificate: UNAVAILABLE."""
        target = f"localhost:{tls_server.loom.port}"
        outcome = await self.cli("--target", target, "--tls-ca", str(pki[0].foreign_ca))
        self.assert_error_line(outcome, "UNAVAILABLE")

    async def test_unreadable_service_config(self) -> None:
        """A service config that cannot be read is a usage error (exit 2), not a traceback."""
        outcome = await self.cli("--service-config", str(ROOT / "no-such-config.json"))
        assert outcome.returncode == 2, outcome
        assert outcome.stderr.startswith("error: "), outcome.stderr
        assert "Traceback" not in outcome.stderr


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def go_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clients/go/cmd/example, built once for this module."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("`go` is not on PATH (needed for the Go client example)")
    binary = Path(tmp_path_factory.mktemp("go")) / "example"
    built = await run(go, "build", "-o", binary, "./cmd/example", cwd=GO_DIR)
    assert built.returncode == 0, built.stderr
    return binary


class TestGoExample:
    def assert_one_line(self, outcome: Outcome, exit_code: int, prefix: str) -> str:
        """The example's failure: its exit code, one stderr line starting `prefix`, no panic."""
        assert outcome.returncode == exit_code, outcome
        assert "panic" not in outcome.stderr, outcome.stderr
        assert "goroutine " not in outcome.stderr, outcome.stderr
        lines = outcome.stderr.splitlines()
        assert len(lines) == 1, outcome.stderr
        assert lines[0].startswith(prefix), lines[0]
        return lines[0]

    @pytest.mark.parametrize("credential", ["missing", "expired"])
    async def test_bad_credentials(
        self, go_example: Path, auth_server: Running, credential: str
    ) -> None:
        """No $LOOM_TOKEN or an expired one: `loom: UNAUTHENTICATED: ...`, exit 3."""
        env = {"LOOM_TOKEN": tokens(auth_server)[credential]}
        outcome = await run(go_example, "-target", auth_server.target, cwd=GO_DIR, env=env)
        line = self.assert_one_line(outcome, EXIT_AUTH, "loom: UNAUTHENTICATED: ")
        assert UNAUTHENTICATED_MESSAGES[credential] in line

    async def test_nothing_listening_under_wait_for_ready(self, go_example: Path) -> None:
        """With the service config (found from clients/go upward): DEADLINE_EXCEEDED naming
        the refused connection, exit 4."""
        target = nothing_listens()
        outcome = await run(go_example, "-target", target, "-timeout", "2s", cwd=GO_DIR)
        line = self.assert_one_line(outcome, EXIT_UNREACHABLE, "loom: DEADLINE_EXCEEDED: ")
        assert "connection refused" in line

    async def test_nothing_listening_without_the_service_config(self, go_example: Path) -> None:
        """-service-config none: the call fails fast, UNAVAILABLE, exit 4."""
        target = nothing_listens()
        outcome = await run(go_example, "-target", target, "-service-config", "none", cwd=GO_DIR)
        line = self.assert_one_line(outcome, EXIT_UNREACHABLE, "loom: UNAVAILABLE: ")
        assert "connection refused" in line

    async def test_foreign_ca(
        self, go_example: Path, tls_server: Running, pki: tuple[Pki, Settings]
    ) -> None:
        """-ca naming a CA that did not issue the server's certificate: exit 4, and the line
        says the certificate is the problem; the right CA works."""
        target = f"127.0.0.1:{tls_server.loom.port}"
        outcome = await run(
            go_example, "-target", target, "-ca", pki[0].foreign_ca, "-timeout", "2s", cwd=GO_DIR
        )
        line = self.assert_one_line(outcome, EXIT_UNREACHABLE, "loom: DEADLINE_EXCEEDED: ")
        assert "certificate" in line
        trusted = await run(go_example, "-target", target, "-ca", pki[0].ca, cwd=GO_DIR)
        assert trusted.returncode == 0, trusted
        assert "field violation message.gid: must not be empty" in trusted.stdout

    async def test_unreadable_ca(self, go_example: Path) -> None:
        """A CA file that does not exist is a usage error: one line, exit 2."""
        outcome = await run(go_example, "-ca", ROOT / "no-such-ca.pem", cwd=GO_DIR)
        self.assert_one_line(outcome, 2, "loom: ca ")
