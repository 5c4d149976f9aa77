"""Prometheus metrics, scraped over HTTP and parsed as Prometheus parses them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import inbox_pb2, inbox_pb2_grpc, threadweaver_pb2, threadweaver_pb2_grpc

from server.runtime.policies import MethodPolicy
from tests.engines import settings_for
from tests.serving import Running, free_port, running_server, scrape_metrics

WEAVE = "loom.v1.ThreadWeaver/WeaveMessages"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """Every service on SQLite, metrics on a free port, WeaveMessages' bulkhead at 1 slot."""
    base = settings_for("sqlite", Path(tmp_path_factory.mktemp("metrics")))
    settings = replace(
        base,
        server=replace(base.server, metrics_port=free_port()),
        policies={WEAVE: MethodPolicy(max_concurrency=1, max_waiting=0, deadline_s=30.0)},
    )
    async with running_server(settings) as running:
        yield running


def scrape(running: Running) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the exposition: (name, labels) -> value."""
    return scrape_metrics(running.loom.metrics_port)


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_rpc_counts_and_latency_move_with_the_calls(server: Running) -> None:
    """3 OK and 2 INVALID_ARGUMENT GetUnreadCount calls: counters, histogram, in-flight."""
    method = "loom.v1.Inbox/GetUnreadCount"
    before = scrape(server)
    stub = inbox_pb2_grpc.InboxStub(server.channel)
    for _ in range(3):
        await stub.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id="m1"))
    for _ in range(2):
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id=""))
    after = scrape(server)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("loom_rpc_requests_total", method=method, code="OK") == 3
    assert delta("loom_rpc_requests_total", method=method, code="INVALID_ARGUMENT") == 2
    assert delta("loom_rpc_duration_seconds_count", method=method) == 5
    assert delta("loom_rpc_duration_seconds_bucket", method=method, le="+Inf") == 5
    assert delta("loom_rpc_duration_seconds_sum", method=method) > 0
    assert value(after, "loom_rpc_in_flight", method=method) == 0
    assert value(after, "loom_bulkhead_capacity", method=method) > 0
    assert value(after, "loom_bulkhead_in_use", method=method) == 0


async def test_bulkhead_refusals_are_counted(server: Running) -> None:
    """Every RESOURCE_EXHAUSTED from a full bulkhead is one refusal in the metrics."""
    before = scrape(server)
    stub = threadweaver_pb2_grpc.ThreadWeaverStub(server.channel)
    batch = threadweaver_pb2.WeaveMessagesRequest(
        messages=[
            threadweaver_pb2.WovenMessage(
                gid=f"g{i}", thread_id="t", rfc_message_id=f"<m{i}@x>", sent_at=Timestamp(seconds=1)
            )
            for i in range(1000)
        ]
    )

    async def weave() -> grpc.StatusCode:
        try:
            await stub.WeaveMessages(batch, timeout=60)
        except grpc.aio.AioRpcError as error:
            return error.code()
        return grpc.StatusCode.OK

    codes = await asyncio.gather(*(weave() for _ in range(12)))
    refused = codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert refused > 0, codes
    assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, codes
    after = scrape(server)
    counted = value(after, "loom_bulkhead_refusals_total", method=WEAVE) - value(
        before, "loom_bulkhead_refusals_total", method=WEAVE
    )
    assert counted == refused


async def test_breakers_queues_and_build_are_exported(server: Running) -> None:
    """Each engine's breaker (closed), the inbox queues with their bounds, the build."""
    samples = scrape(server)
    assert value(samples, "loom_breaker_state", engine="sqlite") == 0
    assert value(samples, "loom_breaker_open", engine="sqlite") == 0
    for queue in ("inbox_fanout", "inbox_trim"):
        assert value(samples, "loom_queue_capacity", queue=queue) > 0
        assert ("loom_queue_depth", frozenset({("queue", queue)})) in samples
        assert ("loom_queue_dropped_total", frozenset({("queue", queue)})) in samples
    builds = [labels for name, labels in samples if name == "loom_build_info"]
    assert len(builds) == 1
    assert dict(builds[0])["version"] != ""
