"""Real in-process servers for end-to-end tests, one per engine where the test asks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.conftest import selected_engines
from tests.engines import settings_for
from tests.serving import Running, running_server

WEAVER_ENGINES = ("sqlite", "bigtable", "cassandra")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "weaver_engine" in metafunc.fixturenames:
        engines = selected_engines(metafunc.config, WEAVER_ENGINES)
        metafunc.parametrize("weaver_engine", engines, ids=engines, scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def weaver_server(
    weaver_engine: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Running]:
    """A server whose ThreadWeaver state lives on `weaver_engine`, shared by a module."""
    data = Path(tmp_path_factory.mktemp(f"tw-{weaver_engine}"))
    settings = settings_for(weaver_engine, data, threadweaver_store=weaver_engine)
    async with running_server(settings) as running:
        yield running
