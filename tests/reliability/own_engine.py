"""An engine instance of one test alone, for tests that take an engine down.

Stopping, freezing or restarting the shared engines (`scripts/engines/up.sh`) would fail
whatever else is using them, and would make a test depend on where it runs in the suite.
A test that takes an engine down starts its own instance instead, with the same script the
suite's engines come from (`scripts/engines/<engine>.sh`), in its own state directory
(`LOOM_ENGINES_DIR`) on its own free ports (`LOOM_<ENGINE>_PORT`, …), and stops and deletes
it afterwards whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.serving import free_port

REPO = Path(__file__).resolve().parents[2]

PORT_VARIABLES = {
    "bigtable": ("LOOM_BIGTABLE_PORT",),
    "cassandra": ("LOOM_CASSANDRA_PORT", "LOOM_CASSANDRA_STORAGE_PORT", "LOOM_CASSANDRA_JMX_PORT"),
    "dynamodb": ("LOOM_DYNAMODB_PORT",),
    "mariadb": ("LOOM_MARIADB_PORT",),
    "postgres": ("LOOM_POSTGRES_PORT",),
    "sqs": ("LOOM_SQS_PORT",),
}
"""What moves each engine's ports; the first is the one clients connect to."""


class OwnEngine:
    """One engine of this test alone: its own state directory, ports and data."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        # PostgreSQL runs as user postgres: its directory must be reachable by it.
        self.root = Path(tempfile.mkdtemp(prefix=f"loom-{engine}-own-"))
        self.root.chmod(0o755)
        self.ports = {variable: free_port() for variable in PORT_VARIABLES[engine]}
        self.port = self.ports[PORT_VARIABLES[engine][0]]

    def run(self, command: str) -> None:
        """`scripts/engines/<engine>.sh <command>` on this instance (start waits for it)."""
        env = {**os.environ, "LOOM_ENGINES_DIR": str(self.root)}
        env |= {variable: str(port) for variable, port in self.ports.items()}
        subprocess.run(
            [str(REPO / f"scripts/engines/{self.engine}.sh"), command],
            check=True, capture_output=True, timeout=240, env=env,
        )  # fmt: skip

    def pid(self) -> int:
        """The engine process's id (to freeze it with SIGSTOP, say)."""
        return int((self.root / self.engine / "pid").read_text().strip())


@contextlib.contextmanager
def own_engine(engine: str) -> Iterator[OwnEngine]:
    """`engine` started on its own ports, then stopped and deleted, whatever happened."""
    own = OwnEngine(engine)
    try:
        own.run("start")
        yield own
    finally:
        own.run("stop")
        shutil.rmtree(own.root, ignore_errors=True)
