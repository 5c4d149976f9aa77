"""PostMessage's idempotency key over gRPC on every InboxStore engine: a post reusing
(thread_id, message_id) with other recipients reaches them, within the call (small) or with a
delivery of its own (large, 2,000 recipients); an identical retry stays idempotent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
import pytest_asyncio
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from server.config import Settings
from storage.engines import INBOX_STORES
from tests.conftest import selected_engines
from tests.e2e.test_inbox_grpc import fresh, post, unread
from tests.engines import settings_for
from tests.serving import Running, eventually, running_server

DONE = inbox_pb2.DELIVERY_STATE_DONE


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "inbox_engine" in metafunc.fixturenames:
        engines = selected_engines(metafunc.config, INBOX_STORES.names)
        metafunc.parametrize("inbox_engine", engines, ids=engines, scope="module")


@pytest.fixture(scope="module")
def settings(inbox_engine: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    data = Path(tmp_path_factory.mktemp(f"inbox-key-{inbox_engine}"))
    base = settings_for(inbox_engine, data, inbox_store=inbox_engine)
    return replace(base, inbox=replace(base.inbox, progress_interval_s=0.0))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(settings: Settings) -> AsyncIterator[Running]:
    async with running_server(settings) as running:
        yield running


def stub(running: Running) -> inbox_pb2_grpc.InboxStub:
    return inbox_pb2_grpc.InboxStub(running.channel)


async def counts(s: inbox_pb2_grpc.InboxStub, inboxes: list[str]) -> set[int]:
    sem = asyncio.Semaphore(64)

    async def one(inbox: str) -> int:
        async with sem:
            return await unread(s, inbox)

    return set(await asyncio.gather(*(one(i) for i in inboxes)))


async def finished(s: inbox_pb2_grpc.InboxStub, delivery_id: str) -> inbox_pb2.Delivery:
    return await eventually(
        lambda: s.GetDelivery(inbox_pb2.GetDeliveryRequest(delivery_id=delivery_id)),
        lambda d: d.state == DONE,
        timeout_s=60.0,
    )


class TestReusedKey:
    async def test_a_small_post_reaches_the_new_recipients(self, server: Running) -> None:
        """Delivered in the call: the second post's recipients get the thread; a retry of
        either counts nothing twice, and a first recipient who read it stays read."""
        s, thread, sender = stub(server), fresh("small"), fresh("boss")
        first = [fresh("a") for _ in range(3)]
        second = [fresh("b") for _ in range(3)]
        assert (await post(s, thread, 7, sender, first)).delivered
        await s.MarkThreads(inbox_pb2.MarkThreadsRequest(inbox_id=first[0], all=True, read=True))
        reply = await post(s, thread, 7, sender, [*second, first[0]])
        assert (reply.delivered, reply.delivery_id, reply.inboxes_updated) == (True, "", 5)
        await post(s, thread, 7, sender, [*second, first[0]])
        assert [await unread(s, i) for i in [*first, *second]] == [0, 1, 1, 1, 1, 1]

    async def test_a_large_post_gets_a_delivery_of_its_own(self, server: Running) -> None:
        """2,000 recipients, then the same key with 2,000 others: a second delivery id
        whose GetDelivery reaches DONE over 2,000 inboxes, and every inbox of both posts
        holds the thread once; an identical retry (reordered) answers that second id."""
        s, thread, sender = stub(server), fresh("large"), fresh("boss")
        first = [fresh("a") for _ in range(2000)]
        second = [fresh("b") for _ in range(2000)]
        one = await post(s, thread, 7, sender, first)
        assert not one.delivered
        await finished(s, one.delivery_id)
        two = await post(s, thread, 7, sender, second)
        assert two.delivery_id not in ("", one.delivery_id)
        done = await finished(s, two.delivery_id)
        assert (done.progress.done, done.progress.total, done.error) == (2000, 2000, "")
        again = await post(s, thread, 7, sender, list(reversed(second)))
        assert (again.delivered, again.delivery_id) == (True, two.delivery_id)
        assert await counts(s, [*first, *second]) == {1}
