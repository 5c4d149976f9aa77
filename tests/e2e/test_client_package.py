"""loom-client as another team gets it: its wheel alone in a fresh virtualenv, against a server.

The wheel is built from clients/python (copied out of the tree, so the build leaves nothing
behind) and installed with its dependencies into an empty virtualenv; everything is then run
by that virtualenv's interpreter, from a directory outside the repository, so nothing of this
checkout can be imported by accident. The server runs in this process's event loop, hence
asyncio subprocesses throughout (a blocking call would stall it).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from loom.v1 import threadweaver_pb2, threadweaver_pb2_grpc
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.engines import settings_for
from tests.serving import Running, running_server

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"


@dataclass(frozen=True)
class Venv:
    """The fresh virtualenv holding only the loom-client wheel and its dependencies."""

    root: Path
    workdir: Path
    """An empty directory outside the repository: the commands' working directory."""

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"


async def _run(*argv: str | Path, cwd: Path, timeout_s: float = 600.0) -> tuple[int, str]:
    """Exit code and combined output, without blocking the event loop; no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    process = await asyncio.create_subprocess_exec(
        *map(str, argv),
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"{argv} did not finish within {timeout_s}s")
    assert process.returncode is not None
    return process.returncode, output.decode()


async def _ok(*argv: str | Path, cwd: Path) -> str:
    code, output = await _run(*argv, cwd=cwd)
    assert code == 0, f"{argv} exited {code}:\n{output}"
    return output


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """Builds the wheel (pip wheel --no-deps) and installs it into a new, empty virtualenv."""
    tmp = Path(tmp_path_factory.mktemp("client-package"))
    source = tmp / "src"
    shutil.copytree(
        CLIENT,
        source,
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".*_cache"),
    )
    wheels = tmp / "wheels"
    await _ok(
        sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, source, cwd=tmp
    )
    built = sorted(wheels.glob("loom_client-*.whl"))
    assert len(built) == 1, f"expected one loom_client wheel, found {built}"

    root = tmp / "venv"
    await _ok(sys.executable, "-m", "venv", root, cwd=tmp)
    env = Venv(root, tmp / "work")
    env.workdir.mkdir()
    await _ok(env.python, "-m", "pip", "install", "-q", built[0], cwd=env.workdir)
    return env


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """One embedded-engine server for the installed CLI to call."""
    settings = settings_for("sqlite", Path(tmp_path_factory.mktemp("client-package-server")))
    async with running_server(settings) as running:
        yield running


def _dependencies(project: Path) -> set[str]:
    text = (project / "pyproject.toml").read_text(encoding="utf-8")
    return {
        canonicalize_name(Requirement(r).name)
        for r in tomllib.loads(text)["project"]["dependencies"]
    }


class TestInstalledAlone:
    async def test_the_client_and_the_generated_code_import_from_the_virtualenv(
        self, venv: Venv
    ) -> None:
        """loom_client and loom.v1 come from the installed wheel, not from this checkout."""
        output = await _ok(
            venv.python,
            "-c",
            "import loom.v1.threadweaver_pb2 as g, loom_client as c; print(g.__file__, c.__file__)",
            cwd=venv.workdir,
        )
        for path in output.split():
            assert Path(path).is_relative_to(venv.root), output

    @pytest.mark.parametrize("module", ["server", "storage"])
    async def test_the_server_packages_are_not_installed(self, venv: Venv, module: str) -> None:
        """The server's own top-level packages do not come with the client."""
        code, output = await _run(venv.python, "-c", f"import {module}", cwd=venv.workdir)
        assert code != 0, output
        assert f"ModuleNotFoundError: No module named '{module}'" in output

    async def test_no_server_dependency_is_installed(self, venv: Venv) -> None:
        """None of the server's own dependencies (database drivers, cloud SDKs, sketches) is
        pulled in: only loom-client's, and what those need."""
        listed = await _ok(venv.python, "-m", "pip", "list", "--format", "json", cwd=venv.workdir)
        installed = {canonicalize_name(d["name"]) for d in json.loads(listed)}
        assert "loom-client" in installed
        assert _dependencies(CLIENT) <= installed
        server_only = _dependencies(ROOT) - _dependencies(CLIENT) - {"loom-client"}
        assert sorted(server_only & installed) == []


class TestInstalledCli:
    async def test_health(self, venv: Venv, server: Running) -> None:
        """`python -m loom_client health` reads grpc.health.v1 from the server."""
        output = await _ok(
            venv.python, "-m", "loom_client", "--target", server.target, "health", cwd=venv.workdir
        )
        assert json.loads(output) == {"status": "SERVING"}

    async def test_call_weaves_a_message_the_server_then_holds(
        self, venv: Venv, server: Running
    ) -> None:
        """`call ThreadWeaver WeaveMessage --json ...` writes through the real server: the
        unified thread it prints is what the server answers for that thread afterwards."""
        body = {
            "message": {
                "gid": "pkg",
                "thread_id": "pkg-t1",
                "rfc_message_id": "<pkg-1@example.com>",
                "sent_at": "2024-01-01T00:00:00Z",
            }
        }
        output = await _ok(
            venv.python,
            "-m",
            "loom_client",
            "--target",
            server.target,
            "call",
            "ThreadWeaver",
            "WeaveMessage",
            "--json",
            json.dumps(body),
            cwd=venv.workdir,
        )
        unified = json.loads(output)["unified_thread_id"]
        read = await threadweaver_pb2_grpc.ThreadWeaverStub(server.channel).GetUnifiedThread(
            threadweaver_pb2.GetUnifiedThreadRequest(gid="pkg", thread_id="pkg-t1"), timeout=10
        )
        assert list(read.unified_thread_ids) == [unified]
