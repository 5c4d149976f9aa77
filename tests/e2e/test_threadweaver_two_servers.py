"""Property: two `loom serve` processes weaving into one store still yield union-find.

Two real server processes (subprocesses, as two replicas would run) share one Bigtable
table prefix or one Cassandra keyspace. Concurrent clients are spread over both; afterwards
both servers must answer every thread with its union-find component (`weaving.py`), and
the stored links must be star-complete: writers in different processes racing on the same
components still leave every UT one link from its smallest. (The embedded SQLite engine is
one file of one process; several processes over it are `loom serve --workers`' business.)
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loom.v1 import threadweaver_pb2_grpc

from server.config import Settings
from storage import factory
from storage.ports import ThreadStore
from tests.conftest import selected_engines
from tests.e2e.weaving import (
    Stub,
    assert_star_complete,
    assert_union_find,
    corpora,
    namespace,
    weave_chain_at_once,
    weave_concurrently,
)
from tests.engines import settings_for
from tests.serving import loom_process

ENGINES = ("bigtable", "cassandra")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "shared_engine" in metafunc.fixturenames:
        engines = selected_engines(metafunc.config, ENGINES)
        metafunc.parametrize("shared_engine", engines, ids=engines, scope="module")


def server_env(settings: Settings) -> dict[str, str]:
    """What `loom serve` needs to reach `settings`' namespace (engine addresses stay)."""
    engine = settings.storage.threadweaver_store
    if engine == "bigtable":
        bt = settings.bigtable
        return {
            "BIGTABLE_EMULATOR_HOST": os.environ["BIGTABLE_EMULATOR_HOST"],
            "LOOM_BIGTABLE__PROJECT": bt.project,
            "LOOM_BIGTABLE__INSTANCE": bt.instance,
            "LOOM_BIGTABLE__TABLE_PREFIX": bt.table_prefix,
            "LOOM_BIGTABLE__CREATE_TABLES": "true",
        }
    cs = settings.cassandra
    return {
        "LOOM_CASSANDRA__CONTACT_POINTS": ",".join(cs.contact_points),
        "LOOM_CASSANDRA__PORT": str(cs.port),
        "LOOM_CASSANDRA__KEYSPACE": cs.keyspace,
        "LOOM_CASSANDRA__CREATE_SCHEMA": "true",
    }


@pytest.fixture(scope="module")
def shared_settings(shared_engine: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return settings_for(
        shared_engine, tmp_path_factory.mktemp("tw2"), threadweaver_store=shared_engine
    )


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def two_servers(
    shared_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[list[Stub]]:
    """Two `loom serve` processes on one namespace, started one after the other (the first
    creates the schema), and a stub for each."""
    env = server_env(shared_settings)
    args = ["--threadweaver-store", shared_settings.storage.threadweaver_store]
    tmp = tmp_path_factory.mktemp("tw2-servers")
    async with contextlib.AsyncExitStack() as stack:
        stubs: list[Stub] = []
        for _ in range(2):
            served = await stack.enter_async_context(loom_process(tmp, *args, env=env))
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(served.target))
            stubs.append(threadweaver_pb2_grpc.ThreadWeaverStub(channel))
        yield stubs


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def shared_store(shared_settings: Settings) -> AsyncIterator[ThreadStore]:
    store = await factory.open_thread_store(shared_settings)
    try:
        yield store
    finally:
        await store.close()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=corpora, rng=st.randoms(use_true_random=False))
async def test_two_servers_weave_union_find_components(
    two_servers: list[Stub],
    shared_store: ThreadStore,
    raw: list[tuple[int, int, str, int]],
    rng: random.Random,
) -> None:
    """Clients on two server processes at once: union-find components on both servers, and
    every unified thread one link from its smallest UT."""
    messages = namespace(raw)
    await weave_concurrently(two_servers, messages, rng, clients=6)
    await assert_star_complete(shared_store, messages)
    await assert_union_find(two_servers, messages)


async def test_a_chain_merged_from_both_servers_at_once(
    two_servers: list[Stub], shared_store: ThreadStore
) -> None:
    """60 unified threads chained by 59 merges, all woven at the same moment through two
    processes: one unified thread on both servers, every UT linked to its smallest."""
    messages = await weave_chain_at_once(two_servers, 60)
    await assert_star_complete(shared_store, messages)
    await assert_union_find(two_servers, messages)
