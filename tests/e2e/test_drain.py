"""SIGTERM drains: calls in flight finish, new calls are refused, nothing acknowledged is lost.

`loom serve` runs as a process. Thirty-two 1,000-message WeaveMessages batches are sent at
once; the moment the first answer arrives, the server gets SIGTERM. The other calls the
server had taken (its bulkhead runs 16 at once and queues more) were in flight at that
moment: they must finish OK, calls arriving later must get UNAVAILABLE, the process must
exit 0 on its own, and after a restart on the same data every acknowledged batch is there.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import common_pb2, inbox_pb2, inbox_pb2_grpc, threadweaver_pb2, threadweaver_pb2_grpc

from tests.serving import eventually, loom_process

BATCHES = 32
PER_BATCH = 1000


def batch(b: int) -> threadweaver_pb2.WeaveMessagesRequest:
    return threadweaver_pb2.WeaveMessagesRequest(
        messages=[
            threadweaver_pb2.WovenMessage(
                gid=f"drain-{b}",
                thread_id=f"t{i}",
                rfc_message_id=f"<d{b}-{i}@drain.example>",
                sent_at=Timestamp(seconds=1_700_000_000 + i),
            )
            for i in range(PER_BATCH)
        ]
    )


async def test_sigterm_finishes_in_flight_calls_and_refuses_new_ones(tmp_path: Path) -> None:
    """SIGTERM: calls already running finish OK, calls arriving after it get UNAVAILABLE, exit 0."""
    data = tmp_path / "data"
    env = {"LOOM_SERVER__GRACE_S": "20"}
    outcomes: list[tuple[int, grpc.StatusCode, float]] = []
    async with loom_process(tmp_path, env=env, data_dir=data) as served:
        async with grpc.aio.insecure_channel(served.target) as channel:
            stub = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
            first = asyncio.Event()

            async def send(b: int) -> None:
                try:
                    await stub.WeaveMessages(batch(b), timeout=60)
                    code = grpc.StatusCode.OK
                except grpc.aio.AioRpcError as error:
                    code = error.code()
                outcomes.append((b, code, time.monotonic()))
                first.set()

            calls = [asyncio.create_task(send(b)) for b in range(BATCHES)]
            await first.wait()
            terminated_at = time.monotonic()
            served.process.send_signal(signal.SIGTERM)
            # New calls while the taken ones still run: refused UNAVAILABLE once draining.
            probe = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
            late_code = grpc.StatusCode.OK
            while late_code in (grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND):
                try:
                    await probe.GetUnifiedThread(
                        threadweaver_pb2.GetUnifiedThreadRequest(gid="nobody", thread_id="x"),
                        timeout=10,
                    )
                    late_code = grpc.StatusCode.OK
                except grpc.aio.AioRpcError as error:
                    late_code, late_details = error.code(), error.details()
                await asyncio.sleep(0.005)
            still_running = sum(not c.done() for c in calls)
            await asyncio.gather(*calls)
        exit_code = await asyncio.to_thread(served.process.wait, 120)

    codes = {code for _, code, _ in outcomes}
    finished_after = [
        b for b, code, at in outcomes if code is grpc.StatusCode.OK and at > terminated_at
    ]
    # RESOURCE_EXHAUSTED: the bulkhead's waiting room refused a batch before the signal (load
    # shedding, not the drain); never CANCELLED, which a client would not retry.
    refused = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert codes <= {grpc.StatusCode.OK, *refused}, codes
    assert finished_after, "no call was in flight at SIGTERM"
    assert late_code is grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in (late_details or "")
    print(f"\ndrain: {still_running} calls still running when a new call was refused")
    assert exit_code == 0
    events = [line.get("event") for line in served.log_lines()]
    assert "draining" in events
    assert events[-1] == "stopped"

    acknowledged = [b for b, code, _ in outcomes if code is grpc.StatusCode.OK]
    threads = [
        common_pb2.ThreadRef(gid=f"drain-{b}", thread_id=f"t{i}")
        for b in acknowledged
        for i in (0, PER_BATCH - 1)
    ]
    async with (
        loom_process(tmp_path, data_dir=data) as again,
        grpc.aio.insecure_channel(again.target) as channel,
    ):
        stub = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
        for start in range(0, len(threads), 100):
            reply = await stub.ResolveThreads(
                threadweaver_pb2.ResolveThreadsRequest(threads=threads[start : start + 100])
            )
            assert all(r.found for r in reply.threads)


async def test_a_fanout_running_at_sigterm_finishes_after_restart(tmp_path: Path) -> None:
    """SIGTERM releases a half-done announcement at its progress; the next server adopts it."""
    data = tmp_path / "data"
    recipients = [f"drain-all{i}" for i in range(200_000)]
    async with (
        loom_process(tmp_path, data_dir=data) as served,
        grpc.aio.insecure_channel(served.target) as channel,
    ):
        stub = inbox_pb2_grpc.InboxStub(channel)
        reply = await stub.PostMessage(
            inbox_pb2.PostMessageRequest(
                thread_id="drain-news", message_id=7, sender_inbox_id="ceo",
                recipient_inbox_ids=recipients,
            ),
            timeout=60,
        )  # fmt: skip
        await eventually(
            lambda: stub.GetDelivery(inbox_pb2.GetDeliveryRequest(delivery_id=reply.delivery_id)),
            lambda d: d.progress.done > 0,
            interval_s=0.01,
        )
        served.process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(served.process.wait, 120) == 0
    async with (
        loom_process(tmp_path, data_dir=data) as again,
        grpc.aio.insecure_channel(again.target) as channel,
    ):
        stub = inbox_pb2_grpc.InboxStub(channel)
        done = await eventually(
            lambda: stub.GetDelivery(inbox_pb2.GetDeliveryRequest(delivery_id=reply.delivery_id)),
            lambda d: d.state == inbox_pb2.DELIVERY_STATE_DONE,
            timeout_s=120.0,
            interval_s=0.1,
        )
        assert done.progress.done == len(recipients)
        last = await stub.ListInbox(inbox_pb2.ListInboxRequest(inbox_id=recipients[-1]))
        assert [e.thread_id for e in last.entries] == ["drain-news"]
