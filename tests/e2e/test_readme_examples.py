"""Every example in the README works as written after `make run`.

The examples are the README's fenced ``sh`` and ``python`` blocks that call the server (they
name ``localhost:50051``). Each runs unchanged against a real `loom serve` set up the way
`make run` sets it up: the demo hierarchy written into a fresh data directory, then the
server started on it (`tests/unit/storage/test_demo_source.py` pins that `make run` does
exactly this). Only the address is changed, to the test server's free port. A shell block
runs under ``bash -euo pipefail``, so a call that does not answer OK (grpcurl exits non-zero
then) fails the block, and so does a pipeline or ``$(...)`` around it.

Nothing is skipped silently: the number of examples is pinned, and a block that mentions a
calling tool without naming the address (and so would not run here) fails the test.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.markdown import Block, blocks
from tests.serving import loom_process

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
TOOLS_BIN = Path.home() / ".cache" / "loom" / "bin"
ADDRESS = "localhost:50051"
CALLERS = ("grpcurl", "ghz", "loom_client", "LoomClient")
EXPECTED_EXAMPLES = 10
"""Shell and Python blocks in the README that call the server. Change it with the README."""


def examples(text: str) -> list[Block]:
    """The blocks that call the server: shell or Python naming its address."""
    return [b for b in blocks(text) if b.language in {"sh", "python"} and ADDRESS in b.code]


README_EXAMPLES = examples(README.read_text(encoding="utf-8"))


class TestExtraction:
    def test_every_example_is_found(self) -> None:
        """The README holds as many examples as this test expects: one dropped from the
        extraction (a fence renamed, the address changed) fails here, not silently."""
        assert len(README_EXAMPLES) == EXPECTED_EXAMPLES, [e.name for e in README_EXAMPLES]

    def test_no_call_escapes_the_extraction(self) -> None:
        """A block that uses a calling tool either names the address (and runs here) or is
        not a shell or Python block at all."""
        text = README.read_text(encoding="utf-8")
        stray = [
            b.name
            for b in blocks(text)
            if any(tool in b.code for tool in CALLERS) and b not in README_EXAMPLES
        ]
        assert stray == []

    def test_one_json_field_name_style(self) -> None:
        """JSON in the examples uses the proto's field names, as grpcurl prints them: no
        lowerCamelCase key anywhere."""
        camel = re.compile(r'"[a-z]+[A-Z]\w*"\s*:')
        found = [(e.name, m.group()) for e in README_EXAMPLES for m in camel.finditer(e.code)]
        assert found == []


def _tool_path() -> str:
    """PATH for the examples: make tools' directory and this interpreter's before the rest."""
    missing = [t for t in ("grpcurl", "jq") if not (shutil.which(t) or (TOOLS_BIN / t).exists())]
    assert not missing, f"{missing} not installed: make tools (grpcurl); Debian's jq"
    return os.pathsep.join([str(TOOLS_BIN), str(Path(sys.executable).parent), os.environ["PATH"]])


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def make_run(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """`make run`'s two steps on a fresh data directory: the demo hierarchy, then `loom
    serve` on it. Yields the address it listens on."""
    tmp = tmp_path_factory.mktemp("readme")
    data = tmp / "data"
    demo = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "storage.sqlite.demo_source", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    async with loom_process(tmp, data_dir=data) as server:
        yield server.target


@pytest.mark.parametrize("example", README_EXAMPLES, ids=[e.name for e in README_EXAMPLES])
def test_example_answers_ok(example: Block, make_run: str, tmp_path: Path) -> None:
    """The block, as written but for the address, exits 0: every call in it answered OK."""
    code = example.code.replace(ADDRESS, make_run)
    code = code.replace(".venv/bin/python", sys.executable)
    if example.language == "python":
        script = tmp_path / "example.py"
        script.write_text(code, encoding="utf-8")
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", code]
    out = subprocess.run(
        command,
        cwd=REPO,
        env={**os.environ, "PATH": _tool_path()},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, f"{example.name} exited {out.returncode}:\n{out.stderr}"
    assert out.stdout.strip(), f"{example.name} printed nothing"
