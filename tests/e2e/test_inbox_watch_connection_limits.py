"""WatchInbox streams under the server's connection limits: the idle timeout leaves a quiet
stream alone, the maximum connection age (plus its grace) ends a stream UNAVAILABLE, and the
Python client's watch resumes across it with no gap and no duplicate."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import grpc
from loom.v1 import inbox_pb2, inbox_pb2_grpc
from loom_client import LoomClient

from server.config import Settings
from tests.e2e.test_inbox_grpc import post
from tests.engines import settings_for
from tests.inbox_watching import Watcher
from tests.serving import eventually, running_server

K = inbox_pb2


def _settings(tmp_path: Path, **server: float) -> Settings:
    base = settings_for("sqlite", tmp_path, inbox_store="sqlite")
    return replace(base, server=replace(base.server, **server))  # type: ignore[arg-type]


async def test_an_idle_connection_is_closed_and_a_quiet_watch_is_not(tmp_path: Path) -> None:
    async with running_server(_settings(tmp_path, max_connection_idle_s=0.5)) as one:
        stub = inbox_pb2_grpc.InboxStub(one.channel)
        watcher = Watcher(stub, "bob")
        await watcher.synced()
        idle = grpc.aio.insecure_channel(
            one.target, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        async with idle:
            await inbox_pb2_grpc.InboxStub(idle).GetUnreadCount(
                K.GetUnreadCountRequest(inbox_id="bob")
            )
            assert idle.get_state() == grpc.ChannelConnectivity.READY
            await eventually(
                lambda: _state(idle), lambda s: s != grpc.ChannelConnectivity.READY, timeout_s=10
            )
        await asyncio.sleep(1.0)  # twice the idle timeout, with no event on the stream
        assert watcher.error is None
        await post(stub, "t1", 1, "alice", ["bob"])
        await eventually(lambda: _count(watcher), lambda n: n >= 1, timeout_s=10)
        await watcher.close()


async def _state(channel: grpc.aio.Channel) -> grpc.ChannelConnectivity:
    return channel.get_state()


async def _count(watcher: Watcher) -> int:
    return len(watcher.changes)


async def test_the_connection_age_ends_a_watch_unavailable(tmp_path: Path) -> None:
    settings = _settings(tmp_path, max_connection_age_s=1.0, max_connection_age_grace_s=0.5)
    async with running_server(settings) as one:
        watcher = Watcher(inbox_pb2_grpc.InboxStub(one.channel), "bob")
        await watcher.synced()
        error = await watcher.ended(timeout_s=10)
        assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_the_client_s_watch_resumes_across_connection_ages_missing_nothing(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path, max_connection_age_s=1.0, max_connection_age_grace_s=0.3)
    async with running_server(settings) as one, LoomClient.connect(one.target) as client:
        stub = inbox_pb2_grpc.InboxStub(one.channel)
        seen: list[str] = []

        async def read() -> None:
            request = K.WatchInboxRequest(inbox_id="bob")
            async for event in client.inbox.watch_inbox(request, timeout=60.0):
                if event.kind == K.INBOX_EVENT_KIND_DELIVERED:
                    seen.extend(event.thread_ids)

        reader = asyncio.create_task(read())
        await asyncio.sleep(0.3)
        posted = [f"t{m}" for m in range(1, 13)]
        for m, thread in enumerate(posted, start=1):  # 3.6 s: three connection ages at least
            await post(stub, thread, m, "alice", ["bob"])
            await asyncio.sleep(0.3)
        await eventually(lambda: _len(seen), lambda n: n >= len(posted), timeout_s=20)
        reader.cancel()
        assert seen == posted


async def _len(items: list[str]) -> int:
    return len(items)
