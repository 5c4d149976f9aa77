"""WatchInbox under load, through real ``loom serve`` processes and real streams.

One run, in order:

1. *idle cost*: the servers' resident memory and CPU before and after W watchers open
   (each on its own inbox, over 32 connections spread over the replicas), then 10 s idle;
2. *floor*: the unary round trip of GetUnreadCount on the same server (the plainest real
   hop a change could reach a client through);
3. *post -> event*: P posts at R/s, each to one watched inbox, written through the first
   replica; the time from sending the post to the watcher (on any replica) reading its
   DELIVERED event, p50 and p99, against the floor;
4. *polling vs watching*: the servers' CPU while the same W clients poll GetUnreadCount every
   5 s (W/5 calls/s), against their CPU while the W watchers receive step 3's events;
5. with ``--announce N``: one post to N recipients that include every watched inbox: the
   fan-out's time (GetDelivery DONE) and the time until the last watcher had its event.

    source .engines/env
    .venv/bin/python -m loadtest.benches.inbox_watch --store sqlite --watchers 1000
    .venv/bin/python -m loadtest.benches.inbox_watch --store sqlite --watchers 10000 \\
        --announce 300000
    .venv/bin/python -m loadtest.benches.inbox_watch --store cassandra --replicas 2 \\
        --watchers 1000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from loadtest.server import SERVER_PIDS, loom_server
from loadtest.stores import store_env

__all__ = ["main"]

K = inbox_pb2
_CONNECTIONS = 32
_TICK = os.sysconf("SC_CLK_TCK")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


class _Servers:
    def __init__(self, targets: list[str]) -> None:
        self.targets = targets
        self.pids = [SERVER_PIDS[t] for t in targets]

    def rss_kib(self) -> int:
        return sum(_rss_kib(p) for p in self.pids)

    def cpu_s(self) -> float:
        return sum(_cpu_s(p) for p in self.pids)


@contextlib.asynccontextmanager
async def _servers(args: Any) -> AsyncIterator[_Servers]:
    run = uuid.uuid4().hex[:8]
    env = {**store_env(args.store, run, os.environ), "LOOM_STORAGE__INBOX_STORE": args.store}
    async with contextlib.AsyncExitStack() as stack:
        data = Path(await stack.enter_async_context(_tempdir()))
        targets = [
            await stack.enter_async_context(
                loom_server(data_dir=data, env=env, startup_timeout_s=120)
            )
            for _ in range(args.replicas)
        ]
        yield _Servers(targets)


@contextlib.asynccontextmanager
async def _tempdir() -> AsyncIterator[str]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="loom-watch-") as tmp:
        yield tmp


class _Watchers:
    """W streams, one per inbox; arrival times of DELIVERED events by (inbox, message)."""

    def __init__(self, stubs: list[inbox_pb2_grpc.InboxStub], inboxes: list[str]) -> None:
        self.arrived: dict[tuple[str, int], float] = {}
        self.synced = 0
        self.errors: list[str] = []
        self._calls = [
            stubs[i % len(stubs)].WatchInbox(K.WatchInboxRequest(inbox_id=inbox))
            for i, inbox in enumerate(inboxes)
        ]
        self._tasks = [
            asyncio.ensure_future(self._read(inbox, call))
            for inbox, call in zip(inboxes, self._calls, strict=True)
        ]

    async def _read(self, inbox: str, call: Any) -> None:
        try:
            async for event in call:
                if event.kind == K.INBOX_EVENT_KIND_SYNCED:
                    self.synced += 1
                elif event.kind == K.INBOX_EVENT_KIND_DELIVERED:
                    self.arrived.setdefault((inbox, event.message_id), time.perf_counter())
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.errors.append(exc.code().name)

    async def close(self) -> None:
        for call in self._calls:
            call.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _until(check: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def _run(args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "store": args.store,
        "replicas": args.replicas,
        "watchers": args.watchers,
    }
    rng = random.Random(35)
    async with _servers(args) as servers, contextlib.AsyncExitStack() as stack:
        chans = [
            await stack.enter_async_context(
                grpc.aio.insecure_channel(
                    servers.targets[i % len(servers.targets)],
                    options=[("grpc.use_local_subchannel_pool", 1)],
                )
            )
            for i in range(_CONNECTIONS)
        ]
        stubs = [inbox_pb2_grpc.InboxStub(c) for c in chans]
        writer = stubs[0]
        await asyncio.sleep(3)
        rss0, cpu0 = servers.rss_kib(), servers.cpu_s()
        inboxes = [f"w{i:06}" for i in range(args.watchers)]
        opened = time.perf_counter()
        watchers = _Watchers(stubs, inboxes)
        ok = await _until(lambda: watchers.synced >= len(inboxes), 300)
        out["open_all_s"] = round(time.perf_counter() - opened, 2)
        out["synced"] = watchers.synced
        if not ok:
            out["errors"] = watchers.errors[:5]
            await watchers.close()
            return out
        await asyncio.sleep(2)
        rss1, cpu1 = servers.rss_kib(), servers.cpu_s()
        await asyncio.sleep(10)
        cpu2 = servers.cpu_s()
        out["idle"] = {
            "rss_before_mib": round(rss0 / 1024, 1),
            "rss_with_watchers_mib": round(rss1 / 1024, 1),
            "kib_per_watcher": round((rss1 - rss0) / max(1, len(inboxes)), 2),
            "server_cpu_pct_idle_with_watchers": round((cpu2 - cpu1) / 10 * 100, 2),
            "connection_setup_cpu_s": round(cpu1 - cpu0, 2),
        }
        # The floor: one unary hop.
        rtts = []
        for i in range(200):
            t0 = time.perf_counter()
            await writer.GetUnreadCount(K.GetUnreadCountRequest(inbox_id=f"w{i:06}"))
            rtts.append(time.perf_counter() - t0)
        out["floor_unary_rtt_ms"] = {"p50": _pct(rtts, 0.5), "p99": _pct(rtts, 0.99)}
        # Post -> event.
        sent: dict[tuple[str, int], float] = {}
        cpu_a = servers.cpu_s()
        t_start = time.perf_counter()
        for m in range(1, (args.posts if inboxes else 0) + 1):
            inbox = rng.choice(inboxes)
            sent[(inbox, m)] = time.perf_counter()
            await writer.PostMessage(
                K.PostMessageRequest(
                    thread_id=f"t{m}", message_id=m, sender_inbox_id="bench-sender",
                    recipient_inbox_ids=[inbox],
                )
            )  # fmt: skip
            await asyncio.sleep(max(0.0, t_start + m / args.rate - time.perf_counter()))
        await _until(lambda: all(k in watchers.arrived for k in sent), 60)
        watch_window = time.perf_counter() - t_start
        cpu_watch = servers.cpu_s() - cpu_a
        lat = [watchers.arrived[k] - t for k, t in sent.items() if k in watchers.arrived] or [0.0]
        out["post_to_event_ms"] = {
            "posts": len(sent),
            "received": len(lat),
            "p50": _pct(lat, 0.5),
            "p99": _pct(lat, 0.99),
            "p50_over_floor": round(
                _pct(lat, 0.5) / max(out["floor_unary_rtt_ms"]["p50"], 0.01), 1
            ),
        }
        # Polling the same clients would cost: W/5 GetUnreadCount per second.
        poll_rate = max(1, len(inboxes)) / 5
        cpu_b = servers.cpu_s()
        t_poll = time.perf_counter()
        done_polls = 0
        window = 10.0

        async def poller(k: int) -> None:
            nonlocal done_polls
            stub = stubs[k % len(stubs)]
            per = poll_rate / 64
            n = 0
            while time.perf_counter() - t_poll < window:
                await stub.GetUnreadCount(
                    K.GetUnreadCountRequest(inbox_id=rng.choice(inboxes or ["x"]))
                )
                n += 1
                done_polls += 1
                await asyncio.sleep(max(0.0, t_poll + n / per - time.perf_counter()))

        await asyncio.gather(*(poller(k) for k in range(64)))
        poll_s = time.perf_counter() - t_poll
        cpu_poll = servers.cpu_s() - cpu_b
        out["polling_vs_watching"] = {
            "polls_per_s_target": poll_rate,
            "polls_per_s_done": round(done_polls / poll_s, 1),
            "server_cpu_pct_polling": round(cpu_poll / poll_s * 100, 1),
            "events_per_s_watching": round(len(sent) / watch_window, 1),
            "server_cpu_pct_watching": round(cpu_watch / watch_window * 100, 1),
        }
        if args.announce:
            recipients = inboxes + [f"a{i:07}" for i in range(args.announce - len(inboxes))]
            rng.shuffle(recipients)
            m = args.posts + 1
            t0 = time.perf_counter()
            reply = await writer.PostMessage(
                K.PostMessageRequest(
                    thread_id="announce", message_id=m, sender_inbox_id="bench-sender",
                    recipient_inbox_ids=recipients,
                ),
                timeout=120,
            )  # fmt: skip
            done_at = None
            while done_at is None:
                d = await writer.GetDelivery(K.GetDeliveryRequest(delivery_id=reply.delivery_id))
                if d.state == K.DELIVERY_STATE_DONE:
                    done_at = time.perf_counter()
                await asyncio.sleep(0.05)
            got = await _until(lambda: all((i, m) in watchers.arrived for i in inboxes), 120)
            last = max((watchers.arrived.get((i, m), 0.0) for i in inboxes), default=0.0)
            out["announcement"] = {
                "recipients": len(recipients),
                "fanout_done_s": round(done_at - t0, 2),
                "every_watcher_had_it": got,
                "last_watcher_event_s": round(last - t0, 2),
            }
        out["stream_errors"] = watchers.errors[:5]
        await watchers.close()
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="sqlite", choices=["sqlite", "cassandra"])
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--watchers", type=int, default=1000)
    parser.add_argument("--posts", type=int, default=300)
    parser.add_argument("--rate", type=float, default=50.0, help="posts per second")
    parser.add_argument("--announce", type=int, default=0, help="recipients of one big post")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(_run(args)), indent=2))


if __name__ == "__main__":
    main()
