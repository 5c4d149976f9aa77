"""The TypeScript client (clients/typescript) against a real server: plain, with a bearer
token, over TLS with a CA; its bad-input idioms; and its types catching a misspelt field.

The example runs as compiled JavaScript (`tsc` once per module into dist/, then `node
dist/example.js`): node starts in about a tenth of a second where tsx, which transpiles on every
start, takes several times that, and the compile doubles as the `strict` type check. The
server runs in this process's event loop, so the example runs as an asyncio subprocess.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
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
TS_DIR = ROOT / "clients" / "typescript"
BIN = TS_DIR / "node_modules" / ".bin"
EXAMPLE = TS_DIR / "dist" / "example.js"
STACK_FRAME = re.compile(r"^\s+at ", re.MULTILINE)


@dataclass
class Result:
    """How a command ended."""

    code: int
    stdout: str
    stderr: str


async def execute(
    *argv: str, cwd: Path = TS_DIR, env: dict[str, str] | None = None, timeout_s: float = 120.0
) -> Result:
    """Runs a command without blocking the loop (the server lives in it)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**base, "NO_COLOR": "1", **(env or {})},
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
    """`node dist/example.js ARGS` with only the LOOM_* variables in `env`."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("`node` is not on PATH (needed for the TypeScript client)")
    return await execute(node, str(EXAMPLE), *args, env=env)


async def succeeds(*args: str, env: dict[str, str] | None = None) -> str:
    result = await example(*args, env=env)
    assert result.code == 0, f"example exited {result.code}:\n{result.stdout}{result.stderr}"
    return result.stdout


@pytest_asyncio.fixture(scope="module", loop_scope="session", autouse=True)
async def built() -> None:
    """Compiles the client with `tsc --strict` (tsconfig.json) into dist/."""
    if not (BIN / "tsc").exists():
        pytest.fail(
            "TypeScript client dependencies are not installed: "
            "run `cd clients/typescript && npm ci` (make test does this)"
        )
    result = await execute(str(BIN / "tsc"), "-p", "tsconfig.json", timeout_s=300)
    assert result.code == 0, f"tsc failed:\n{result.stdout}{result.stderr}"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """A plaintext server without auth."""
    settings = settings_for("sqlite", Path(tmp_path_factory.mktemp("ts-plain")))
    async with running_server(settings) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def auth_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """A server that requires bearer tokens (HS256 shared secret)."""
    tmp = Path(tmp_path_factory.mktemp("ts-auth"))
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
        """By the name on its certificate: node warns when TLS is asked to verify an IP."""
        return f"localhost:{self.running.loom.port}"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def tls_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TlsServer]:
    """A TLS server whose certificate (for 127.0.0.1 and localhost) `ca` issued."""
    tmp = Path(tmp_path_factory.mktemp("ts-tls"))
    ca = Authority(tmp / "pki")
    issued = ca.issue("server", server=True)
    base = settings_for("sqlite", tmp)
    tls = replace(
        base.server, tls_cert_file=str(issued.cert_file), tls_key_file=str(issued.key_file)
    )
    async with running_server(replace(base, server=tls)) as running:
        yield TlsServer(running, ca)


def token(running: Running, ttl_s: float = 300) -> dict[str, str]:
    """The environment carrying a bearer token for ThreadWeaver writes."""
    return {"LOOM_TOKEN": mint_token(running.settings.auth, ["threadweaver:write"], ttl_s)}


class TestExample:
    async def test_plain(self, server: Running) -> None:
        """Weaves alice's and bob's copies, prints the thread and the field violation."""
        assert_example_output(await succeeds(server.target))

    async def test_with_a_bearer_token(self, auth_server: Running) -> None:
        """Against a server requiring tokens, with $LOOM_TOKEN."""
        assert_example_output(await succeeds(auth_server.target, env=token(auth_server)))

    async def test_over_tls_with_the_ca_flag(self, tls_server: TlsServer) -> None:
        """Over TLS, trusting the CA named by --ca."""
        output = await succeeds("--ca", str(tls_server.ca.cert_file), tls_server.target)
        assert_example_output(output)

    async def test_over_tls_with_the_ca_from_the_environment(self, tls_server: TlsServer) -> None:
        """Over TLS, trusting the CA named by $LOOM_TLS_CA, the target from $LOOM_TARGET."""
        env = {"LOOM_TLS_CA": str(tls_server.ca.cert_file), "LOOM_TARGET": tls_server.target}
        assert_example_output(await succeeds(env=env))


def assert_one_clear_line(result: Result, code: int, prefix: str) -> None:
    """The failure is one `loom: CODE: ...` line on stderr with its exit code, no stack."""
    assert result.code == code, f"exit {result.code}:\n{result.stdout}{result.stderr}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prefix), result.stderr
    assert not STACK_FRAME.search(result.stderr + result.stdout), result.stderr
    assert result.stdout == "", result.stdout


class TestBadInput:
    async def test_missing_token(self, auth_server: Running) -> None:
        """No $LOOM_TOKEN against a server with auth on: UNAUTHENTICATED, exit 3."""
        result = await example(auth_server.target)
        assert_one_clear_line(result, 3, "loom: UNAUTHENTICATED: missing bearer token")

    async def test_expired_token(self, auth_server: Running) -> None:
        """A token that expired an hour ago: UNAUTHENTICATED, exit 3."""
        result = await example(auth_server.target, env=token(auth_server, ttl_s=-3600))
        assert_one_clear_line(result, 3, "loom: UNAUTHENTICATED: token expired")

    async def test_wrong_target_without_the_service_config(self) -> None:
        """Nothing listens there: without wait-for-ready the call fails at once, UNAVAILABLE."""
        result = await example("--no-service-config", f"127.0.0.1:{free_port()}")
        assert_one_clear_line(result, 5, "loom: UNAVAILABLE: ")
        assert "ECONNREFUSED" in result.stderr

    async def test_wrong_target_with_the_service_config(self) -> None:
        """With the service config's wait-for-ready the call waits for its deadline."""
        target = f"127.0.0.1:{free_port()}"
        result = await example("--timeout", "1", target)
        assert_one_clear_line(result, 6, "loom: DEADLINE_EXCEEDED: ")
        assert f"not connected to {target}" in result.stderr
        assert "--no-service-config" in result.stderr

    async def test_a_ca_that_did_not_issue_the_certificate(
        self, tls_server: TlsServer, tmp_path: Path
    ) -> None:
        """A CA that did not issue the server's certificate: the handshake fails, UNAVAILABLE."""
        stranger = Authority(tmp_path / "stranger", "Stranger CA")
        args = ("--no-service-config", "--ca", str(stranger.cert_file), tls_server.target)
        result = await example(*args)
        assert_one_clear_line(result, 5, "loom: UNAVAILABLE: ")
        assert "certificate" in result.stderr

    @pytest.mark.parametrize(
        ("flag", "missing"),
        [("--ca", "no-such-ca.pem"), ("--service-config", "no-such-config.json")],
        ids=["ca", "service-config"],
    )
    async def test_an_unreadable_file(self, tmp_path: Path, flag: str, missing: str) -> None:
        """A file named by a flag that cannot be read: exit 2, naming the file."""
        result = await example(flag, str(tmp_path / missing), "127.0.0.1:1")
        assert_one_clear_line(result, 2, "loom: cannot read the ")
        assert missing in result.stderr

    async def test_an_unknown_flag(self) -> None:
        """A flag the example does not know: exit 2, the usage on the same line."""
        result = await example("--bogus", "127.0.0.1:1")
        assert_one_clear_line(result, 2, "loom: Unknown option '--bogus'")
        assert "usage: example " in result.stderr

    @pytest.mark.parametrize(
        ("content", "says"),
        [
            ("{not json", "is not JSON"),
            (
                '{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 1}}]}',
                "maxAttempts",
            ),
        ],
        ids=["not-json", "bad-retry-policy"],
    )
    async def test_a_bad_service_config(self, tmp_path: Path, content: str, says: str) -> None:
        """A service config grpc-js would refuse (or silently half-apply): exit 2, saying why."""
        config = tmp_path / "service_config.json"
        config.write_text(content)
        result = await example("--service-config", str(config), "127.0.0.1:1")
        assert_one_clear_line(result, 2, "loom: ")
        assert says in result.stderr


TYPE_CHECKED = """\
import {{ WeaveMessageRequest, WeaveMessageResponse }} from "../src/gen/loom/v1/threadweaver";

export const request = WeaveMessageRequest.fromPartial({{
  message: {{ gid: "alice", {request_field}: "t1", rfcMessageId: "<m@x>" }},
}});
export const read = (reply: WeaveMessageResponse): string => reply.{response_field};
"""


class TestTypes:
    @pytest.mark.parametrize(
        ("request_field", "response_field", "typo"),
        [
            ("threadId", "unifiedThreadId", None),
            ("thread_id", "unifiedThreadId", "thread_id"),
            ("threadId", "unifiedThreadID", "unifiedThreadID"),
        ],
        ids=["spelt-right", "misspelt-request-field", "misspelt-response-field"],
    )
    async def test_a_misspelt_field_does_not_compile(
        self, request_field: str, response_field: str, typo: str | None
    ) -> None:
        """A request or response field not in the .proto fails `tsc --strict`, naming it."""
        # A directory beside src/ (so imports and node_modules resolve as the example's do),
        # outside tsconfig.json's include (so a left-over never breaks `npm run build`).
        check = Path(tempfile.mkdtemp(prefix=".typecheck-", dir=TS_DIR))
        try:
            source = check / "typo.ts"
            source.write_text(
                TYPE_CHECKED.format(request_field=request_field, response_field=response_field)
            )
            (check / "tsconfig.json").write_text(
                '{"extends": "../tsconfig.json", "compilerOptions": {"noEmit": true,'
                ' "rootDir": ".."}, "include": ["typo.ts"]}'
            )
            result = await execute(str(BIN / "tsc"), "-p", str(check / "tsconfig.json"))
        finally:
            shutil.rmtree(check)
        output = result.stdout + result.stderr
        if typo is None:
            assert result.code == 0, output
            return
        assert result.code != 0, output
        errors = [line for line in output.splitlines() if "error TS" in line]
        assert errors, output
        assert all("typo.ts" in line for line in errors), output  # none in the stubs
        assert any("typo.ts" in line and f"'{typo}'" in line for line in errors), output
