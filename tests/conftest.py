"""Session-wide test set-up: engine selection and credentials for local emulators."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.runtime.logs import configure_logging
from tests.engines import ALL_ENGINES, DROPPER, KEYSPACES


class _SessionLog:
    """Every log line of the in-process servers goes to one file for the whole run (at debug
    level, so a failure can be read with everything a server wrote); warnings and errors are
    also shown on stderr, as in production."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("a", encoding="utf-8")

    def write(self, text: str) -> int:
        self._file.write(text)
        if '"level": "warning"' in text or '"level": "error"' in text:
            sys.stderr.write(text)
        return len(text)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


SESSION_LOG = Path(tempfile.mkdtemp(prefix="loom-test-logs-")) / "session.log"
"""Where every in-process server of this run logs."""
_SESSION_STREAM = _SessionLog(SESSION_LOG)
configure_logging("debug", stream=_SESSION_STREAM)  # type: ignore[arg-type]


def pytest_unconfigure(config: pytest.Config) -> None:
    _SESSION_STREAM.close()


# DynamoDB Local accepts any credentials, but botocore insists on having some.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "loomtest")  # DynamoDB Local: letters and digits only
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "loomtest")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--engines",
        default=os.environ.get("LOOM_TEST_ENGINES", ",".join(ALL_ENGINES)),
        help="comma-separated engines to cover (default: all; a missing one fails the run)",
    )


def selected_engines(config: pytest.Config, supported: tuple[str, ...]) -> list[str]:
    """The engines of `supported` that this run covers."""
    wanted = [e.strip() for e in str(config.getoption("--engines")).split(",") if e.strip()]
    return [e for e in supported if e in wanted]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselects (never skips) tests marked for an engine this run does not cover.

    A run narrowed on purpose (`--engines sqlite`) reports fewer tests, not skipped ones; a
    full run selects everything, and a test whose engine is then missing fails.
    """
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        engines = [m.args[0] for m in item.iter_markers("engine")]
        skip = item.get_closest_marker("skip")
        no_engine_left = skip is not None and str(skip.kwargs.get("reason", "")).startswith(
            "got empty parameter set"
        )  # a suite parametrized over engines, none of them selected
        covered = all(selected_engines(config, (engine,)) for engine in engines)
        if not no_engine_left and covered:
            keep.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session", autouse=True)
def _wait_for_keyspace_drops() -> Iterator[None]:
    """Waits, at the end of the run, for the drops the modules queued."""
    yield
    DROPPER.wait()


@pytest.fixture(scope="module", autouse=True)
def _drop_module_keyspaces(_wait_for_keyspace_drops: None) -> Iterator[None]:
    """Queues the Cassandra keyspaces a module created for dropping, once its own fixtures
    are torn down (an autouse fixture of the module scope is set up first, so torn down
    last)."""
    start = len(KEYSPACES)
    yield
    made = KEYSPACES[start:]
    del KEYSPACES[start:]
    DROPPER.drop(made)
