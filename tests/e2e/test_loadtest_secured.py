"""The load harness against a secured deployment: mutual TLS and bearer JWTs on `--target`.

An operator measures their own server as it runs in production: `python -m loadtest summary
--target ... --tls-ca --tls-cert --tls-key --token` against a real server (in this process's
event loop, so the harness runs as an asyncio subprocess) that serves mutual TLS and checks
JWTs. A tiny run: the counts in its JSON report are what is checked, never a rate.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import pytest_asyncio

from server.config import AuthSettings
from server.runtime.auth import mint_token
from tests.engines import settings_for
from tests.pki import Authority, Issued
from tests.serving import Running, running_server

ROOT = Path(__file__).resolve().parents[2]
# health, record and get phases: 3 Checks, 4 RecordDeliveryEvents batches, 3 reads
PLANNED = {"health-sqlite": 3, "record-sqlite": 4, "get-sqlite": 3}
TINY = (
    "--store", "sqlite", "--skip-accuracy", "--health-checks", "3", "--batches", "4",
    "--batch-size", "10", "--recipients-per-message", "20", "--reads", "3", "--concurrency", "1",
)  # fmt: skip


@dataclass(frozen=True)
class Secured:
    """The server and what a caller needs: the CA, a client certificate, a token."""

    running: Running
    ca: Path
    client: Issued
    token: str

    @property
    def target(self) -> str:
        return f"localhost:{self.running.loom.port}"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def secured(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Secured]:
    """Mutual TLS (client certificates from their own CA) and HS256 bearer tokens."""
    tmp = Path(tmp_path_factory.mktemp("loadtest-secured"))
    servers = Authority(tmp / "pki", "Server CA")
    issued = servers.issue("server", server=True)
    clients = Authority(tmp / "clients", "Client CA")
    secret = tmp / "jwt.secret"
    secret.write_bytes(b"loadtest-" * 6)
    base = settings_for("sqlite", tmp)
    settings = replace(
        base,
        server=replace(
            base.server,
            tls_cert_file=str(issued.cert_file),
            tls_key_file=str(issued.key_file),
            tls_client_ca_file=str(clients.cert_file),
        ),
        auth=AuthSettings(jwt_secret_file=str(secret)),
    )
    async with running_server(settings) as running:
        token = mint_token(settings.auth, ["summary:write"], 600)
        yield Secured(running, servers.cert_file, clients.issue("loadtest", server=False), token)


async def loadtest(*argv: str | Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`python -m loadtest ...` from the repository: exit code, stdout, stderr."""
    base = {k: v for k, v in os.environ.items() if k != "LOOM_TOKEN"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "loadtest",
        *map(str, argv),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**base, **(env or {})},
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), 240)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"python -m loadtest {argv} did not finish within 240 s")
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def tls_flags(secured: Secured) -> list[str | Path]:
    return [
        "--target",
        secured.target,
        "--tls-ca",
        secured.ca,
        "--tls-cert",
        secured.client.cert_file,
        "--tls-key",
        secured.client.key_file,
    ]


def counts(report: dict[str, object]) -> dict[str, tuple[int, dict[str, int], int]]:
    """Per phase: calls that succeeded, failures by code, arrivals dropped."""
    phases = report["phases"]
    assert isinstance(phases, dict)
    return {name: (p["ok"], p["errors"], p["dropped"]) for name, p in phases.items()}


class TestSecuredTarget:
    @pytest.mark.parametrize("source", ["file", "environment"])
    async def test_every_call_succeeds_over_mutual_tls_with_a_token(
        self, secured: Secured, tmp_path: Path, source: str
    ) -> None:
        """Every planned call of every phase succeeds (`--token @FILE` or $LOOM_TOKEN); the
        report says how it connected and holds no token."""
        out = tmp_path / "report.json"
        token_file = tmp_path / "token"
        token_file.write_text(secured.token + "\n")
        by_flag = source == "file"
        code, stdout, stderr = await loadtest(
            "summary",
            *tls_flags(secured),
            *(["--token", f"@{token_file}"] if by_flag else []),
            *TINY,
            "--json",
            out,
            env=None if by_flag else {"LOOM_TOKEN": secured.token},
        )
        assert code == 0, f"{stdout}\n{stderr}"
        text = out.read_text()
        report = json.loads(text)
        assert counts(report) == {name: (n, {}, 0) for name, n in PLANNED.items()}
        assert report["params"]["connection"] == {"tls": "mutual", "bearer_token": True}
        assert secured.token not in text

    async def test_a_token_on_the_command_line_is_not_recorded(
        self, secured: Secured, tmp_path: Path
    ) -> None:
        """`--token VALUE` works, and the report's command line shows REDACTED in its place."""
        out = tmp_path / "report.json"
        code, stdout, stderr = await loadtest(
            "summary", *tls_flags(secured), "--token", secured.token, *TINY, "--json", out
        )
        assert code == 0, f"{stdout}\n{stderr}"
        text = out.read_text()
        assert counts(json.loads(text)) == {name: (n, {}, 0) for name, n in PLANNED.items()}
        assert secured.token not in text
        assert "--token REDACTED" in json.loads(text)["machine"]["command"]

    async def test_without_a_token_calls_are_unauthenticated(
        self, secured: Secured, tmp_path: Path
    ) -> None:
        """No token: health (open) passes, every Summary call is UNAUTHENTICATED, and the run
        exits 1 naming it."""
        out = tmp_path / "report.json"
        code, stdout, stderr = await loadtest("summary", *tls_flags(secured), *TINY, "--json", out)
        assert code == 1, f"{stdout}\n{stderr}"
        assert "UNAUTHENTICATED" in stderr
        assert counts(json.loads(out.read_text())) == {
            "health-sqlite": (3, {}, 0),
            "record-sqlite": (0, {"UNAUTHENTICATED": 4}, 0),
            "get-sqlite": (0, {"UNAUTHENTICATED": 3}, 0),
        }


class TestFlagErrors:
    async def test_a_client_certificate_without_its_key_is_a_usage_error(
        self, secured: Secured
    ) -> None:
        """--tls-cert without --tls-key is refused as a usage error (exit 2), before any call."""
        code, _, stderr = await loadtest(
            "summary",
            "--target",
            secured.target,
            "--tls-ca",
            secured.ca,
            "--tls-cert",
            secured.client.cert_file,
            *TINY,
        )
        assert code == 2
        assert "usage:" in stderr
        assert "--tls-cert and --tls-key go together" in stderr

    async def test_an_unreadable_file_is_named(self, secured: Secured, tmp_path: Path) -> None:
        """A TLS file that cannot be read is named with its flag, as a usage error, no traceback."""
        missing = tmp_path / "no-such-ca.pem"
        code, _, stderr = await loadtest(
            "summary", "--target", secured.target, "--tls-ca", missing, *TINY
        )
        assert code == 2
        assert f"--tls-ca {missing}: cannot read it" in stderr
        assert "Traceback" not in stderr

    async def test_tls_flags_need_a_target(self, secured: Secured) -> None:
        """A server the harness starts is plaintext: TLS flags without --target are refused."""
        code, _, stderr = await loadtest("summary", "--tls-ca", secured.ca, *TINY)
        assert code == 2
        assert "--tls-ca: for --target only" in stderr
