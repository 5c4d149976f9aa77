"""The Java client (clients/java) against a real server: plain, with a bearer token, over TLS
with a CA; and its bad-input idioms (one `loom: CODE: ...` line and a distinct exit code, never
a stack trace).

The example runs as `java -jar target/loom-client.jar`, built by `make clients` (`mvn package`):
one JVM start per case instead of Maven's start-up on top of it. The module builds it once
itself when the jar is missing or older than its sources. The server runs in this process's
event loop, so the example runs as an asyncio subprocess.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import pytest_asyncio

from server.config import AuthSettings
from server.runtime.auth import mint_token
from tests.e2e.test_clients import assert_example_output
from tests.engines import settings_for
from tests.pki import Authority
from tests.serving import Running, free_port, running_server

ROOT = Path(__file__).resolve().parents[2]
JAVA_DIR = ROOT / "clients" / "java"
JAR = JAVA_DIR / "target" / "loom-client.jar"
BUILD = ("mvn", "-q", "-B", "package")
"""The Makefile's `clients` target runs the same command."""
STACK_FRAME = re.compile(r"^\s+at [\w$.]+\(", re.MULTILINE)
EXIT_USAGE, EXIT_UNAUTHENTICATED, EXIT_PERMISSION_DENIED = 2, 3, 4
EXIT_UNAVAILABLE, EXIT_DEADLINE_EXCEEDED = 5, 6
"""The example's exit codes (loom.example.Example)."""


@dataclass
class Result:
    """How a command ended."""

    code: int
    stdout: str
    stderr: str


async def execute(
    *argv: str, env: dict[str, str] | None = None, timeout_s: float = 120.0
) -> Result:
    """Runs a command in clients/java without blocking the loop (the server lives in it)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=JAVA_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**base, **(env or {})},
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"{argv} did not finish within {timeout_s}s")
    assert process.returncode is not None
    return Result(process.returncode, out.decode(), err.decode())


async def example(*args: str, env: dict[str, str] | None = None) -> Result:
    """`java -jar target/loom-client.jar ARGS` with only the LOOM_* variables in `env`."""
    java = shutil.which("java")
    if java is None:
        pytest.fail("`java` is not on PATH (needed for the Java client; OpenJDK 17 or newer)")
    return await execute(java, "-jar", str(JAR), *args, env=env)


async def succeeds(*args: str, env: dict[str, str] | None = None) -> str:
    result = await example(*args, env=env)
    assert result.code == 0, f"example exited {result.code}:\n{result.stdout}{result.stderr}"
    return result.stdout


def fails(result: Result, code: int, start: str) -> str:
    """The example exited `code` and said why in one stderr line starting with `start`."""
    output = result.stdout + result.stderr
    assert result.code == code, f"exited {result.code}, want {code}:\n{output}"
    assert "Exception" not in output, output
    assert not STACK_FRAME.search(output), output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith(start), output
    return lines[0]


def stale() -> bool:
    """True when the jar is missing or older than a source it is built from."""
    if not JAR.exists():
        return True
    sources = [JAVA_DIR / "pom.xml", *(JAVA_DIR / "src").rglob("*.java")]
    sources += (ROOT / "protos" / "loom" / "v1").glob("*.proto")
    built = JAR.stat().st_mtime
    return any(source.stat().st_mtime > built for source in sources)


@pytest_asyncio.fixture(scope="module", loop_scope="session", autouse=True)
async def built() -> None:
    """The example's jar: `make clients` builds it; built here only if missing or stale."""
    if not stale():
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        pytest.fail("`mvn` is not on PATH (needed to build clients/java; `make clients`)")
    result = await execute(mvn, *BUILD[1:], timeout_s=900)
    assert result.code == 0, f"{' '.join(BUILD)} failed:\n{result.stdout}{result.stderr}"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """A plaintext server without auth."""
    settings = settings_for("sqlite", Path(tmp_path_factory.mktemp("java-plain")))
    async with running_server(settings) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def auth_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """A server that requires bearer tokens (HS256 shared secret)."""
    tmp = Path(tmp_path_factory.mktemp("java-auth"))
    secret = tmp / "jwt.secret"
    secret.write_bytes(b"s3cret-" * 8)
    base = settings_for("sqlite", tmp)
    async with running_server(replace(base, auth=AuthSettings(str(secret)))) as running:
        yield running


@dataclass
class TlsServer:
    running: Running
    ca: Authority

    @property
    def target(self) -> str:
        """By the name on its certificate."""
        return f"localhost:{self.running.loom.port}"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def tls_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TlsServer]:
    """A TLS server whose certificate (for 127.0.0.1 and localhost) `ca` issued."""
    tmp = Path(tmp_path_factory.mktemp("java-tls"))
    ca = Authority(tmp / "pki")
    issued = ca.issue("server", server=True)
    base = settings_for("sqlite", tmp)
    tls = replace(
        base.server, tls_cert_file=str(issued.cert_file), tls_key_file=str(issued.key_file)
    )
    async with running_server(replace(base, server=tls)) as running:
        yield TlsServer(running, ca)


def token(
    running: Running, ttl_s: float = 300, scope: str = "threadweaver:write"
) -> dict[str, str]:
    """The environment carrying a bearer token (for ThreadWeaver writes unless told)."""
    return {"LOOM_TOKEN": mint_token(running.settings.auth, [scope], ttl_s)}


class TestExample:
    async def test_weaves_reads_and_shows_the_violation(self, server: Running) -> None:
        """Blocking weave and read, async resolve, and the BadRequest field violation."""
        output = await succeeds(server.target)
        assert_example_output(output)
        unified = re.search(r"^unified thread (\S+): 2 threads, 1 messages$", output, re.M)
        assert unified, output
        resolved = re.findall(r"^resolved (alice/a-\S+|bob/b-\S+) -> (\S+)$", output, re.M)
        assert [ut for _, ut in resolved] == [unified[1], unified[1]], output

    async def test_with_a_bearer_token(self, auth_server: Running) -> None:
        """Against a server requiring tokens, with $LOOM_TOKEN."""
        assert_example_output(await succeeds(auth_server.target, env=token(auth_server)))

    async def test_over_tls_trusting_the_servers_ca(self, tls_server: TlsServer) -> None:
        """--ca: TLS, the server's certificate checked against that CA."""
        output = await succeeds(tls_server.target, "--ca", str(tls_server.ca.cert_file))
        assert_example_output(output)


class TestBadInput:
    async def test_no_token(self, auth_server: Running) -> None:
        """No $LOOM_TOKEN: the server's UNAUTHENTICATED, said in one line."""
        result = await example(auth_server.target)
        line = fails(result, EXIT_UNAUTHENTICATED, "loom: UNAUTHENTICATED: missing bearer token")
        assert "set $LOOM_TOKEN" in line

    async def test_expired_token(self, auth_server: Running) -> None:
        """An expired token: UNAUTHENTICATED with the server's reason."""
        result = await example(auth_server.target, env=token(auth_server, ttl_s=-3600))
        fails(result, EXIT_UNAUTHENTICATED, "loom: UNAUTHENTICATED: token expired")

    async def test_a_token_without_the_scope(self, auth_server: Running) -> None:
        """A good token lacking threadweaver:write: PERMISSION_DENIED, its own exit code."""
        result = await example(auth_server.target, env=token(auth_server, scope="inbox:read"))
        line = fails(result, EXIT_PERMISSION_DENIED, "loom: PERMISSION_DENIED: ")
        assert "threadweaver:write" in line

    async def test_nothing_listening_without_the_service_config(self) -> None:
        """No wait-for-ready: UNAVAILABLE at once, naming the target and the cause."""
        target = f"127.0.0.1:{free_port()}"
        result = await example(target, "--no-service-config")
        line = fails(result, EXIT_UNAVAILABLE, f"loom: UNAVAILABLE: cannot reach {target}: ")
        assert "Connection refused" in line

    async def test_nothing_listening_with_the_service_config(self) -> None:
        """The service config's wait-for-ready waits to the deadline, then says so."""
        target = f"127.0.0.1:{free_port()}"
        result = await example(target, "--timeout", "1")
        fails(result, EXIT_DEADLINE_EXCEEDED, f"loom: DEADLINE_EXCEEDED: cannot reach {target}")

    async def test_a_ca_that_did_not_issue_the_servers_certificate(
        self, tls_server: TlsServer, tmp_path: Path
    ) -> None:
        """TLS fails verification: UNAVAILABLE, naming the target and the TLS cause."""
        stranger = Authority(tmp_path / "stranger", "Stranger CA")
        result = await example(
            tls_server.target, "--ca", str(stranger.cert_file), "--no-service-config"
        )
        start = f"loom: UNAVAILABLE: cannot reach {tls_server.target}: "
        assert "certification path" in fails(result, EXIT_UNAVAILABLE, start)

    async def test_unreadable_files(self, server: Running, tmp_path: Path) -> None:
        """A --ca that is no certificate or a service config that is no JSON: exit 2."""
        junk = tmp_path / "junk.txt"
        junk.write_text("not a certificate, not JSON {")
        result = await example(server.target, "--ca", str(junk))
        fails(result, EXIT_USAGE, f"loom: --ca {junk}: ")
        result = await example(server.target, "--service-config", str(junk))
        fails(result, EXIT_USAGE, f"loom: service config {junk}: ")
