"""Stop Cassandra under Inbox load, start it again, lose nothing.

The lesson of the Yammer seed is that a slow or dead database must not take the service
down with it: every call fails with UNAVAILABLE (or DEADLINE_EXCEEDED), most of them answered
by the open circuit breaker rather than by the client's deadline running out, the server
itself keeps answering health checks, and once the database is back the breaker's half-open
probes close it and every acknowledged delivery is there. Nothing here bounds a wall time:
how fast a refusal is, is a property of the breaker, checked by what it answers.

The Cassandra stopped (`scripts/engines/cassandra.sh stop`, which drains and keeps the
data) and started again is this test's own node (`own_engine.py`: its own ports and state
directory), never the shared one, so nothing else notices the outage and the order of tests
does not matter.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from server.config import BreakerSettings
from tests.engines import settings_for
from tests.reliability.own_engine import OwnEngine, own_engine
from tests.serving import Running, eventually, running_server

pytestmark = pytest.mark.engine("cassandra")

DEADLINE_S = 1.5
"""Client deadline of every call under test."""
OUTAGE_CALLS = 40
"""Calls observed while Cassandra is down before it is started again."""
FAILED = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


@dataclass
class Outcome:
    """One call: when it started (monotonic), how long it took, its status."""

    started: float
    latency: float
    code: grpc.StatusCode
    details: str = ""


@dataclass
class Load:
    """What the load tasks saw; `acked` holds every post the server acknowledged."""

    outcomes: list[Outcome] = field(default_factory=list)
    acked: list[tuple[str, int, list[str]]] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)


async def timed(load: Load, call: object) -> grpc.StatusCode:
    started = time.monotonic()
    details = ""
    try:
        await call  # type: ignore[misc]
        code = grpc.StatusCode.OK
    except grpc.aio.AioRpcError as err:
        code, details = err.code(), err.details() or ""
    load.outcomes.append(Outcome(started, time.monotonic() - started, code, details))
    return code


async def poster(stub: inbox_pb2_grpc.InboxStub, load: Load, worker: int) -> None:
    ids = itertools.count(worker * 1_000_000 + 1)
    rng = random.Random(worker)
    while not load.stop.is_set():
        message_id = next(ids)
        thread = f"t{worker}-{message_id}"  # one post per thread: each ack is checkable
        recipients = rng.sample([f"r{k}" for k in range(24)], 3)
        request = inbox_pb2.PostMessageRequest(
            thread_id=thread, message_id=message_id, sender_inbox_id=f"s{worker}",
            recipient_inbox_ids=recipients,
        )  # fmt: skip
        if await timed(load, stub.PostMessage(request, timeout=DEADLINE_S)) is grpc.StatusCode.OK:
            load.acked.append((thread, message_id, recipients))
        await asyncio.sleep(0.01)


async def counter(stub: inbox_pb2_grpc.InboxStub, load: Load, worker: int) -> None:
    rng = random.Random(100 + worker)
    while not load.stop.is_set():
        request = inbox_pb2.GetUnreadCountRequest(inbox_id=f"r{rng.randrange(24)}")
        await timed(load, stub.GetUnreadCount(request, timeout=DEADLINE_S))
        await asyncio.sleep(0.005)


async def threads_of(stub: inbox_pb2_grpc.InboxStub, inbox: str) -> dict[str, int]:
    found: dict[str, int] = {}
    token = ""
    while True:
        page = await stub.ListInbox(
            inbox_pb2.ListInboxRequest(inbox_id=inbox, page_size=500, page_token=token),
            timeout=10,
        )
        found.update({e.thread_id: e.last_message_id for e in page.entries})
        token = page.next_page_token
        if not token:
            return found


@pytest.mark.engine("cassandra")
async def test_outage_fails_fast_keeps_serving_and_loses_no_acked_delivery(tmp_path: Path) -> None:
    """While Cassandra is down: failures only, mostly the breaker's, the Inbox NOT_SERVING and
    the server SERVING; once it is back: calls succeed and every acknowledged post is there."""
    with own_engine("cassandra") as own:
        await _outage(tmp_path, own)


async def _outage(tmp_path: Path, own: OwnEngine) -> None:
    base = settings_for("cassandra", tmp_path, inbox_store="cassandra")
    settings = replace(
        base,
        cassandra=replace(
            base.cassandra, contact_points=("127.0.0.1",), port=own.port, request_timeout_s=1.0
        ),
        breaker=BreakerSettings(failure_threshold=3, reset_timeout_s=0.5),
        inbox=replace(base.inbox, trim_probability=0.0),
    )
    stopped = False
    try:
        async with running_server(settings) as running:
            stub = inbox_pb2_grpc.InboxStub(running.channel)
            load = Load()
            tasks = [asyncio.create_task(poster(stub, load, w)) for w in range(4)]
            tasks += [asyncio.create_task(counter(stub, load, w)) for w in range(3)]
            await asyncio.sleep(3.0)
            assert load.acked, "no post succeeded before the outage"

            t_stop = time.monotonic()
            stopped = True
            await asyncio.to_thread(own.run, "stop")
            t_down = time.monotonic()
            await eventually(
                lambda: asyncio.sleep(0, sum(o.started >= t_down for o in load.outcomes)),
                lambda n: n >= OUTAGE_CALLS,
                timeout_s=120.0,
            )
            await _assert_failing_fast_and_serving(running, load, t_down)

            t_start = time.monotonic()
            await asyncio.to_thread(own.run, "start")
            stopped = False
            t_ready = time.monotonic()
            await eventually(lambda: _recent_ok(load), bool, timeout_s=60.0, interval_s=0.2)
            t_recovered = time.monotonic()
            await eventually(
                lambda: service_status(running, "loom.v1.Inbox"),
                lambda s: s == health_pb2.HealthCheckResponse.SERVING,
                timeout_s=30.0,
            )
            await asyncio.sleep(1.0)
            load.stop.set()
            await asyncio.gather(*tasks)

            first_fail = min(o.started + o.latency for o in load.outcomes
                             if o.code in FAILED and o.started >= t_stop)  # fmt: skip
            print(
                f"\noutage: first failure {first_fail - t_stop:.2f}s after stop began "
                f"(stop took {t_down - t_stop:.1f}s); cassandra ready {t_ready - t_start:.1f}s "
                f"after start; calls OK again {t_recovered - t_ready:.2f}s after ready; "
                f"{len(load.acked)} posts acknowledged, {len(load.outcomes)} calls"
            )
            await _assert_every_ack_delivered(stub, load)
    finally:
        if stopped:
            await asyncio.to_thread(own.run, "start")


async def _assert_failing_fast_and_serving(running: Running, load: Load, t_down: float) -> None:
    """While Cassandra is down: only failures, mostly the breaker's; health answers."""
    down = [o for o in load.outcomes if o.started >= t_down]
    assert {o.code for o in down} <= FAILED, {o.code for o in down}
    by_breaker = [o for o in down if "circuit" in o.details]
    assert by_breaker, "the circuit breaker never opened"
    answered = sum(o.code is grpc.StatusCode.UNAVAILABLE for o in down)
    assert answered > len(down) // 2, (
        f"most outage calls should be refused by the server, not left to their deadline: "
        f"{answered} UNAVAILABLE of {len(down)}"
    )
    # Liveness ("") stays up; the Inbox service reports its engine down (readiness).
    assert await service_status(running, "") == health_pb2.HealthCheckResponse.SERVING
    await eventually(
        lambda: service_status(running, "loom.v1.Inbox"),
        lambda s: s == health_pb2.HealthCheckResponse.NOT_SERVING,
        timeout_s=30.0,
    )
    assert await service_status(running, "") == health_pb2.HealthCheckResponse.SERVING


async def service_status(running: Running, service: str) -> int:
    health = health_pb2_grpc.HealthStub(running.channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=30.0)
    return int(reply.status)


async def _recent_ok(load: Load) -> bool:
    """Whether both methods have succeeded in the last second (breaker closed again)."""
    now = time.monotonic()
    recent = [o for o in load.outcomes if o.started >= now - 1.0]
    return sum(o.code is grpc.StatusCode.OK for o in recent) >= 5


async def _assert_every_ack_delivered(stub: inbox_pb2_grpc.InboxStub, load: Load) -> None:
    wanted: dict[str, dict[str, int]] = {}
    for thread, message_id, recipients in load.acked:
        for inbox in recipients:
            wanted.setdefault(inbox, {})[thread] = message_id
    for inbox, threads in wanted.items():
        found = await threads_of(stub, inbox)
        missing = {t: m for t, m in threads.items() if found.get(t) != m}
        assert not missing, f"{inbox}: acknowledged deliveries lost: {list(missing)[:5]}"
        unread = await stub.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id=inbox))
        assert unread.unread_count >= len(threads)
