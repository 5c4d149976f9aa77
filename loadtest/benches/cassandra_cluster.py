"""Loom on the three-node Cassandra cluster: read latency while a node is frozen or dead, and
what the cluster costs against one node, measured in one run.

``source .engines/env && python -m loadtest.benches.cassandra_cluster --json
loadtest/results/cassandra-cluster.json``

Needs the single node and the cluster of ``scripts/engines/up.sh`` (the cluster's login,
TLS and node control come from ``.engines/env`` and ``scripts/engines/cassandra-cluster.sh``).
One ``loom serve`` (ThreadWeaver and Inbox on Cassandra) per deployment.

* **latency**: GetUnifiedThread and GetUnreadCount, each at a fixed rate (open loop, so a
  stalled call shows as latency, not as a lower rate), p50/p99 and errors in four states of
  the cluster: healthy; one node frozen (SIGSTOP for the whole phase, speculative execution
  on, the default); the same with speculation off (``speculative_delay_s = 0``, a server
  restarted with it); one node dead (kill -9, restarted afterwards). The healthy phase is
  the baseline each other state is a ratio of.
* **mixed** (Yammer's slow node at load): the cluster tests' mixed load
  (`loadtest.cluster_load`: weaves, posts, GetUnifiedThread, GetUnreadCount, GetDelivery,
  each with its method's deadline) at ``--mixed-rate`` calls/s, after a 20,000-recipient
  announcement (``--no-announcement``: none), through one node frozen for
  ``--fault-seconds`` and then one node killed for as long (restarted afterwards, the load
  stopped): every failed call (method, status, cause) and each method's p50/p99, per phase.
  What must hold: no call fails (a call shed by a full bulkhead and sent again by the client
  within its deadline is not failed).
* **cluster vs one node**: WeaveMessage rate (closed loop), the time of one announcement to
  300,000 inboxes, and GetUnreadCount p99 probed during it, on the single node (RF 1) and on
  the cluster (RF 3, LOCAL_QUORUM, login and TLS), as cluster / one node.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import inbox_pb2, inbox_pb2_grpc, threadweaver_pb2, threadweaver_pb2_grpc

from loadtest.cluster import cluster_env, node, node_pid
from loadtest.cluster_load import Call, MixedLoad
from loadtest.modes import run_closed_loop, run_fixed_rate
from loadtest.recorder import LatencyRecorder, PhaseStats
from loadtest.server import loom_server

__all__ = ["main"]

_THREADS = 2000
_INBOXES = 500


def single_env() -> dict[str, str]:
    """A `loom serve` on the single node, fresh keyspace, RF 1."""
    return {
        "LOOM_STORAGE__THREADWEAVER_STORE": "cassandra",
        "LOOM_STORAGE__INBOX_STORE": "cassandra",
        "LOOM_CASSANDRA__CONTACT_POINTS": os.environ["LOOM_TEST_CASSANDRA_CONTACT_POINTS"],
        "LOOM_CASSANDRA__PORT": os.environ["LOOM_TEST_CASSANDRA_PORT"],
        "LOOM_CASSANDRA__KEYSPACE": f"bench_{uuid.uuid4().hex[:10]}",
        "LOOM_CASSANDRA__CREATE_SCHEMA": "true",
    }


@asynccontextmanager
async def serving(env: dict[str, str]) -> AsyncIterator[grpc.aio.Channel]:
    async with (
        loom_server(env=env, startup_timeout_s=120.0) as target,
        grpc.aio.insecure_channel(target) as channel,
    ):
        yield channel


async def seed(channel: grpc.aio.Channel) -> None:
    """_THREADS woven threads and _INBOXES inboxes with a few unread threads each."""
    weaver = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    for start in range(0, _THREADS, 500):
        messages = [
            threadweaver_pb2.WovenMessage(
                gid=f"g{i % 50}", thread_id=f"t{i}", rfc_message_id=f"<s{i // 2}@bench>",
                sent_at=Timestamp(seconds=1_700_000_000 + i),
            )
            for i in range(start, start + 500)
        ]  # fmt: skip
        await weaver.WeaveMessages(
            threadweaver_pb2.WeaveMessagesRequest(messages=messages), timeout=120
        )
    inbox = inbox_pb2_grpc.InboxStub(channel)
    for m in range(20):
        recipients = [f"i{k}" for k in range(_INBOXES) if k % 20 >= m % 3]
        await inbox.PostMessage(
            inbox_pb2.PostMessageRequest(
                thread_id=f"seed{m}", message_id=m + 1, sender_inbox_id="s",
                recipient_inbox_ids=recipients,
            ),
            timeout=60,
        )  # fmt: skip


def _reads(channel: grpc.aio.Channel) -> tuple[Callable[[int], Awaitable[object]], ...]:
    weaver = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    inbox = inbox_pb2_grpc.InboxStub(channel)

    def unified(i: int) -> Awaitable[object]:
        k = (i * 7919) % _THREADS
        return weaver.GetUnifiedThread(
            threadweaver_pb2.GetUnifiedThreadRequest(gid=f"g{k % 50}", thread_id=f"t{k}")
        )

    def unread(i: int) -> Awaitable[object]:
        request = inbox_pb2.GetUnreadCountRequest(inbox_id=f"i{(i * 31) % _INBOXES}")
        return inbox.GetUnreadCount(request)

    return unified, unread


def _summary(stats: PhaseStats) -> dict[str, Any]:
    return {
        "ok": stats.ok,
        "errors": dict(stats.errors),
        "p50_ms": round(stats.p50_ms, 2),
        "p99_ms": round(stats.p99_ms, 2),
    }


async def measure_reads(channel: grpc.aio.Channel, rate: float, seconds: float) -> dict[str, Any]:
    """Both reads at `rate` each, at once, for `seconds`."""
    unified, unread = _reads(channel)
    a, b = await asyncio.gather(
        run_fixed_rate(unified, rate=rate, duration_s=seconds, max_in_flight=500),
        run_fixed_rate(unread, rate=rate, duration_s=seconds, max_in_flight=500),
    )
    return {"GetUnifiedThread": _summary(a), "GetUnreadCount": _summary(b)}


async def latency(rate: float, seconds: float) -> dict[str, Any]:
    """The four states of the cluster, each a phase of `seconds`."""
    phases: dict[str, Any] = {}
    env = cluster_env()
    async with serving(env) as channel:
        await seed(channel)
        await measure_reads(channel, rate, 5.0)  # warm-up: connections, prepared statements
        phases["healthy"] = await measure_reads(channel, rate, seconds)
        phases["frozen"] = await _frozen(channel, rate, seconds)
    async with serving(env | {"LOOM_CASSANDRA__SPECULATIVE_DELAY_S": "0"}) as channel:
        await measure_reads(channel, rate, 5.0)
        phases["frozen, speculation off"] = await _frozen(channel, rate, seconds)
    async with serving(env) as channel:
        await measure_reads(channel, rate, 5.0)
        os.kill(node_pid(3), signal.SIGKILL)
        try:
            phases["dead"] = await measure_reads(channel, rate, seconds)
        finally:
            await asyncio.to_thread(node, "start-node", "3")
    return phases


async def _frozen(channel: grpc.aio.Channel, rate: float, seconds: float) -> dict[str, Any]:
    pid = node_pid(2)
    os.kill(pid, signal.SIGSTOP)
    try:
        return await measure_reads(channel, rate, seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
        await asyncio.sleep(10)  # let it catch up before the next phase


async def deployment(env: dict[str, str], seconds: float, announced: int) -> dict[str, Any]:
    """Weave rate, the announcement's time and the unread p99 during it, on one deployment."""
    async with serving(env) as channel:
        weaver = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
        rng = random.Random(7)

        def weave(i: int) -> Awaitable[object]:
            message = threadweaver_pb2.WovenMessage(
                gid=f"w{rng.randrange(1000)}", thread_id=f"t{i % 20_000}",
                rfc_message_id=f"<w{rng.randrange(50_000)}@bench>", sent_at=Timestamp(seconds=i),
            )  # fmt: skip
            return weaver.WeaveMessage(threadweaver_pb2.WeaveMessageRequest(message=message))

        await run_closed_loop(weave, concurrency=32, duration_s=5.0)  # warm-up
        weaves = await run_closed_loop(weave, concurrency=32, duration_s=seconds)
        inbox = inbox_pb2_grpc.InboxStub(channel)
        started = time.monotonic()
        reply = await inbox.PostMessage(
            inbox_pb2.PostMessageRequest(
                thread_id="announcement", message_id=1, sender_inbox_id="s",
                recipient_inbox_ids=[f"a{k}" for k in range(announced)],
            ),
            timeout=120,
        )  # fmt: skip
        done = asyncio.Event()

        async def finish() -> float:
            while True:
                got = await inbox.GetDelivery(
                    inbox_pb2.GetDeliveryRequest(delivery_id=reply.delivery_id), timeout=10
                )
                if got.state == inbox_pb2.DELIVERY_STATE_DONE:
                    done.set()
                    return time.monotonic() - started
                await asyncio.sleep(0.25)

        def unread(i: int) -> Awaitable[object]:
            request = inbox_pb2.GetUnreadCountRequest(inbox_id=f"a{(i * 7919) % announced}")
            return inbox.GetUnreadCount(request)

        async def probe() -> PhaseStats:
            """GetUnreadCount at 200/s, in 2 s rounds, until the announcement is done."""
            recorder, began = LatencyRecorder(), time.perf_counter()
            while not done.is_set():
                await run_fixed_rate(
                    unread, rate=200.0, duration_s=2.0, max_in_flight=500, recorder=recorder
                )
            return recorder.stats(time.perf_counter() - began)

        finished, probed = await asyncio.gather(finish(), probe())
        return {
            "weaves_per_s": round(weaves.ok / weaves.wall_s, 1),
            "weave_errors": dict(weaves.errors),
            "announcement_s": round(finished, 1),
            "unread_during_announcement": _summary(probed),
        }


def _calls(calls: list[Call]) -> dict[str, Any]:
    """Per method: calls, failures by status and cause, p50/p99 of every call's time."""
    out: dict[str, Any] = {}
    named = {
        c: c.method + (", new Message-ID (IF NOT EXISTS)" if c.conditional else "") for c in calls
    }
    for method in sorted(set(named.values())):
        mine = [c for c in calls if named[c] == method]
        times = sorted(c.elapsed_s * 1000 for c in mine)
        failed: dict[str, int] = {}
        for c in mine:
            if c.code != grpc.StatusCode.OK:
                why = f"{c.code.name}: {c.details[:120]}"
                failed[why] = failed.get(why, 0) + 1
        out[method] = {
            "calls": len(mine),
            "failed": sum(failed.values()),
            "p50_ms": round(times[len(times) // 2], 1),
            "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 1),
            "causes": failed,
        }
    return out


async def mixed(rate: float, seconds: float, announce: bool = True) -> dict[str, Any]:
    """The mixed load at `rate` through healthy, frozen, recovering, dead, restarted (the
    announcement fanning out at the healthy phase's start, unless `announce` is False)."""
    phases: dict[str, Any] = {}
    async with serving(cluster_env(LOOM_INBOX__FANOUT_RATE_PER_S="1000")) as channel:
        load = MixedLoad([channel], random.Random(50), rate=rate)
        stop = asyncio.Event()
        task = asyncio.ensure_future(load.run(stop))
        marks: list[tuple[str, float]] = []
        try:
            await asyncio.sleep(10)  # warm-up: connections, prepared statements
            marks = [("healthy", time.monotonic())]
            if announce:
                await load.announce()
            await asyncio.sleep(seconds / 2)
            pid = node_pid(2)
            marks.append(("frozen", time.monotonic()))
            os.kill(pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(seconds)
            finally:
                os.kill(pid, signal.SIGCONT)
            marks.append(("thawed", time.monotonic()))
            await asyncio.sleep(10)
            marks.append(("dead", time.monotonic()))
            os.kill(node_pid(3), signal.SIGKILL)
            await asyncio.sleep(seconds)
        finally:
            stop.set()
            await task
        marks.append(("end", time.monotonic()))
        # The restart (commit log replay, gossip) is not measured: on two shared cores it
        # takes minutes, and a cold node's first calls are the recovery's, not the fault's.
        try:
            await asyncio.to_thread(node, "start-node", "3")
        except subprocess.CalledProcessError as exc:  # keep the figures measured
            phases["restart"] = f"start-node 3 failed: {exc.stderr[-300:]}"
    for (name, since), (_, until) in itertools.pairwise(marks):
        phases[name] = _calls([c for c in load.calls if since <= c.at < until])
    failed = load.failures(since=marks[0][1])  # the warm-up's calls are not counted
    phases["all"] = {
        "calls": len([c for c in load.calls if c.at >= marks[0][1]]),
        "shed": load.shed,
        "failed": len(failed),
    }
    phases["failures"] = [
        f"{c.at - marks[0][1]:.2f}s {c.method} {c.code.name} {c.elapsed_s:.2f}s {c.details[:200]}"
        for c in failed[:200]
    ]
    return phases


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="each read's calls/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="per latency phase")
    parser.add_argument("--weave-seconds", type=float, default=20.0)
    parser.add_argument("--announcement", type=int, default=300_000)
    parser.add_argument("--mixed-rate", type=float, default=50.0, help="mixed load's calls/s")
    parser.add_argument("--fault-seconds", type=float, default=30.0, help="frozen, then dead")
    parser.add_argument(
        "--no-announcement", action="store_true", help="mixed: no announcement fanning out"
    )
    parser.add_argument("--skip", default="", help="comma-separated: latency,mixed,compare")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    skip = set(args.skip.split(","))
    result: dict[str, Any] = {"command": "python -m loadtest.benches.cassandra_cluster"}
    if "latency" not in skip:
        result["latency"] = asyncio.run(latency(args.rate, args.seconds))
        healthy = result["latency"]["healthy"]
        result["latency_ratios"] = {
            state: {
                method: round(figures[method]["p99_ms"] / healthy[method]["p99_ms"], 2)
                for method in figures
            }
            for state, figures in result["latency"].items()
        }
    if "mixed" not in skip:
        result["mixed"] = asyncio.run(
            mixed(args.mixed_rate, args.fault_seconds, not args.no_announcement)
        )
    if "compare" not in skip:
        one = asyncio.run(deployment(single_env(), args.weave_seconds, args.announcement))
        three = asyncio.run(deployment(cluster_env(), args.weave_seconds, args.announcement))
        result["one_node"], result["cluster"] = one, three
        result["cluster_over_one_node"] = {
            "weaves_per_s": round(three["weaves_per_s"] / one["weaves_per_s"], 2),
            "announcement_s": round(three["announcement_s"] / one["announcement_s"], 2),
            "unread_p99": round(
                three["unread_during_announcement"]["p99_ms"]
                / one["unread_during_announcement"]["p99_ms"],
                2,
            ),
        }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
