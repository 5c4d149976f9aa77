"""The Python and Go clients against a real server: Python (every ThreadWeaver RPC) and the Go
example (TypeScript and Java have files of their own: test_client_typescript.py, _java.py).

The server runs in this process's event loop, so the Go example and the CLI
run as asyncio subprocesses (a blocking subprocess call would stall the server they talk to).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import common_pb2, threadweaver_pb2
from loom_client import LoomClient, LoomError, RetryPolicy

from server.config import AuthSettings
from server.runtime.auth import mint_token
from tests.engines import settings_for
from tests.serving import Running, running_server

ROOT = Path(__file__).resolve().parents[2]
GO_DIR = ROOT / "clients" / "go"
TS = Timestamp(seconds=1_700_000_000)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """One embedded-engine server shared by this module."""
    settings = settings_for("sqlite", Path(tmp_path_factory.mktemp("clients")))
    async with running_server(settings) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def auth_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """A server that requires bearer tokens (HS256 shared secret)."""
    tmp = Path(tmp_path_factory.mktemp("clients-auth"))
    secret = tmp / "jwt.secret"
    secret.write_bytes(b"s3cret-" * 8)
    base = settings_for("sqlite", tmp)
    settings = replace(base, auth=AuthSettings(jwt_secret_file=str(secret)))
    async with running_server(settings) as running:
        yield running


def token(running: Running, *scopes: str) -> dict[str, str]:
    """The environment the examples read their bearer token from."""
    return {"LOOM_TOKEN": mint_token(running.settings.auth, scopes, 300)}


@pytest_asyncio.fixture(loop_scope="session")
async def client(server: Running) -> AsyncIterator[LoomClient]:
    async with LoomClient.connect(server.target, retry=RetryPolicy()) as connected:
        yield connected


def woven(gid: str, thread: str, rfc: str) -> threadweaver_pb2.WovenMessage:
    return threadweaver_pb2.WovenMessage(gid=gid, thread_id=thread, rfc_message_id=rfc, sent_at=TS)


async def run(
    *argv: str, cwd: Path, timeout_s: float = 300.0, env: dict[str, str] | None = None
) -> str:
    """Runs a command without blocking the loop; fails with its output unless it exits 0."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"{argv} did not finish within {timeout_s}s")
    text = output.decode()
    assert process.returncode == 0, f"{argv} exited {process.returncode}:\n{text}"
    return text


def assert_example_output(output: str) -> None:
    """Both examples weave alice's and bob's copies, list both, and print the violation."""
    lines = output.splitlines()
    assert any(line.startswith("unified thread ") and "2 threads" in line for line in lines), output
    assert any(line.strip().startswith("thread alice/a-") for line in lines), output
    assert any(line.strip().startswith("thread bob/b-") for line in lines), output
    assert "field violation message.gid: must not be empty" in output


class TestPythonClient:
    async def test_weave_and_read_back(self, client: LoomClient) -> None:
        """weave_message, weave_messages, get_unified_thread and resolve_threads round-trip."""
        first = await client.threadweaver.weave_message(
            threadweaver_pb2.WeaveMessageRequest(message=woven("alice", "py-a", "<py1@x>"))
        )
        batch = await client.threadweaver.weave_messages(
            threadweaver_pb2.WeaveMessagesRequest(
                messages=[
                    woven("bob", "py-b", "<py1@x>"),
                    woven("carol", "py-c", "<py2@x>"),
                ]
            ),
            timeout=5.0,
            metadata=[("x-caller", "e2e")],
        )
        assert batch.results[0].unified_thread_id == first.unified_thread_id

        unified = await client.threadweaver.get_unified_thread(
            threadweaver_pb2.GetUnifiedThreadRequest(gid="bob", thread_id="py-b")
        )
        assert [(t.gid, t.thread_id) for t in unified.threads] == [
            ("alice", "py-a"),
            ("bob", "py-b"),
        ]
        assert unified.stats.message_count == 1

        resolved = await client.threadweaver.resolve_threads(
            threadweaver_pb2.ResolveThreadsRequest(
                threads=[
                    common_pb2.ThreadRef(gid="alice", thread_id="py-a"),
                    common_pb2.ThreadRef(gid="nobody", thread_id="none"),
                ]
            )
        )
        assert [r.found for r in resolved.threads] == [True, False]
        assert resolved.threads[0].unified_thread_id == first.unified_thread_id

    async def test_bad_request_names_the_field(self, client: LoomClient) -> None:
        """INVALID_ARGUMENT surfaces as LoomError with the BadRequest field violations."""
        request = threadweaver_pb2.WeaveMessagesRequest(
            messages=[woven("g", "t", "<ok@x>"), woven("g", "", "<bad@x>")]
        )
        with pytest.raises(LoomError) as caught:
            await client.threadweaver.weave_messages(request)
        assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "messages[1].thread_id" in caught.value.violations_by_field
        assert caught.value.request_id

    async def test_not_found_is_not_retried(self, client: LoomClient) -> None:
        """NOT_FOUND is reported at once, even under a retry policy."""
        with pytest.raises(LoomError) as caught:
            await client.threadweaver.get_unified_thread(
                threadweaver_pb2.GetUnifiedThreadRequest(gid="nobody", thread_id="never")
            )
        assert caught.value.code == grpc.StatusCode.NOT_FOUND

    async def test_health(self, client: LoomClient) -> None:
        """The health helper reads grpc.health.v1."""
        assert await client.health() == "SERVING"

    async def test_cli_generic_call(self, server: Running) -> None:
        """`python -m loom_client call` parses JSON into the request and prints JSON."""
        body = json.dumps(
            {
                "message": {
                    "gid": "dan",
                    "thread_id": "cli-d",
                    "rfc_message_id": "<c@x>",
                    "sent_at": "2024-01-01T00:00:00Z",
                }
            }
        )
        output = await run(
            sys.executable,
            "-m",
            "loom_client",
            "--target",
            server.target,
            "call",
            "ThreadWeaver",
            "WeaveMessage",
            "--json",
            body,
            cwd=ROOT,
        )
        assert json.loads(output)["unified_thread_id"]


class TestGoClient:
    async def test_example(self, server: Running) -> None:
        """clients/go/cmd/example weaves, reads the unified thread and the field violations."""
        go = shutil.which("go")
        if go is None:
            pytest.fail("`go` is not on PATH (needed for the Go client example)")
        output = await run(go, "run", "./cmd/example", "-target", server.target, cwd=GO_DIR)
        assert_example_output(output)

    async def test_example_with_a_bearer_token(self, auth_server: Running) -> None:
        """The same example against a server requiring tokens, given $LOOM_TOKEN."""
        go = shutil.which("go") or "go"
        env = token(auth_server, "threadweaver:write")
        output = await run(
            go, "run", "./cmd/example", "-target", auth_server.target, cwd=GO_DIR, env=env
        )
        assert_example_output(output)
