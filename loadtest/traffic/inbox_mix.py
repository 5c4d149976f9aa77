"""The inbox workload's load generators: lean open-loop clients, one per process.

One Python process cannot both issue 2,000+ gRPC calls a second and measure them honestly
(its own event loop becomes the bottleneck and the latencies it reports are its own
queueing), so the workload runs several of these in a process pool. Client ``k`` of ``n``
owns arrivals ``i ≡ k (mod n)`` of one global schedule: arrival ``i`` is due at
``start + i / rate`` on CLOCK_MONOTONIC (shared by every process on the machine), and its
latency runs from that instant (open loop: a stalled server shows up as late calls).

Requests are pre-serialized bytes sent through ``request_serializer=None`` stubs, so the
client's per-call work is a dict lookup and the RPC itself. Everything crossing the process
boundary is plain data (``ClientSpec`` in, ``ClientResult`` out).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from array import array
from collections import Counter, deque
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2
from loom.v1 import inbox_pb2

from loadtest.channels import PLAINTEXT, ChannelSecurity

__all__ = ["MIX", "ClientResult", "ClientSpec", "run_client", "warm"]

MIX: tuple[tuple[str, float], ...] = (
    ("GetUnreadCount", 0.90),
    ("ListInbox", 0.08),
    ("PostMessage", 0.02),
)
"""Yammer's inbox traffic: 450 M of 500 M daily requests are unread counts (slides)."""

_POST_ID_BASE = 10**12  # above every pre-population message id: a post is always newest
_YIELD_EVERY = 32


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """What one client process runs."""

    target: str
    kind: str
    """"mix" (Yammer's mix over the inbox methods), "unread" (GetUnreadCount only: the
    isolation probe) or "health" (the floor)."""
    rate: float
    """The *global* arrival rate; this client issues 1 / n of it."""
    duration_s: float
    start_at: float
    """``time.monotonic()`` instant of arrival 0."""
    index: int
    clients: int
    inboxes: tuple[str, ...]
    threads: int
    """Pre-populated thread ids are ``t0 .. t{threads-1}`` (posts reuse half of them)."""
    seed: int
    max_in_flight: int = 1000
    timeout_s: float = 10.0
    security: ChannelSecurity = PLAINTEXT
    """TLS and bearer token for the channel (the harness's, for a secured ``--target``)."""


@dataclass(slots=True)
class ClientResult:
    """Latencies (seconds, from the scheduled instant) and failures per method."""

    latencies: dict[str, array[float]] = field(default_factory=dict)
    due: dict[str, array[float]] = field(default_factory=dict)
    """Scheduled instant (CLOCK_MONOTONIC) of each latency, index for index: lets a caller
    keep only the calls issued while something else (an announcement) was running."""
    errors: dict[str, Counter[str]] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    issued: int = 0
    wall_s: float = 0.0
    late_start_s: float = 0.0
    """How late the client process reached arrival 0 (a sanity check on start-up)."""


class _Requests:
    """Pre-serialized requests and the raw stubs that send them."""

    def __init__(self, channel: grpc.aio.Channel, spec: ClientSpec) -> None:
        self.spec = spec
        self.unread = [
            inbox_pb2.GetUnreadCountRequest(inbox_id=i).SerializeToString() for i in spec.inboxes
        ]
        self.first_page = [
            inbox_pb2.ListInboxRequest(
                inbox_id=i, filter=inbox_pb2.INBOX_FILTER_ALL, page_size=50
            ).SerializeToString()
            for i in spec.inboxes
        ]
        self.health = health_pb2.HealthCheckRequest(service="").SerializeToString()
        self.tokens: deque[tuple[int, str]] = deque(maxlen=256)
        self.stubs = {
            "GetUnreadCount": channel.unary_unary(
                "/loom.v1.Inbox/GetUnreadCount",
                request_serializer=None,
                response_deserializer=None,
            ),
            "ListInbox": channel.unary_unary(
                "/loom.v1.Inbox/ListInbox",
                request_serializer=None,
                response_deserializer=inbox_pb2.ListInboxResponse.FromString,
            ),
            "PostMessage": channel.unary_unary(
                "/loom.v1.Inbox/PostMessage",
                request_serializer=None,
                response_deserializer=None,
            ),
            "health": channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=None,
                response_deserializer=None,
            ),
        }

    def pick(self, i: int, rng: random.Random) -> tuple[str, bytes, int]:
        """The method, request and (for ListInbox) inbox index of arrival ``i``."""
        spec = self.spec
        if spec.kind == "health":
            return "health", self.health, -1
        n = len(spec.inboxes)
        if spec.kind == "unread":
            return "GetUnreadCount", self.unread[i % n], -1
        u = rng.random()
        if u < MIX[0][1]:
            return "GetUnreadCount", self.unread[rng.randrange(n)], -1
        if u < MIX[0][1] + MIX[1][1]:
            if self.tokens and rng.random() < 0.5:  # the next page of a recent listing
                k, token = self.tokens.popleft()
                req = inbox_pb2.ListInboxRequest(
                    inbox_id=spec.inboxes[k],
                    filter=inbox_pb2.INBOX_FILTER_ALL,
                    page_size=50,
                    page_token=token,
                )
                return "ListInbox", req.SerializeToString(), k
            k = rng.randrange(n)
            return "ListInbox", self.first_page[k], k
        recipients = rng.sample(spec.inboxes, rng.randint(1, 50))
        thread = f"t{rng.randrange(spec.threads)}" if rng.random() < 0.5 else f"lt{i}"
        post = inbox_pb2.PostMessageRequest(
            thread_id=thread,
            message_id=_POST_ID_BASE + i,
            sender_inbox_id=spec.inboxes[rng.randrange(n)],
            recipient_inbox_ids=recipients,
        )
        return "PostMessage", post.SerializeToString(), -1


async def _client(spec: ClientSpec) -> ClientResult:
    result = ClientResult()
    options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    async with spec.security.channel(spec.target, options) as channel:
        reqs = _Requests(channel, spec)
        rng = random.Random(spec.seed * 1_000_003 + spec.index)
        planned = int(spec.rate * spec.duration_s)
        in_flight: set[asyncio.Task[None]] = set()
        lat: dict[str, array[float]] = result.latencies
        errs: dict[str, Counter[str]] = result.errors

        async def call(method: str, body: bytes, due: float, inbox: int) -> None:
            try:
                reply = await reqs.stubs[method](body, timeout=spec.timeout_s)
            except grpc.aio.AioRpcError as exc:
                errs.setdefault(method, Counter())[exc.code().name] += 1
                return
            lat.setdefault(method, array("d")).append(time.monotonic() - due)
            result.due.setdefault(method, array("d")).append(due)
            if isinstance(reply, inbox_pb2.ListInboxResponse) and reply.next_page_token:
                reqs.tokens.append((inbox, reply.next_page_token))

        await asyncio.sleep(max(0.0, spec.start_at - time.monotonic()))
        result.late_start_s = max(0.0, time.monotonic() - spec.start_at)
        for i in range(spec.index, planned, spec.clients):
            due = spec.start_at + i / spec.rate
            delay = due - time.monotonic()
            if delay > 0:
                # uvloop's timers have millisecond resolution and may fire a fraction of a
                # millisecond early: never issue a call before its due instant, or a fast
                # call would be timed from the future (latencies of ~0 or below).
                while delay > 0:
                    await asyncio.sleep(delay)
                    delay = due - time.monotonic()
            elif (i // spec.clients) % _YIELD_EVERY == 0:
                await asyncio.sleep(0)  # behind schedule: still let replies be processed
            method, body, inbox = reqs.pick(i, rng)
            if len(in_flight) >= spec.max_in_flight:
                result.dropped[method] = result.dropped.get(method, 0) + 1
                continue
            task = asyncio.create_task(call(method, body, due, inbox))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            result.issued += 1
        if in_flight:
            await asyncio.gather(*in_flight)
        result.wall_s = time.monotonic() - spec.start_at
    return result


def warm(pause_s: float) -> int:
    """Makes a pool worker import this module (grpc, protobuf) before any schedule starts."""
    time.sleep(pause_s)
    return os.getpid()


def run_client(spec: ClientSpec) -> ClientResult:
    """Process-pool entry point: one client on its own (uv)loop."""
    try:
        import uvloop  # optional speed-up of the generator

        return uvloop.run(_client(spec))
    except ImportError:
        return asyncio.run(_client(spec))
