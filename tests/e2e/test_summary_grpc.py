"""Summary over gRPC, through the real in-process server, on every summary engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from loom.v1 import summary_pb2, summary_pb2_grpc

from storage.engines import SUMMARY_STORES
from tests.conftest import selected_engines
from tests.engines import settings_for
from tests.serving import Running, running_server, violations

SUMMARY_ENGINES = SUMMARY_STORES.names
DELIVERED = summary_pb2.DELIVERY_STATUS_DELIVERED
READ = summary_pb2.DELIVERY_STATUS_READ
FAILED = summary_pb2.DELIVERY_STATUS_FAILED


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "summary_e2e_engine" in metafunc.fixturenames:
        engines = selected_engines(metafunc.config, SUMMARY_ENGINES)
        metafunc.parametrize("summary_e2e_engine", engines, ids=engines, scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(
    summary_e2e_engine: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Running]:
    """One server per engine whose Summary state lives on that engine, shared by the module."""
    data = Path(tmp_path_factory.mktemp(f"summary-{summary_e2e_engine}"))
    settings = settings_for(summary_e2e_engine, data, summary_store=summary_e2e_engine)
    async with running_server(settings) as running:
        yield running


def stub(running: Running) -> summary_pb2_grpc.SummaryStub:
    return summary_pb2_grpc.SummaryStub(running.channel)


def events(ids: list[str], status: int = DELIVERED) -> list[summary_pb2.DeliveryEvent]:
    return [summary_pb2.DeliveryEvent(recipient_id=i, status=status) for i in ids]  # type: ignore[arg-type]


async def record(
    s: summary_pb2_grpc.SummaryStub, message_id: str, evs: list[summary_pb2.DeliveryEvent]
) -> None:
    resp = await s.RecordDeliveryEvents(
        summary_pb2.RecordDeliveryEventsRequest(message_id=message_id, events=evs)
    )
    assert resp.recorded == len(evs)


async def summary(s: summary_pb2_grpc.SummaryStub, message_id: str) -> summary_pb2.MessageSummary:
    return await s.GetMessageSummary(summary_pb2.GetMessageSummaryRequest(message_id=message_id))


def by_status(msg: summary_pb2.MessageSummary) -> dict[int, summary_pb2.StatusSummary]:
    assert [st.status for st in msg.statuses] == [DELIVERED, READ, FAILED]
    return {st.status: st for st in msg.statuses}


async def test_exact_up_to_250_then_estimated(server: Running) -> None:
    """250 recipients come back exact with their ids; the 251st turns the count into an estimate."""
    s = stub(server)
    ids = [f"user-{i:03d}" for i in range(250)]
    await record(s, "exact-250", events(ids[::-1]))
    delivered = by_status(await summary(s, "exact-250"))[DELIVERED]
    assert (delivered.count, delivered.exact) == (250, True)
    assert list(delivered.recipient_ids) == sorted(ids)
    assert delivered.relative_error_bound == 0.0
    assert delivered.estimator == summary_pb2.ESTIMATOR_EXACT

    await record(s, "exact-250", events(["user-250"]))
    msg = await summary(s, "exact-250")
    delivered = by_status(msg)[DELIVERED]
    assert delivered.exact is False
    assert list(delivered.recipient_ids) == []
    assert delivered.relative_error_bound > 0
    assert delivered.estimator == summary_pb2.ESTIMATOR_CPC
    assert abs(delivered.count - 251) <= max(1, 3 * delivered.relative_error_bound * 251)
    assert 0 < msg.encoded_size_bytes < 400 * 1024


async def test_large_message_is_estimated_within_its_bound(server: Running) -> None:
    """20,000 recipients in 1,000-event batches: count within 3 standard errors, row small."""
    s = stub(server)
    for start in range(0, 20_000, 1_000):
        await record(s, "big", events([f"r{i}" for i in range(start, start + 1_000)]))
    msg = await summary(s, "big")
    delivered = by_status(msg)[DELIVERED]
    assert not delivered.exact
    assert abs(delivered.count / 20_000 - 1) <= 3 * delivered.relative_error_bound
    assert delivered.relative_error_bound < 0.01
    assert msg.encoded_size_bytes < 64 * 1024


async def test_read_implies_delivered(server: Running) -> None:
    """A READ recipient is counted as DELIVERED too; FAILED stays apart."""
    s = stub(server)
    await record(
        s, "read-implies", [*events(["amy"], READ), *events(["chris"]), *events(["dave"], FAILED)]
    )
    st = by_status(await summary(s, "read-implies"))
    assert list(st[DELIVERED].recipient_ids) == ["amy", "chris"]
    assert list(st[READ].recipient_ids) == ["amy"]
    assert list(st[FAILED].recipient_ids) == ["dave"]
    assert [st[k].count for k in (DELIVERED, READ, FAILED)] == [2, 1, 1]


async def test_same_batch_twice_changes_nothing(server: Running) -> None:
    """Replaying a batch (exact or sketched) leaves the summary byte-for-byte identical."""
    s = stub(server)
    for message_id, n in (("replay-small", 10), ("replay-large", 3_000)):
        batch = [
            *events([f"u{i}" for i in range(n)]),
            *events([f"u{i}" for i in range(n // 2)], READ),
        ]
        await record(s, message_id, batch)
        first = await summary(s, message_id)
        await record(s, message_id, batch)
        await record(s, message_id, batch[::-1])
        assert await summary(s, message_id) == first


async def test_two_servers_recording_one_message_lose_nothing(
    summary_e2e_engine: str, tmp_path: Path
) -> None:
    """Two servers on one store record disjoint recipients of a message at once: none is lost."""
    settings = settings_for(summary_e2e_engine, tmp_path, summary_store=summary_e2e_engine)
    async with running_server(settings) as a, running_server(settings) as b:

        async def client(running: Running, prefix: str, n: int, batch: int, msg: str) -> None:
            s = stub(running)
            for start in range(0, n, batch):
                await record(s, msg, events([f"{prefix}{i}" for i in range(start, start + batch)]))

        await asyncio.gather(
            client(a, "a", 125, 5, "race-exact"), client(b, "b", 125, 5, "race-exact")
        )
        delivered = by_status(await summary(stub(a), "race-exact"))[DELIVERED]
        assert delivered.exact
        assert sorted(delivered.recipient_ids) == sorted(
            [f"a{i}" for i in range(125)] + [f"b{i}" for i in range(125)]
        )

        await asyncio.gather(
            client(a, "a", 5_000, 250, "race-large"), client(b, "b", 5_000, 250, "race-large")
        )
        delivered = by_status(await summary(stub(b), "race-large"))[DELIVERED]
        assert not delivered.exact
        assert abs(delivered.count / 10_000 - 1) <= 3 * delivered.relative_error_bound


async def test_unknown_message_is_not_found(server: Running) -> None:
    """A message with no recorded event answers NOT_FOUND."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await summary(stub(server), "never-sent")
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (
            summary_pb2.RecordDeliveryEventsRequest(message_id="", events=events(["x"])),
            "message_id",
        ),
        (
            summary_pb2.RecordDeliveryEventsRequest(message_id="m" * 257, events=events(["x"])),
            "message_id",
        ),
        (summary_pb2.RecordDeliveryEventsRequest(message_id="m", events=[]), "events"),
        (
            summary_pb2.RecordDeliveryEventsRequest(
                message_id="m", events=events([f"r{i}" for i in range(10_001)])
            ),
            "events",
        ),
        (
            summary_pb2.RecordDeliveryEventsRequest(message_id="m", events=events([""])),
            "events[0].recipient_id",
        ),
        (
            summary_pb2.RecordDeliveryEventsRequest(
                message_id="m", events=events(["ok", "é" * 129])
            ),
            "events[1].recipient_id",
        ),
        (
            summary_pb2.RecordDeliveryEventsRequest(
                message_id="m", events=events(["x"], summary_pb2.DELIVERY_STATUS_UNSPECIFIED)
            ),
            "events[0].status",
        ),
        (
            summary_pb2.RecordDeliveryEventsRequest(
                message_id="m", events=[*events(["a"]), *events(["b"], 9)]
            ),
            "events[1].status",
        ),
    ],
    ids=[
        "empty-message-id",
        "long-message-id",
        "no-events",
        "too-many-events",
        "empty-recipient",
        "long-recipient-utf8",
        "unspecified-status",
        "unknown-status-number",
    ],
)
async def test_bad_record_input_is_invalid_argument(
    server: Running, request_: summary_pb2.RecordDeliveryEventsRequest, field: str
) -> None:
    """Each bad field is named in a google.rpc.BadRequest field violation; nothing is written."""
    s = stub(server)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await s.RecordDeliveryEvents(request_)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert field in violations(caught.value)
    if request_.message_id == "m":
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await summary(s, "m")
        assert missing.value.code() is grpc.StatusCode.NOT_FOUND


async def test_bad_summary_request_is_invalid_argument(server: Running) -> None:
    """GetMessageSummary with an empty message id names the field."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await summary(stub(server), "")
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "message_id" in violations(caught.value)
