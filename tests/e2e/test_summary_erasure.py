"""Summary's DeleteMessageSummaries, EraseRecipients and GetOperation over gRPC, on every
summary engine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from loom.v1 import common_pb2, summary_pb2, summary_pb2_grpc

from server.config import AuthSettings
from server.runtime.auth import mint_token
from storage.engines import SUMMARY_STORES
from tests.conftest import selected_engines
from tests.engines import settings_for
from tests.operation_waits import wait_done
from tests.serving import Running, running_server, violations

DELIVERED = summary_pb2.DELIVERY_STATUS_DELIVERED
READ = summary_pb2.DELIVERY_STATUS_READ


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "summary_erase_engine" in metafunc.fixturenames:
        engines = selected_engines(metafunc.config, SUMMARY_STORES.names)
        metafunc.parametrize("summary_erase_engine", engines, ids=engines, scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(
    summary_erase_engine: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Running]:
    data = Path(tmp_path_factory.mktemp(f"summary-erase-{summary_erase_engine}"))
    settings = settings_for(summary_erase_engine, data, summary_store=summary_erase_engine)
    async with running_server(settings) as running:
        yield running


def stub(running: Running) -> summary_pb2_grpc.SummaryStub:
    return summary_pb2_grpc.SummaryStub(running.channel)


async def record(s: summary_pb2_grpc.SummaryStub, message_id: str, *ids: str) -> int:
    events = [summary_pb2.DeliveryEvent(recipient_id=i, status=READ) for i in ids]
    request = summary_pb2.RecordDeliveryEventsRequest(message_id=message_id, events=events)
    return (await s.RecordDeliveryEvents(request)).recorded


async def code_of(call: Awaitable[object]) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def get(s: summary_pb2_grpc.SummaryStub, message_id: str) -> summary_pb2.MessageSummary:
    return await s.GetMessageSummary(summary_pb2.GetMessageSummaryRequest(message_id=message_id))


async def test_deleted_summary_stays_deleted(server: Running) -> None:
    """NOT_FOUND from the answer on; a late event is ignored (recorded 0); twice is once."""
    s = stub(server)
    assert await record(s, "del-1", "a", "b") == 2
    delete = summary_pb2.DeleteMessageSummariesRequest(message_ids=["del-1", "del-unknown"])
    await s.DeleteMessageSummaries(delete)
    assert await code_of(get(s, "del-1")) is grpc.StatusCode.NOT_FOUND
    assert await record(s, "del-1", "late") == 0
    assert await code_of(get(s, "del-1")) is grpc.StatusCode.NOT_FOUND
    await s.DeleteMessageSummaries(delete)
    assert await record(s, "del-unknown", "x") == 0
    assert await code_of(get(s, "del-unknown")) is grpc.StatusCode.NOT_FOUND


async def test_erased_recipient_leaves_every_exact_set(server: Running) -> None:
    """The operation answers at once, ends DONE, and no summary names the recipient."""
    s = stub(server)
    for i in range(4):
        await record(s, f"er-{i}", "erase-me", f"keep-{i}")
    request = summary_pb2.SummaryEraseRecipientsRequest(recipient_ids=["erase-me", "unknown"])
    op = await s.EraseRecipients(request)
    assert op.operation_id
    assert op.kind == "erase_recipients"
    done = await wait_done(s.GetOperation, op.operation_id)
    assert done.progress.done >= 4
    assert done.progress.total == done.progress.done
    for i in range(4):
        got = await get(s, f"er-{i}")
        delivered, read, failed = got.statuses
        for status in (delivered, read):
            assert list(status.recipient_ids) == [f"keep-{i}"]
            assert status.count == 1
        assert failed.count == 0
    again = await s.EraseRecipients(request)  # idempotent: a second erasure finds nothing
    await wait_done(s.GetOperation, again.operation_id)
    assert list((await get(s, "er-0")).statuses[0].recipient_ids) == ["keep-0"]


async def test_malformed_ids_name_each_bad_field(server: Running) -> None:
    """Empty lists, empty or NUL ids, unknown operations: INVALID_ARGUMENT / NOT_FOUND."""
    s = stub(server)
    with pytest.raises(grpc.aio.AioRpcError) as empty:
        await s.DeleteMessageSummaries(summary_pb2.DeleteMessageSummariesRequest())
    assert empty.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "message_ids" in violations(empty.value)
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await s.DeleteMessageSummaries(
            summary_pb2.DeleteMessageSummariesRequest(message_ids=["ok", "", "m" * 257])
        )
    assert set(violations(bad.value)) == {"message_ids[1]", "message_ids[2]"}
    with pytest.raises(grpc.aio.AioRpcError) as nul:
        await s.EraseRecipients(summary_pb2.SummaryEraseRecipientsRequest(recipient_ids=["a\0"]))
    assert set(violations(nul.value)) == {"recipient_ids[0]"}
    with pytest.raises(grpc.aio.AioRpcError) as none:
        await s.EraseRecipients(summary_pb2.SummaryEraseRecipientsRequest())
    assert set(violations(none.value)) == {"recipient_ids"}
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await s.GetOperation(common_pb2.GetOperationRequest(operation_id="nope"))
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as blank:
        await s.GetOperation(common_pb2.GetOperationRequest())
    assert set(violations(blank.value)) == {"operation_id"}


async def test_erasure_needs_the_admin_scope(tmp_path: Path) -> None:
    """summary:write deletes summaries but may not erase; summary:admin may."""
    secret = tmp_path / "jwt.secret"
    secret.write_bytes(b"s" * 48)
    settings = replace(
        settings_for("sqlite", tmp_path), auth=AuthSettings(jwt_secret_file=str(secret))
    )

    def bearer(*scopes: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {mint_token(settings.auth, scopes, 60)}"),)

    async with running_server(settings) as running:
        s = stub(running)
        erase = summary_pb2.SummaryEraseRecipientsRequest(recipient_ids=["r"])
        writer, admin = bearer("summary:write"), bearer("summary:admin")
        await s.DeleteMessageSummaries(
            summary_pb2.DeleteMessageSummariesRequest(message_ids=["m"]), metadata=writer
        )
        denied = await code_of(s.EraseRecipients(erase, metadata=writer))
        assert denied is grpc.StatusCode.PERMISSION_DENIED
        op = await s.EraseRecipients(erase, metadata=admin)
        read = await s.GetOperation(
            common_pb2.GetOperationRequest(operation_id=op.operation_id), metadata=admin
        )
        assert read.operation_id == op.operation_id
