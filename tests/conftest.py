"""Session-wide test set-up: engine selection and credentials for local emulators."""

from __future__ import annotations

import os

import pytest

from server.runtime.logs import configure_logging
from tests.engines import ALL_ENGINES

# JSON log lines as in production, but only warnings and up: one line per OK RPC is noise here.
configure_logging("warning")

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
        marker = item.get_closest_marker("engine")
        skip = item.get_closest_marker("skip")
        no_engine_left = skip is not None and str(skip.kwargs.get("reason", "")).startswith(
            "got empty parameter set"
        )  # a suite parametrized over engines, none of them selected
        if not no_engine_left and (marker is None or selected_engines(config, (marker.args[0],))):
            keep.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
