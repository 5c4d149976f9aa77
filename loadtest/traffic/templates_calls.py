"""The TemplateInduction workload's calls: submit a stream, wait for the stages, probe health.

SubmitEmails is fire and forget with admission control, so a producer must read how many of
its emails were dropped and resend that tail; the stages then run on their own, so a phase
waits on GetInductionStats until every admitted email has gone through (or the pipeline is
idle) before it reads a figure.

The producer is kept cheap, since it shares the machine with the server it measures: a
throughput run serializes each batch once, before the clock starts (`encode_batches`), and
sends those bytes as they are (`raw_submit`); only a refused tail is serialized again. A
refused caller waits for its own share of the server's measured admission rate to absorb
its tail, so refusals stay a small fraction of what is sent: every refused email costs the
server its transfer, parse and validation for nothing.

``loom serve --workers N`` runs N processes behind one port, each with its own pipeline and
counters. `one_stub_per_process` finds a channel to each (a probe email per channel: the
process whose `accepted` counter moves is the one behind it), and `stats` sums them.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from loom.v1 import templates_pb2, templates_pb2_grpc

from loadtest.recorder import LatencyRecorder

__all__ = [
    "Batch",
    "encode_batches",
    "one_stub_per_process",
    "probe_health",
    "raw_submit",
    "settle",
    "stats",
    "stub_submit",
    "submit_all",
    "submit_batches",
    "to_proto",
    "until_processed",
]

SUBMIT = "/loom.v1.TemplateInduction/SubmitEmails"
Stub = templates_pb2_grpc.TemplateInductionStub
Stubs = Stub | Sequence[Stub]
"""One server process's stub, or one stub per process of a ``--workers N`` server."""
Send = Callable[["Batch"], Awaitable[templates_pb2.SubmitEmailsResponse]]
"""SubmitEmails of one batch."""
_FIRST_RATE = 500.0
"""Emails/s assumed for a caller before it has a measured rate of its own."""
_MAX_WAIT_S = 1.0
_WINDOW_S = 1.0
"""A caller's admission rate is what the server accepted from it over this long."""
_HEADROOM = 1.25
"""A paced caller offers this much more than it was last admitted (so it follows a server
that speeds up; the excess is refused, which keeps the queue full)."""


def to_proto(
    email_id: str, sender: str, recipient: str, subject: str, html: str
) -> templates_pb2.Email:
    """One Email message."""
    return templates_pb2.Email(
        email_id=email_id, sender=sender, recipient_id=recipient, subject=subject, html_body=html
    )


@dataclass(frozen=True, slots=True)
class Batch:
    """One SubmitEmails request: its emails, and (when encoded ahead) the request's bytes."""

    emails: Sequence[templates_pb2.Email]
    wire: bytes | None = None

    def request(self) -> templates_pb2.SubmitEmailsRequest:
        """The request message."""
        return templates_pb2.SubmitEmailsRequest(emails=self.emails)

    def serialized(self) -> bytes:
        """The request's bytes: encoded ahead, or now."""
        return self.wire if self.wire is not None else self.request().SerializeToString()


def encode_batches(emails: Sequence[templates_pb2.Email], batch: int) -> list[Batch]:
    """The stream cut into requests of `batch` emails, each serialized once, now."""
    parts = [list(emails[i : i + batch]) for i in range(0, len(emails), batch)]
    return [Batch(part, Batch(part).serialized()) for part in parts]


def raw_submit(channel: grpc.aio.Channel) -> Send:
    """SubmitEmails on `channel` sending a batch's bytes as they are."""
    call = channel.unary_unary(
        SUBMIT,
        request_serializer=None,
        response_deserializer=templates_pb2.SubmitEmailsResponse.FromString,
    )

    async def send(batch: Batch) -> templates_pb2.SubmitEmailsResponse:
        reply: templates_pb2.SubmitEmailsResponse = await call(batch.serialized(), timeout=30)
        return reply

    return send


def stub_submit(stub: Stub) -> Send:
    """SubmitEmails through a generated stub (serializes each call)."""

    async def send(batch: Batch) -> templates_pb2.SubmitEmailsResponse:
        reply: templates_pb2.SubmitEmailsResponse = await stub.SubmitEmails(
            batch.request(), timeout=30
        )
        return reply

    return send


def _summed(parts: Sequence[templates_pb2.InductionStats]) -> templates_pb2.InductionStats:
    total = templates_pb2.InductionStats()
    for part in parts:
        for field in templates_pb2.InductionStats.DESCRIPTOR.fields:
            setattr(total, field.name, getattr(total, field.name) + getattr(part, field.name))
    return total


async def stats(stubs: Stubs) -> templates_pb2.InductionStats:
    """The server's induction counters (summed over its processes when given several)."""
    request = templates_pb2.GetInductionStatsRequest()
    if isinstance(stubs, Stub):
        one: templates_pb2.InductionStats = await stubs.GetInductionStats(request, timeout=5)
        return one
    return _summed(await asyncio.gather(*(s.GetInductionStats(request, timeout=5) for s in stubs)))


async def one_stub_per_process(channels: Sequence[grpc.aio.Channel]) -> tuple[list[int], int]:
    """(for each channel, the index of the server process behind it; probe emails sent).

    Each channel must hold its own connection (``grpc.use_local_subchannel_pool``); the
    kernel hands each connection to one process of a ``--workers N`` server. A channel
    whose process is not known yet submits one probe email; every other unknown channel
    whose `accepted` counter moved with it reaches the same process.
    """
    stubs = [Stub(c) for c in channels]
    owner: list[int | None] = [None] * len(stubs)
    probes = 0
    for i in range(len(stubs)):
        if owner[i] is not None:
            continue
        unknown = [j for j in range(len(stubs)) if owner[j] is None]
        before = {j: (await stats(stubs[j])).accepted for j in unknown}
        probe = to_proto(f"process-probe-{i}", "probe@loadtest.invalid", f"probe-{i}", "", "<p>")
        reply = await stubs[i].SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=[probe]))
        probes += reply.accepted
        process = max((o for o in owner if o is not None), default=-1) + 1
        for j in unknown:
            if (await stats(stubs[j])).accepted > before[j]:
                owner[j] = process
        owner[i] = process
    return [o if o is not None else 0 for o in owner], probes


async def settle(stubs: Stubs, timeout_s: float = 600) -> templates_pb2.InductionStats:
    """Waits until every admitted email left the pipeline and no formation is queued."""
    deadline = time.monotonic() + timeout_s
    while True:
        st = await stats(stubs)
        done = st.processed + st.failed + st.dropped_io >= st.accepted
        if done and st.cpu_queue_depth == st.io_queue_depth == st.formation_queue_depth == 0:
            return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"pipeline not idle after {timeout_s}s: {st}")
        await asyncio.sleep(0.05)


class _Pace:
    """One caller's pacing: once the server has refused it, a send leaves no sooner than
    the caller's share of the admission rate (measured over the last `_WINDOW_S`), with
    `_HEADROOM`, makes room for what it carries: the queue stays full, but few emails
    travel only to be refused."""

    __slots__ = ("_accepted", "_saturated", "_start", "next_at")

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._accepted: deque[tuple[float, int]] = deque()
        self._saturated = False
        self.next_at = 0.0

    def _rate(self, now: float) -> float:
        while self._accepted and self._accepted[0][0] < now - _WINDOW_S:
            self._accepted.popleft()
        span = min(_WINDOW_S, now - self._start)
        got = sum(n for _, n in self._accepted)
        return got / span if got and span > 0 else _FIRST_RATE

    def after(self, sent: int, reply: templates_pb2.SubmitEmailsResponse) -> float:
        """Records a reply; how long to wait before the next send."""
        now = time.perf_counter()
        self._accepted.append((now, reply.accepted))
        self._saturated = self._saturated or reply.dropped > 0
        if not self._saturated:
            return 0.0
        self.next_at = now + min(_MAX_WAIT_S, sent / (_HEADROOM * self._rate(now)))
        return self.next_at - now


async def submit_batches(
    sends: Sequence[Send], batches: Sequence[Batch], *, concurrency: int, resend: bool = True
) -> tuple[int, int]:
    """The batches from `concurrency` callers (caller i sends through ``sends[i % len]``).

    A refused caller resends the refused tail (with `resend`), so the whole stream gets
    in; from its first refusal on it paces its sends (`_Pace`), so a full queue is not
    hammered: every refused email costs the server its transfer, parse and validation.

    Returns (accepted, dropped): every refusal counts, including those later resent.
    """
    queue: asyncio.Queue[Batch] = asyncio.Queue()
    for b in batches:
        queue.put_nowait(b)
    totals = [0, 0]

    async def caller(send: Send) -> None:
        pace = _Pace()
        while not queue.empty():
            part = queue.get_nowait()
            while True:
                reply = await send(part)
                totals[0] += reply.accepted
                totals[1] += reply.dropped
                await asyncio.sleep(pace.after(len(part.emails), reply))
                if not reply.dropped or not resend:
                    break
                part = Batch(part.emails[len(part.emails) - reply.dropped :])

    await asyncio.gather(*(caller(sends[i % len(sends)]) for i in range(concurrency)))
    return totals[0], totals[1]


async def submit_all(
    stub: Stub,
    emails: Sequence[templates_pb2.Email],
    *,
    batch: int,
    concurrency: int,
    resend: bool = True,
) -> tuple[int, int]:
    """SubmitEmails of `emails` in batches of `batch` (see `submit_batches`) through `stub`.

    Returns (accepted, dropped): every refusal counts, including those later resent.
    """
    batches = [Batch(emails[i : i + batch]) for i in range(0, len(emails), batch)]
    return await submit_batches(
        [stub_submit(stub)], batches, concurrency=concurrency, resend=resend
    )


async def until_processed(stubs: Stubs, sending: asyncio.Task[tuple[int, int]], n: int) -> float:
    """Seconds until all `n` emails went through the I/O stage (Algorithm 2's check).

    Formations still queued then are the second stage's backlog, reported apart
    (``formations_drained_s``), as the paper's throughput counts emails clustered.
    """
    t0 = time.perf_counter()
    while True:
        st = await stats(stubs)
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
