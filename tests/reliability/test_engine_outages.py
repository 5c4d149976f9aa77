"""Engine outages beyond Cassandra: the Bigtable emulator hangs, DynamoDB Local goes away.

Like `test_inbox_cassandra_outage.py`, under load: while the engine is out, calls fail
(UNAVAILABLE or DEADLINE_EXCEEDED, most of them refused by the open circuit breaker rather
than left to their deadline), the service's health turns NOT_SERVING while the server's own
stays SERVING; once the engine is back, calls succeed again, the service is SERVING, and
everything acknowledged before, during or after the outage reads back.

The Bigtable emulator keeps its data in memory only, so its outage is a *hang*: the process
is frozen (SIGSTOP) and thawed (SIGCONT) — what a network partition or a stalled node looks
like to a client. DynamoDB Local keeps its data on disk and is stopped and started for real.
The engine taken down is the test's own instance (`own_engine.py`: its own ports and state
directory), never the shared one, so nothing else notices and the order of tests does not
matter.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from loom.v1 import (
    common_pb2,
    summary_pb2,
    summary_pb2_grpc,
    threadweaver_pb2,
    threadweaver_pb2_grpc,
)

from server.config import BreakerSettings, Settings
from tests.engines import settings_for
from tests.reliability.own_engine import OwnEngine, own_engine
from tests.serving import Running, eventually, running_server

DEADLINE_S = 2.0
OUTAGE_CALLS = 30
FAILED = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


@dataclass
class Load:
    """Outcomes of the calls (time, code, details) and what was acknowledged."""

    outcomes: list[tuple[float, grpc.StatusCode, str]] = field(default_factory=list)
    acked: list[tuple[str, str]] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def call(self, call: Awaitable[object]) -> bool:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await call
        except grpc.aio.AioRpcError as error:
            self.outcomes.append((started, error.code(), error.details() or ""))
            return False
        self.outcomes.append((started, grpc.StatusCode.OK, ""))
        return True

    def since(self, t: float) -> list[tuple[float, grpc.StatusCode, str]]:
        return [o for o in self.outcomes if o[0] >= t]


@dataclass(frozen=True)
class Outage:
    """How one engine goes out and comes back, and the service that runs on it."""

    engine: str
    service: str
    stores: dict[str, str]
    down: Callable[[OwnEngine], None]
    up: Callable[[OwnEngine], None]
    writer: Callable[[grpc.aio.Channel, Load, int], Coroutine[Any, Any, None]]
    verify: Callable[[grpc.aio.Channel, Load], Awaitable[None]]


async def weave_writer(channel: grpc.aio.Channel, load: Load, w: int) -> None:
    stub = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    for i in itertools.count():
        if load.stop.is_set():
            return
        message = threadweaver_pb2.WovenMessage(
            gid=f"o{w}", thread_id=f"t{i}", rfc_message_id=f"<o{w}-{i}@outage.example>",
            sent_at=Timestamp(seconds=1_700_000_000 + i),
        )  # fmt: skip
        call = stub.WeaveMessage(
            threadweaver_pb2.WeaveMessageRequest(message=message), timeout=DEADLINE_S
        )
        if await load.call(call):
            load.acked.append((f"o{w}", f"t{i}"))
        await asyncio.sleep(0.01)


async def weave_verify(channel: grpc.aio.Channel, load: Load) -> None:
    stub = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    refs = [common_pb2.ThreadRef(gid=g, thread_id=t) for g, t in load.acked]
    for start in range(0, len(refs), 100):
        reply = await stub.ResolveThreads(
            threadweaver_pb2.ResolveThreadsRequest(threads=refs[start : start + 100])
        )
        assert all(r.found for r in reply.threads), "acknowledged weaves lost"


async def summary_writer(channel: grpc.aio.Channel, load: Load, w: int) -> None:
    stub = summary_pb2_grpc.SummaryStub(channel)
    for i in itertools.count():
        if load.stop.is_set():
            return
        message, recipient = f"o-m{w}", f"o{w}-{i}"
        event = summary_pb2.DeliveryEvent(
            recipient_id=recipient, status=summary_pb2.DELIVERY_STATUS_DELIVERED
        )
        request = summary_pb2.RecordDeliveryEventsRequest(message_id=message, events=[event])
        if await load.call(stub.RecordDeliveryEvents(request, timeout=DEADLINE_S)):
            load.acked.append((message, recipient))
        await asyncio.sleep(0.01)


async def summary_verify(channel: grpc.aio.Channel, load: Load) -> None:
    stub = summary_pb2_grpc.SummaryStub(channel)
    wanted: dict[str, set[str]] = {}
    for message, recipient in load.acked:
        wanted.setdefault(message, set()).add(recipient)
    for message, recipients in wanted.items():
        reply = await stub.GetMessageSummary(
            summary_pb2.GetMessageSummaryRequest(message_id=message)
        )
        delivered = next(
            s for s in reply.statuses if s.status == summary_pb2.DELIVERY_STATUS_DELIVERED
        )
        if delivered.exact:
            assert set(delivered.recipient_ids) >= recipients, "acknowledged events lost"
        else:
            assert delivered.count >= 0.97 * len(recipients), "acknowledged events lost"


OUTAGES = {
    "bigtable": Outage(
        "bigtable",
        "loom.v1.ThreadWeaver",
        {"threadweaver_store": "bigtable"},
        down=lambda own: os.kill(own.pid(), signal.SIGSTOP),
        up=lambda own: os.kill(own.pid(), signal.SIGCONT),
        writer=weave_writer,
        verify=weave_verify,
    ),
    "dynamodb": Outage(
        "dynamodb",
        "loom.v1.Summary",
        {"summary_store": "dynamodb"},
        down=lambda own: own.run("stop"),
        up=lambda own: own.run("start"),
        writer=summary_writer,
        verify=summary_verify,
    ),
}


def outage_settings(outage: Outage, tmp: Path, own: OwnEngine) -> Settings:
    """Settings on `own` (the Bigtable emulator is found through BIGTABLE_EMULATOR_HOST)."""
    base = settings_for(outage.engine, tmp, **outage.stores)
    return replace(
        base,
        bigtable=replace(base.bigtable, request_timeout_s=1.0),
        dynamodb=replace(base.dynamodb, endpoint_url=f"http://127.0.0.1:{own.port}"),
        breaker=BreakerSettings(failure_threshold=3, reset_timeout_s=0.5),
    )


async def status(running: Running, service: str) -> int:
    stub = health_pb2_grpc.HealthStub(running.channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=30)
    return int(reply.status)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.engine(n)) for n in OUTAGES],
)
async def test_outage_fails_fast_reports_it_and_loses_nothing(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the engine is out: failures only, mostly the breaker's, the service NOT_SERVING
    and the server SERVING; once it is back: calls succeed and every acknowledged write reads
    back."""
    outage = OUTAGES[name]
    with own_engine(outage.engine) as own:
        if outage.engine == "bigtable":
            monkeypatch.setenv("BIGTABLE_EMULATOR_HOST", f"127.0.0.1:{own.port}")
        await _outage(outage, outage_settings(outage, tmp_path, own), own)


async def _outage(outage: Outage, settings: Settings, own: OwnEngine) -> None:
    load = Load()
    went_down = False
    try:
        async with running_server(settings) as running:
            tasks = [asyncio.create_task(outage.writer(running.channel, load, w)) for w in range(4)]
            await eventually(lambda: asyncio.sleep(0, len(load.acked)), lambda n: n >= 20)
            went_down = True
            await asyncio.to_thread(outage.down, own)
            t_down = asyncio.get_running_loop().time()
            await eventually(
                lambda: asyncio.sleep(0, len(load.since(t_down))),
                lambda n: n >= OUTAGE_CALLS,
                timeout_s=120.0,
            )
            await eventually(
                lambda: status(running, outage.service),
                lambda s: s == health_pb2.HealthCheckResponse.NOT_SERVING,
                timeout_s=60.0,
            )
            assert await status(running, "") == health_pb2.HealthCheckResponse.SERVING
            # Calls started once the breaker has had a few failures to see: none succeeds,
            # and most are answered by the breaker rather than by the client's deadline.
            settled = load.since(t_down)[OUTAGE_CALLS // 2 :]
            assert {code for _, code, _ in settled} <= FAILED
            assert any("circuit" in details for _, _, details in settled)
            refused = sum(code is grpc.StatusCode.UNAVAILABLE for _, code, _ in settled)
            assert refused > len(settled) // 2

            await asyncio.to_thread(outage.up, own)
            went_down = False
            t_up = asyncio.get_running_loop().time()
            await eventually(
                lambda: asyncio.sleep(0, [c for _, c, _ in load.since(t_up)[-5:]]),
                lambda codes: len(codes) == 5 and set(codes) == {grpc.StatusCode.OK},
                timeout_s=120.0,
            )
            await eventually(
                lambda: status(running, outage.service),
                lambda s: s == health_pb2.HealthCheckResponse.SERVING,
                timeout_s=60.0,
            )
            load.stop.set()
            await asyncio.gather(*tasks)
            await outage.verify(running.channel, load)
    finally:
        if went_down:
            await asyncio.to_thread(outage.up, own)
