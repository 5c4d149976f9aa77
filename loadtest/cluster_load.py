"""A light mixed load whose outcome is known exactly, for a Cassandra cluster losing nodes.

Weaves, small posts, one 20,000-recipient announcement and reads (GetUnifiedThread,
GetUnreadCount, GetDelivery), about 25 calls a second spread over every replica's
channels, each call with the deadline its method's policy gives it. Every call is recorded
(method, status, cause, time), and health is polled on every replica for every service,
so a test can say afterwards what a caller and an orchestrator saw during a fault, and
check against union-find and exact counts that nothing acknowledged was lost.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from loom.v1 import common_pb2, inbox_pb2, inbox_pb2_grpc, threadweaver_pb2, threadweaver_pb2_grpc

from loadtest.corpora.unionfind import UnionFind
from server import registry

__all__ = ["Call", "MixedLoad"]

INBOX = registry.by_name("inbox").proto
THREADWEAVER = registry.by_name("threadweaver").proto

INBOXES = [f"c-i{k}" for k in range(30)]
ANNOUNCED = 20_000
SERVING = health_pb2.HealthCheckResponse.SERVING
_RETRIED = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
)


@dataclass(frozen=True, slots=True)
class Call:
    """One call as its caller saw it."""

    method: str
    code: grpc.StatusCode
    details: str
    at: float
    """When it started (monotonic)."""
    elapsed_s: float
    conditional: bool = False
    """A weave of a Message-ID never sent before: it makes a conditional write
    (``INSERT ... IF NOT EXISTS``), which is never speculated."""


async def patiently(call: Callable[[], Awaitable[Any]]) -> Any:
    """`call()` as a checking client makes it: UNAVAILABLE, DEADLINE_EXCEEDED or
    RESOURCE_EXHAUSTED (a busy or recovering cluster, a full bulkhead) are tried again, for up
    to a minute; anything else fails."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as exc:
            retry = exc.code() in _RETRIED
            if not retry or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)


@dataclass
class MixedLoad:
    """The load over `channels` (any mix of replicas), at `rate` calls per second."""

    channels: list[grpc.aio.Channel]
    rng: random.Random
    rate: float = 25.0
    calls: list[Call] = field(default_factory=list)
    not_serving: list[tuple[float, int, str]] = field(default_factory=list)
    """(when, replica, service) of every health answer other than SERVING (an orchestrator
    would stop routing to that replica)."""
    weaves: list[tuple[str, str, str]] = field(default_factory=list)
    posts: list[tuple[str, int, list[str]]] = field(default_factory=list)
    woven: set[tuple[str, str]] = field(default_factory=set)
    acked_weaves: list[tuple[str, str, str]] = field(default_factory=list)
    acked_posts: list[tuple[str, int, list[str]]] = field(default_factory=list)
    delivery_id: str = ""
    shed: int = 0
    """Calls a full bulkhead refused at once and the client sent again."""
    _next: int = 0
    _message_id: int = 0

    def _channel(self) -> grpc.aio.Channel:
        self._next += 1
        return self.channels[self._next % len(self.channels)]

    async def _call(
        self,
        method: str,
        send: Callable[..., Awaitable[Any]],
        request: Any,
        budget_s: float,
        conditional: bool = False,
    ) -> Any:
        """`send(request)` within `budget_s`, as a client makes it: a call shed at once by a
        full bulkhead (RESOURCE_EXHAUSTED) is sent again after a short pause while its
        deadline allows (`shed` counts those); the outcome is recorded."""
        started = time.monotonic()
        ends = started + budget_s
        while True:
            try:
                reply = await send(request, timeout=max(0.01, ends - time.monotonic()))
            except grpc.aio.AioRpcError as exc:
                pause = 0.05 + 0.1 * random.random()  # not the load's own sequence
                shed = exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                if shed and time.monotonic() + pause < ends - 0.05:
                    self.shed += 1
                    await asyncio.sleep(pause)
                    continue
                elapsed = time.monotonic() - started
                details = exc.details() or ""
                self.calls.append(
                    Call(method, exc.code(), details, started, elapsed, conditional=conditional)
                )
                return None
            elapsed = time.monotonic() - started
            self.calls.append(
                Call(method, grpc.StatusCode.OK, "", started, elapsed, conditional=conditional)
            )
            return reply

    async def _weave(self) -> None:
        rng = self.rng
        gid, thread = f"u{rng.randrange(30)}", f"t{rng.randrange(4)}"
        # Half the weaves carry a Message-ID never sent before (a conditional write on every
        # store); the rest one of 300 shared ones, which link conversations.
        fresh = rng.random() < 0.5
        rfc = f"<n{len(self.weaves)}@c>" if fresh else f"<m{rng.randrange(300)}@c>"
        message = threadweaver_pb2.WovenMessage(
            gid=gid, thread_id=thread, rfc_message_id=rfc, sent_at=Timestamp(seconds=len(rfc))
        )
        stub = threadweaver_pb2_grpc.ThreadWeaverStub(self._channel())
        request = threadweaver_pb2.WeaveMessageRequest(message=message)
        # Recorded before the call: a call that failed may still have been applied.
        self.weaves.append((gid, thread, rfc))
        if await self._call("WeaveMessage", stub.WeaveMessage, request, 5.0, fresh) is not None:
            self.woven.add((gid, thread))
            self.acked_weaves.append((gid, thread, rfc))

    async def _post(self) -> None:
        self._message_id += 1
        recipients = self.rng.sample(INBOXES, self.rng.randint(1, 4))
        thread = f"c-t{self._message_id}"
        post = (thread, self._message_id, recipients)
        self.posts.append(post)
        stub = inbox_pb2_grpc.InboxStub(self._channel())
        request = inbox_pb2.PostMessageRequest(
            thread_id=thread, message_id=self._message_id, sender_inbox_id="c-sender",
            recipient_inbox_ids=recipients,
        )  # fmt: skip
        if await self._call("PostMessage", stub.PostMessage, request, 30.0) is not None:
            self.acked_posts.append(post)

    async def _read(self) -> None:
        if self.woven and self.rng.random() < 0.5:
            gid, thread = self.rng.choice(sorted(self.woven))
            stub = threadweaver_pb2_grpc.ThreadWeaverStub(self._channel())
            request = threadweaver_pb2.GetUnifiedThreadRequest(gid=gid, thread_id=thread)
            await self._call("GetUnifiedThread", stub.GetUnifiedThread, request, 5.0)
            return
        inbox = inbox_pb2_grpc.InboxStub(self._channel())
        if self.delivery_id and self.rng.random() < 0.4:
            ask = inbox_pb2.GetDeliveryRequest(delivery_id=self.delivery_id)
            await self._call("GetDelivery", inbox.GetDelivery, ask, 2.0)
            return
        count = inbox_pb2.GetUnreadCountRequest(inbox_id=self.rng.choice(INBOXES))
        await self._call("GetUnreadCount", inbox.GetUnreadCount, count, 1.0)

    async def announce(self) -> None:
        """One PostMessage to ANNOUNCED inboxes (a background fan-out), sent again until
        accepted, as a client sends it (a retry of the same post is the same delivery); it is
        not one of the load's recorded calls."""
        self._message_id += 1
        stub = inbox_pb2_grpc.InboxStub(self._channel())
        request = inbox_pb2.PostMessageRequest(
            thread_id="c-announcement", message_id=self._message_id, sender_inbox_id="c-sender",
            recipient_inbox_ids=[f"c-all{k}" for k in range(ANNOUNCED)],
        )  # fmt: skip
        reply = await patiently(partial(stub.PostMessage, request, timeout=30.0))
        assert isinstance(reply, inbox_pb2.PostMessageResponse), self.failures()
        self.delivery_id = reply.delivery_id

    async def run(self, stop: asyncio.Event) -> None:
        """Calls at `rate` per second (weave 40 %, post 20 %, read 40 %) until `stop`."""
        running: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            roll = self.rng.random()
            work = self._weave() if roll < 0.4 else self._post() if roll < 0.6 else self._read()
            task = asyncio.ensure_future(work)
            running.add(task)
            task.add_done_callback(running.discard)
            await asyncio.sleep(1.0 / self.rate)
        await asyncio.gather(*running)

    async def watch_health(self, targets: list[str], stop: asyncio.Event) -> None:
        """Every 0.25 s, each replica's health for the server and both services."""
        chans = [grpc.aio.insecure_channel(t) for t in targets]
        try:
            while not stop.is_set():
                for replica, channel in enumerate(chans):
                    await self._health(replica, channel)
                await asyncio.sleep(0.25)
        finally:
            for channel in chans:
                await channel.close()

    async def _health(self, replica: int, channel: grpc.aio.Channel) -> None:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", THREADWEAVER, INBOX):
            ask = health_pb2.HealthCheckRequest(service=service)
            try:
                status = (await stub.Check(ask, timeout=1.0)).status
            except grpc.aio.AioRpcError:
                continue  # unanswered within 1 s on a busy machine: no verdict either way
            if status != SERVING:
                self.not_serving.append((time.monotonic(), replica, service))

    def failures(self, since: float = 0.0, until: float = float("inf")) -> list[Call]:
        """Calls that did not succeed, started within [since, until)."""
        return [c for c in self.calls if c.code != grpc.StatusCode.OK and since <= c.at < until]

    def report(self, calls: list[Call], **marks: float) -> str:
        """`calls`, one line each: seconds into the load, method, status, duration, cause;
        then each of `marks` (a name and a monotonic time, such as a freeze's) as seconds
        into the load, so a failure can be placed against the fault."""
        start = self.calls[0].at if self.calls else 0.0
        lines = [
            f"{c.at - start:7.2f}s {c.method} {c.code.name} {c.elapsed_s:.2f}s {c.details[:300]}"
            for c in calls[:40]
        ]
        lines += [f"{at - start:7.2f}s ({name})" for name, at in marks.items()]
        return f"{len(calls)} of {len(self.calls)} calls:\n" + "\n".join(lines)

    async def check_announcement(self) -> None:
        """The announcement finishes with every inbox updated; a sample of its inboxes each
        hold exactly the one unread thread."""
        stub = inbox_pb2_grpc.InboxStub(self.channels[0])
        deadline = time.monotonic() + 180
        while True:
            ask = inbox_pb2.GetDeliveryRequest(delivery_id=self.delivery_id)
            got = await patiently(partial(stub.GetDelivery, ask, timeout=5.0))
            if got.state == inbox_pb2.DELIVERY_STATE_DONE:
                break
            assert time.monotonic() < deadline, f"announcement not done: {got}"
            await asyncio.sleep(1.0)
        assert (got.progress.done, got.progress.total) == (ANNOUNCED, ANNOUNCED)
        for k in self.rng.sample(range(ANNOUNCED), 200):
            request = inbox_pb2.GetUnreadCountRequest(inbox_id=f"c-all{k}")
            reply = await patiently(partial(stub.GetUnreadCount, request, timeout=5.0))
            assert reply.unread_count == 1, f"c-all{k}"

    @staticmethod
    def _per_inbox(posts: list[tuple[str, int, list[str]]]) -> dict[str, int]:
        counts = dict.fromkeys(INBOXES, 0)
        for _, _, recipients in posts:
            for inbox in recipients:
                counts[inbox] += 1
        return counts

    def unread_bounds(self) -> dict[str, tuple[int, int]]:
        """Per small inbox: at least its acknowledged posts, at most every post sent to it
        (one that failed may or may not have been delivered)."""
        least, most = self._per_inbox(self.acked_posts), self._per_inbox(self.posts)
        return {inbox: (least[inbox], most[inbox]) for inbox in INBOXES}

    async def unread_counts(self) -> dict[str, int]:
        """Every small inbox's unread count, as the service answers it."""
        stub = inbox_pb2_grpc.InboxStub(self.channels[0])
        counts = {}
        for inbox in INBOXES:
            request = inbox_pb2.GetUnreadCountRequest(inbox_id=inbox)
            reply = await patiently(partial(stub.GetUnreadCount, request, timeout=5.0))
            counts[inbox] = reply.unread_count
        return counts

    def acknowledged_weaves(self) -> dict[tuple[str, str], set[tuple[str, str]]]:
        """The conversations the acknowledged weaves alone make: root -> its threads."""
        found = self.conversations(self.acked_weaves)
        components: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for thread in found:
            components.setdefault(found.find(thread), set()).add(thread)
        return components

    @staticmethod
    def conversations(weaves: list[tuple[str, str, str]]) -> UnionFind[tuple[str, str]]:
        """Union-find over `weaves`: threads sharing a Message-ID are one conversation."""
        found: UnionFind[tuple[str, str]] = UnionFind()
        first: dict[str, tuple[str, str]] = {}
        for gid, thread, rfc in weaves:
            found.add((gid, thread))
            found.union(first.setdefault(rfc, (gid, thread)), (gid, thread))
        return found

    async def resolved(self) -> dict[tuple[str, str], str]:
        """Each woven thread's unified thread, as the service answers it (a thread whose
        only weaves failed may be unknown to it, and is left out)."""
        threads = sorted({(gid, thread) for gid, thread, _ in self.weaves})
        stub = threadweaver_pb2_grpc.ThreadWeaverStub(self.channels[0])
        found: dict[tuple[str, str], str] = {}
        for start in range(0, len(threads), 100):
            refs = [
                common_pb2.ThreadRef(gid=g, thread_id=t) for g, t in threads[start : start + 100]
            ]
            ask = threadweaver_pb2.ResolveThreadsRequest(threads=refs)
            reply = await patiently(partial(stub.ResolveThreads, ask, timeout=10.0))
            found |= {
                (r.thread.gid, r.thread.thread_id): r.unified_thread_id
                for r in reply.threads
                if r.found
            }
        return found
