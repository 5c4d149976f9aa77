"""One store per port per selected engine, each in a fresh namespace.

The engines are each port's table in `storage.engines`: a port that gains an engine runs its
conformance suite on it with no change here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from server.config import Settings
from storage import factory
from storage.engines import (
    INBOX_STORES,
    ITERATION_SOURCES,
    JOB_STORES,
    SUMMARY_STORES,
    TEMPLATE_STORES,
    THREAD_STORES,
    WORK_QUEUES,
    Port,
)
from storage.ports import (
    InboxStore,
    JobStore,
    SummaryStore,
    TemplateStore,
    ThreadStore,
    WorkQueue,
)
from tests.conftest import selected_engines
from tests.engines import settings_for

TEMPLATE_TTL_S = 2.0

ENGINE_FIXTURES: dict[str, Port[Any]] = {
    "thread_engine": THREAD_STORES,
    "summary_engine": SUMMARY_STORES,
    "template_engine": TEMPLATE_STORES,
    "inbox_engine": INBOX_STORES,
    "source_engine": ITERATION_SOURCES,
    "queue_engine": WORK_QUEUES,
    "job_state_engine": JOB_STORES,
}
"""Each engine parameter of the suites, and the port whose engines it runs through."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for name, port in ENGINE_FIXTURES.items():
        if name in metafunc.fixturenames:
            engines = selected_engines(metafunc.config, port.names)
            metafunc.parametrize(name, engines, ids=engines)


@pytest.fixture
def thread_settings(thread_engine: str, tmp_path: Path) -> Settings:
    """Settings of a fresh ThreadStore namespace on `thread_engine`."""
    return settings_for(thread_engine, tmp_path, threadweaver_store=thread_engine)


@pytest.fixture
async def thread_store(thread_settings: Settings) -> AsyncIterator[ThreadStore]:
    """A ThreadStore on `thread_engine` with no data in it."""
    store = await factory.open_thread_store(thread_settings)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def thread_store_twin(
    thread_settings: Settings, thread_store: ThreadStore
) -> AsyncIterator[ThreadStore]:
    """A second, independent connection to `thread_store`'s namespace (another process's)."""
    store = await factory.open_thread_store(thread_settings)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def summary_store(summary_engine: str, tmp_path: Path) -> AsyncIterator[SummaryStore]:
    """A SummaryStore on `summary_engine` with no data in it (fresh table prefix / file)."""
    settings = settings_for(summary_engine, tmp_path, summary_store=summary_engine)
    store = await factory.open_summary_store(settings)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def inbox_store(inbox_engine: str, tmp_path: Path) -> AsyncIterator[InboxStore]:
    """An InboxStore on `inbox_engine` with no data in it (fresh keyspace / file)."""
    settings = settings_for(inbox_engine, tmp_path, inbox_store=inbox_engine)
    store = await factory.open_inbox_store(settings)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def work_queue(queue_engine: str, tmp_path: Path) -> AsyncIterator[WorkQueue]:
    """Iterator work queues "a" and "b" on `queue_engine`, empty (fresh prefix / file)."""
    settings = settings_for(queue_engine, tmp_path, iterator_queue=queue_engine)
    queue = await factory.open_work_queue(settings, ["a", "b"])
    try:
        yield queue
    finally:
        await queue.close()


@pytest.fixture
async def job_store(job_state_engine: str, tmp_path: Path) -> AsyncIterator[JobStore]:
    """An Iterator JobStore on `job_state_engine` with no jobs (fresh prefix / file)."""
    settings = settings_for(job_state_engine, tmp_path, iterator_state=job_state_engine)
    store = await factory.open_job_store(settings)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def template_store(template_engine: str, tmp_path: Path) -> AsyncIterator[TemplateStore]:
    """A TemplateStore on `template_engine`, empty, whose emails expire after 2 s."""
    settings = settings_for(template_engine, tmp_path, templates_store=template_engine)
    store = await factory.open_template_store(settings, email_ttl_s=TEMPLATE_TTL_S)
    try:
        yield store
    finally:
        await store.close()
