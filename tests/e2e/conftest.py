"""Real in-process servers for end-to-end tests, one per engine where the test asks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from server.config import Settings
from storage import factory
from storage.engines import THREAD_STORES
from storage.ports import ThreadStore
from tests.conftest import selected_engines
from tests.engines import settings_for
from tests.serving import Running, running_server

WEAVER_ENGINES = THREAD_STORES.names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "weaver_engine" in metafunc.fixturenames:
        engines = selected_engines(metafunc.config, WEAVER_ENGINES)
        metafunc.parametrize("weaver_engine", engines, ids=engines, scope="module")


@pytest.fixture(scope="module")
def weaver_settings(weaver_engine: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings of a fresh ThreadWeaver namespace on `weaver_engine`, shared by a module."""
    data = Path(tmp_path_factory.mktemp(f"tw-{weaver_engine}"))
    return settings_for(weaver_engine, data, threadweaver_store=weaver_engine)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def weaver_server(weaver_settings: Settings) -> AsyncIterator[Running]:
    """A server whose ThreadWeaver state lives on `weaver_engine`, shared by a module."""
    async with running_server(weaver_settings) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def weaver_store(weaver_settings: Settings) -> AsyncIterator[ThreadStore]:
    """A client of the same ThreadStore namespace, to inspect what the servers stored."""
    store = await factory.open_thread_store(weaver_settings)
    try:
        yield store
    finally:
        await store.close()
