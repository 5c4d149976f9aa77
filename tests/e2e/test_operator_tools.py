"""An operator's view: `loom serve` as a process, poked with grpcurl and ghz through reflection.

Neither tool is given a `.proto` file: everything they know comes from server reflection.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.serving import loom_process

TOOLS_BIN = Path.home() / ".cache" / "loom" / "bin"


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(TOOLS_BIN))
    if not found:
        raise AssertionError(f"{name} is not installed: run scripts/tools/install.sh (make tools)")
    return found


def grpcurl() -> str:
    return tool("grpcurl")


def run(*args: str, data: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [grpcurl(), "-plaintext", *args],
        input=data,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """`loom serve` on a free port with a fresh data dir; it must drain on SIGTERM."""
    async with loom_process(tmp_path_factory.mktemp("served")) as server:
        yield server.target
    assert server.process.returncode == 0, server.stderr()
    stopped = any(line.get("event") == "stopped" for line in server.log_lines())
    assert stopped, "no graceful drain logged"


class TestGrpcurl:
    def test_list_shows_every_service(self, served: str) -> None:
        """Reflection lists all five Loom services plus health and reflection."""
        out = run(served, "list")
        assert out.returncode == 0, out.stderr
        services = set(out.stdout.split())
        assert {
            "loom.v1.ThreadWeaver",
            "loom.v1.Iterator",
            "loom.v1.TemplateInduction",
            "loom.v1.Inbox",
            "loom.v1.Summary",
            "grpc.health.v1.Health",
        } <= services

    def test_describe_shows_the_contract(self, served: str) -> None:
        """describe prints the service's methods and a request message's fields."""
        out = run(served, "describe", "loom.v1.ThreadWeaver")
        assert out.returncode == 0, out.stderr
        assert "rpc GetUnifiedThread ( .loom.v1.GetUnifiedThreadRequest )" in out.stdout
        out = run(served, "describe", "loom.v1.WovenMessage")
        assert out.returncode == 0, out.stderr
        assert "string rfc_message_id = 3;" in out.stdout

    def test_weave_and_read_back_with_json(self, served: str) -> None:
        """A JSON WeaveMessage then GetUnifiedThread shows both mailboxes' threads."""
        for gid, thread in (("alice", "a1"), ("bob", "b1")):
            body = json.dumps(
                {
                    "message": {
                        "gid": gid,
                        "threadId": thread,
                        "rfcMessageId": "<hello@example.com>",
                        "sentAt": "2026-11-21T08:00:00Z",
                    }
                }
            )
            out = run("-d", "@", served, "loom.v1.ThreadWeaver/WeaveMessage", data=body)
            assert out.returncode == 0, out.stderr
            assert json.loads(out.stdout)["unified_thread_id"] == "alice/a1"
        out = run(
            "-d",
            json.dumps({"gid": "bob", "threadId": "b1"}),
            served,
            "loom.v1.ThreadWeaver/GetUnifiedThread",
        )
        assert out.returncode == 0, out.stderr
        reply = json.loads(out.stdout)
        assert reply["threads"] == [
            {"gid": "alice", "thread_id": "a1"},
            {"gid": "bob", "thread_id": "b1"},
        ]
        assert reply["stats"]["message_count"] == "1"

    def test_bad_input_shows_field_violations(self, served: str) -> None:
        """grpcurl prints INVALID_ARGUMENT and the BadRequest detail naming the field."""
        out = run("-d", '{"message": {"gid": ""}}', served, "loom.v1.ThreadWeaver/WeaveMessage")
        assert out.returncode != 0
        assert "InvalidArgument" in out.stderr
        assert "message.gid" in out.stderr

    def test_templates_answer_through_grpcurl(self, served: str) -> None:
        """TemplateInduction is served: an unknown template is NOT_FOUND, and the induction
        statistics come back as JSON."""
        out = run(
            "-d", '{"templateId": "0123abcd"}', served, "loom.v1.TemplateInduction/GetTemplate"
        )
        assert out.returncode != 0
        assert "NotFound" in out.stderr
        out = run("-d", "{}", served, "loom.v1.TemplateInduction/GetInductionStats")
        assert out.returncode == 0, out.stderr
        json.loads(out.stdout)

    def test_iterator_answers_through_grpcurl(self, served: str) -> None:
        """The Iterator is served: a scope that names nothing is NOT_FOUND, a bad job id is
        INVALID_ARGUMENT naming the field."""
        out = run(
            "-d", '{"enterpriseId": 1, "level": "file"}', served, "loom.v1.Iterator/StartIteration"
        )
        assert out.returncode != 0
        assert "NotFound" in out.stderr
        out = run("-d", '{"jobId": "x"}', served, "loom.v1.Iterator/GetJob")
        assert "job_id" in out.stderr


class TestGhz:
    def test_load_runs_through_reflection_alone(self, served: str) -> None:
        """ghz resolves the method by reflection (no --proto) and every call answers OK."""
        out = subprocess.run(
            [
                tool("ghz"),
                "--insecure",
                "--call",
                "loom.v1.Inbox/GetUnreadCount",
                "-d",
                '{"inbox_id": "ghz-inbox"}',
                "-n",
                "40",
                "-c",
                "4",
                "--format",
                "json",
                served,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr or out.stdout
        report = json.loads(out.stdout)
        assert report["count"] == 40
        assert report["statusCodeDistribution"] == {"OK": 40}
