"""Release 1.0.0 as a process: its own tree, extracted from git, served on today's virtualenv.

`tree()` runs ``scripts/releases/tree.sh`` (``make release-tree``: the tag ``v1.0.0``, or
the commit it names when a clone has no tags) once per run; `env()` puts that tree's packages
(``server``, ``storage``, and the generated ``loom.v1`` of its client) first on PYTHONPATH,
so ``python -m server.cli serve`` is 1.0.0's code, not today's. It runs on today's virtualenv
because its dependencies are a subset of today's (its ``pyproject.toml``); the day one of them
no longer runs it, give the tree a virtualenv of its own from its ``requirements.lock``.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

from tests.engines import REPO

__all__ = ["RELEASE_TAG", "env", "program", "tree"]

RELEASE_TAG = "v1.0.0"
"""The tag of the commit that recorded contract 1.0.0 (``protos/VERSION``); the script
falls back to that commit in a clone without tags."""


@functools.cache
def tree() -> Path:
    """The release's source tree (extracted on first use, reused after)."""
    done = subprocess.run(
        [str(REPO / "scripts/releases/tree.sh"), RELEASE_TAG],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    path = Path(done.stdout.strip().splitlines()[-1])
    assert (path / "protos/VERSION").read_text().strip() == "1.0.0"
    return path


def program() -> tuple[str, ...]:
    """The command that runs the release's ``loom`` (with `env()`)."""
    return (sys.executable, "-P", "-m", "server.cli")  # -P: not the cwd (today's tree) first


def env() -> dict[str, str]:
    """PYTHONPATH that makes `program()` the release's code."""
    root = tree()
    return {"PYTHONPATH": f"{root}:{root / 'clients/python'}"}
