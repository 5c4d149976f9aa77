"""The TemplateInduction workload's calls: submit a stream, wait for the stages, probe health.

SubmitEmails is fire and forget with admission control, so a producer must read how many of
its emails were dropped and resend that tail; the stages then run on their own, so a phase
waits on GetInductionStats until every admitted email has gone through (or the pipeline is
idle) before it reads a figure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from loom.v1 import templates_pb2, templates_pb2_grpc

from loadtest.recorder import LatencyRecorder

__all__ = ["probe_health", "settle", "stats", "submit_all", "to_proto", "until_processed"]


def to_proto(
    email_id: str, sender: str, recipient: str, subject: str, html: str
) -> templates_pb2.Email:
    """One Email message."""
    return templates_pb2.Email(
        email_id=email_id, sender=sender, recipient_id=recipient, subject=subject, html_body=html
    )


async def stats(stub: templates_pb2_grpc.TemplateInductionStub) -> templates_pb2.InductionStats:
    """The server's induction counters."""
    return await stub.GetInductionStats(templates_pb2.GetInductionStatsRequest(), timeout=5)


async def settle(
    stub: templates_pb2_grpc.TemplateInductionStub, timeout_s: float = 600
) -> templates_pb2.InductionStats:
    """Waits until every admitted email left the pipeline and no formation is queued."""
    deadline = time.monotonic() + timeout_s
    while True:
        st = await stats(stub)
        done = st.processed + st.failed + st.dropped_io >= st.accepted
        if done and st.cpu_queue_depth == st.io_queue_depth == st.formation_queue_depth == 0:
            return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"pipeline not idle after {timeout_s}s: {st}")
        await asyncio.sleep(0.05)


async def submit_all(
    stub: templates_pb2_grpc.TemplateInductionStub,
    emails: Sequence[templates_pb2.Email],
    *,
    batch: int,
    concurrency: int,
    resend: bool = True,
) -> tuple[int, int]:
    """SubmitEmails in batches from `concurrency` callers; a caller told of drops backs off
    and (with `resend`) sends the dropped tail again, so the whole stream gets in.

    Returns (accepted, dropped): every refusal counts, including those later resent.
    """
    batches = [list(emails[i : i + batch]) for i in range(0, len(emails), batch)]
    queue: asyncio.Queue[list[templates_pb2.Email]] = asyncio.Queue()
    for b in batches:
        queue.put_nowait(b)
    totals = [0, 0]

    async def caller() -> None:
        while not queue.empty():
            part = queue.get_nowait()
            while part:
                request = templates_pb2.SubmitEmailsRequest(emails=part)
                reply = await stub.SubmitEmails(request, timeout=30)
                totals[0] += reply.accepted
                totals[1] += reply.dropped
                if not reply.dropped:
                    break
                # Back off for about as long as the server needs to make room for the tail
                # (at ~2,000 emails/s): refused emails cost the server their transfer and
                # parse, so hammering a full queue only slows it down.
                await asyncio.sleep(max(0.05, reply.dropped / 2000))
                part = part[len(part) - reply.dropped :] if resend else []

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return totals[0], totals[1]


async def until_processed(
    stub: templates_pb2_grpc.TemplateInductionStub, sending: asyncio.Task[tuple[int, int]], n: int
) -> float:
    """Seconds until all `n` emails went through the I/O stage (Algorithm 2's check).

    Formations still queued then are the second stage's backlog, reported apart
    (``formations_drained_s``), as the paper's throughput counts emails clustered.
    """
    t0 = time.perf_counter()
    while True:
        st = await stats(stub)
        through = st.processed + st.failed + st.dropped_io
        if sending.done() and through >= n and st.cpu_queue_depth == st.io_queue_depth == 0:
            return time.perf_counter() - t0
        await asyncio.sleep(0.02)


async def probe_health(
    health: health_pb2_grpc.HealthStub,
    rate: float,
    *,
    seconds: float | None = None,
    stop: asyncio.Event | None = None,
    rec: LatencyRecorder | None = None,
) -> LatencyRecorder:
    """Health checks at `rate`/s for `seconds` (or until `stop`), latencies recorded."""
    rec = LatencyRecorder() if rec is None else rec  # an empty recorder is falsy
    request = health_pb2.HealthCheckRequest(service="loom.v1.TemplateInduction")
    start = time.perf_counter()
    n = 0
    while (seconds is None or time.perf_counter() - start < seconds) and not (
        stop and stop.is_set()
    ):
        due = start + n / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        t = time.perf_counter()
        try:
            await health.Check(request, timeout=5)
            rec.record(time.perf_counter() - max(t, due))
        except grpc.aio.AioRpcError as exc:
            rec.record_error(exc.code().name)
        n += 1
    return rec
