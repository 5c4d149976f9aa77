"""A real Loom server, in-process, on a free port, with a grpc.aio channel to it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from server.app import LoomServer, build_server
from server.config import Settings

T = TypeVar("T")


@dataclass
class Running:
    """A started server and a channel to it."""

    loom: LoomServer
    channel: grpc.aio.Channel

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.loom.port}"


@asynccontextmanager
async def running_server(settings: Settings) -> AsyncIterator[Running]:
    """Starts the server from `settings`, yields it with a channel, drains it afterwards."""
    loom = await build_server(settings)
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{loom.port}",
        options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)],
    )
    try:
        yield Running(loom, channel)
    finally:
        await channel.close()
        await loom.stop()


async def eventually(
    probe: Callable[[], Awaitable[T]],
    ok: Callable[[T], bool],
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
) -> T:
    """Polls `probe` until `ok(result)`; fails with the last result after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await probe()
        if ok(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s; last: {result!r}")
        await asyncio.sleep(interval_s)


def violations(error: grpc.aio.AioRpcError) -> dict[str, str]:
    """The google.rpc.BadRequest field violations carried by an INVALID_ARGUMENT error."""
    status = rpc_status.from_call(error)
    assert status is not None
    found: dict[str, str] = {}
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            found.update({v.field: v.description for v in bad.field_violations})
    return found
