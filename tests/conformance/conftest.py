"""One ThreadStore per selected engine, each in a fresh namespace."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage import factory
from storage.ports import ThreadStore
from tests.conftest import selected_engines
from tests.engines import settings_for

THREAD_ENGINES = ("sqlite", "bigtable", "cassandra")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "thread_engine" in metafunc.fixturenames:
        engines = selected_engines(metafunc.config, THREAD_ENGINES)
        metafunc.parametrize("thread_engine", engines, ids=engines)


@pytest.fixture
async def thread_store(thread_engine: str, tmp_path: Path) -> AsyncIterator[ThreadStore]:
    """A ThreadStore on `thread_engine` with no data in it."""
    settings = settings_for(thread_engine, tmp_path, threadweaver_store=thread_engine)
    store = await factory.open_thread_store(settings)
    try:
        yield store
    finally:
        await store.close()
