"""Inbox: Yammer's traffic mix at a fixed rate per store, and a 300K-recipient announcement.

``python -m loadtest inbox [--store sqlite,cassandra] [--rate 1000,2000] [--duration 20]
--json OUT.json --png OUT.png``

Per store, through a real ``loom serve --inbox-store S``:

1. Pre-population: ``--inboxes`` inboxes (default 2,000) with a few dozen threads each
   (group posts of 400 recipients) and ``--heavy`` heavy inboxes with ~3,000 threads each;
   most inboxes are then marked read, so unread counts are small (Yammer: p95 < 100).
2. Per rate: a ``grpc.health.v1`` Check phase at that rate (the floor: what the server, the
   client and this machine cost for a call that does nothing), then Yammer's mix at the same
   rate — 90 % GetUnreadCount, 8 % ListInbox (first pages of the whole inbox and next pages
   from their tokens), 2 % PostMessage (fan-outs of 1-50 recipients) — open loop from the
   scheduled start, from ``--clients`` processes. Per method p50/p99/p999 and its ratio to
   the floor; a rate is *sustained* when the achieved rate is within 3 % of the offered one,
   nothing failed or was dropped, unread p999 < 30 ms and list p99 < 250 ms (Yammer's
   figures).
3. A 300,000-recipient announcement: PostMessage until acknowledged, then GetDelivery polled
   until DONE; its progress curve is a plot. Around it, in the same run:

   - ``unread-unloaded``: an open-loop GetUnreadCount probe at ``--probe-rate`` from a client
     process for ``--probe-seconds``, nothing else running (the baseline);
   - ``unread-during``: the same probe started just before the PostMessage, of which only the
     calls scheduled between the PostMessage and DONE count; the figure is its p99 as a
     multiple of the unloaded p99 (aim: < 2x);
   - Cassandra only, ``raw-writes``: the node's raw write rate for the same rows — one inbox
     row and one unread row per recipient, written by the driver's plain concurrent insert
     loop from this process (``loadtest/baselines/cassandra_raw.py``), no Loom logic — and
     the announcement's time as a fraction of that loop's time.

Cassandra needs ``scripts/engines/up.sh cassandra && source .engines/env``
(LOOM_TEST_CASSANDRA_CONTACT_POINTS / _PORT); each run gets a fresh keyspace.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import time
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from loom.v1 import inbox_pb2, inbox_pb2_grpc

from loadtest.baselines.cassandra_raw import drop_keyspace
from loadtest.harness import Harness
from loadtest.phases.inbox_announcement import announce, raw_baseline
from loadtest.recorder import LatencyRecorder
from loadtest.traffic.inbox_mix import MIX, ClientResult, ClientSpec, run_client, warm
from storage.engines import INBOX_STORES

__all__ = ["add_arguments", "run", "store_env"]

METHODS = tuple(name for name, _ in MIX)
UNREAD_P999_MS = 30.0
LIST_P99_MS = 250.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Stores, rates, data shape and effort."""
    parser.add_argument("--store", default="sqlite", help="comma-separated: sqlite,cassandra")
    parser.add_argument("--rate", default="2000", help="comma-separated requests/s to try")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per phase")
    parser.add_argument("--clients", type=int, default=2, help="load-generator processes")
    parser.add_argument("--inboxes", type=int, default=2000)
    parser.add_argument("--group-posts", type=int, default=300, help="posts of --group-size")
    parser.add_argument("--group-size", type=int, default=400)
    parser.add_argument("--heavy", type=int, default=20, help="inboxes with ~3,000 threads")
    parser.add_argument("--heavy-threads", type=int, default=3000)
    parser.add_argument("--read-fraction", type=float, default=0.8, help="inboxes marked read")
    parser.add_argument("--announcement", type=int, default=300_000, help="0 skips it")
    parser.add_argument("--announcement-timeout", type=float, default=600.0)
    parser.add_argument("--probe-rate", type=float, default=200.0, help="GetUnreadCount/s probe")
    parser.add_argument("--probe-seconds", type=float, default=5.0, help="unloaded probe phase")
    parser.add_argument(
        "--announcement-probe-seconds",
        type=float,
        default=30.0,
        help="probe length around the announcement (must outlast it)",
    )
    parser.add_argument("--raw-concurrency", type=int, default=128, help="raw loop in flight")
    parser.add_argument(
        "--no-raw-baseline", action="store_true", help="skip the Cassandra raw-write baseline"
    )
    parser.add_argument(
        "--server-log-level",
        default="warning",
        help="the server logs every RPC at info: that is not free at 2K/s",
    )
    parser.add_argument("--seed", type=int, default=5)


def store_env(store: str) -> dict[str, str]:
    if store == "sqlite":
        return {}
    if store not in INBOX_STORES.names:
        raise SystemExit(f"unknown inbox store {store!r} ({' or '.join(INBOX_STORES.names)})")
    points = os.environ.get("LOOM_TEST_CASSANDRA_CONTACT_POINTS")
    port = os.environ.get("LOOM_TEST_CASSANDRA_PORT")
    if not points or not port:
        raise SystemExit(
            "cassandra: LOOM_TEST_CASSANDRA_CONTACT_POINTS/PORT unset "
            "(scripts/engines/up.sh cassandra && source .engines/env)"
        )
    return {
        "LOOM_CASSANDRA__CONTACT_POINTS": points,
        "LOOM_CASSANDRA__PORT": port,
        "LOOM_CASSANDRA__CREATE_SCHEMA": "true",
        "LOOM_CASSANDRA__KEYSPACE": f"loom_inbox_lt_{uuid.uuid4().hex[:10]}",
    }


async def _populate(
    stub: inbox_pb2_grpc.InboxStub, args: argparse.Namespace, inboxes: list[str]
) -> dict[str, object]:
    """Group posts over every inbox, heavy inboxes, then most inboxes marked read."""
    rng = random.Random(args.seed)
    gate = asyncio.Semaphore(16)
    message_ids = iter(range(1, 10**9))
    heavy = inboxes[: args.heavy]
    posts: list[inbox_pb2.PostMessageRequest] = []
    for t in range(args.group_posts):
        members = rng.sample(inboxes, min(args.group_size, len(inboxes)))
        posts.append(
            inbox_pb2.PostMessageRequest(
                thread_id=f"t{t}",
                message_id=next(message_ids),
                sender_inbox_id=members[0],
                recipient_inbox_ids=members[1:],
            )
        )
    for t in range(args.group_posts, args.group_posts + args.heavy_threads):
        posts.append(
            inbox_pb2.PostMessageRequest(
                thread_id=f"t{t}",
                message_id=next(message_ids),
                sender_inbox_id=rng.choice(inboxes),
                recipient_inbox_ids=[*heavy, *rng.sample(inboxes, 5)],
            )
        )

    async def send(req: inbox_pb2.PostMessageRequest) -> int:
        async with gate:
            reply = await stub.PostMessage(req, timeout=120.0)
            return int(reply.inboxes_updated)

    t0 = time.perf_counter()
    rows = sum(await asyncio.gather(*(send(p) for p in posts)))
    post_s = time.perf_counter() - t0

    async def mark(inbox: str) -> None:
        async with gate:
            await stub.MarkThreads(
                inbox_pb2.MarkThreadsRequest(inbox_id=inbox, all=True, read=True), timeout=60.0
            )

    readers = rng.sample(inboxes, int(len(inboxes) * args.read_fraction))
    await asyncio.gather(*(mark(i) for i in readers))
    sample = rng.sample(inboxes, min(200, len(inboxes)))
    counts = sorted(
        [
            (await stub.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id=i))).unread_count
            for i in sample
        ]
    )
    return {
        "posts": len(posts),
        "inbox_rows_written": rows,
        "threads": len(posts),
        "post_seconds": round(post_s, 2),
        "seconds": round(time.perf_counter() - t0, 2),
        "unread_count_p50_of_200": counts[len(counts) // 2],
        "unread_count_max_of_200": counts[-1],
    }


async def _run_clients(
    harness: Harness,
    pool: ProcessPoolExecutor,
    args: argparse.Namespace,
    target: str,
    kind: str,
    rate: float,
    inboxes: list[str],
    threads: int,
) -> list[ClientResult]:
    start_at = time.monotonic() + 1.0
    loop = asyncio.get_running_loop()
    specs = [
        ClientSpec(
            target=target,
            kind=kind,
            rate=rate,
            duration_s=args.duration,
            start_at=start_at,
            index=k,
            clients=args.clients,
            inboxes=tuple(inboxes),
            threads=threads,
            seed=args.seed,
            max_in_flight=max(100, int(rate)),
            security=harness.security,
        )
        for k in range(args.clients)
    ]
    return list(await asyncio.gather(*(loop.run_in_executor(pool, run_client, s) for s in specs)))


def _record(
    harness: Harness, name: str, results: list[ClientResult], methods: tuple[str, ...]
) -> dict[str, float]:
    """One phase per method; returns offered/achieved rates of the whole phase."""
    wall = max(r.wall_s for r in results)
    issued = sum(r.issued for r in results)
    ok_total = 0
    failed_total = 0
    for method in methods:
        rec = LatencyRecorder()
        for r in results:
            for x in r.latencies.get(method, ()):
                rec.record(x)
            for code, n in r.errors.get(method, Counter()).items():
                for _ in range(n):
                    rec.record_error(code)
            rec.dropped += r.dropped.get(method, 0)
        stats = harness.report.add_phase(f"{name}.{method}", rec.stats(wall), rec.samples_ms())
        ok_total += stats.ok
        failed_total += stats.error_count + stats.dropped
    return {
        "issued": issued,
        "ok": ok_total,
        "failed_or_dropped": failed_total,
        "achieved_rate": round(ok_total / wall, 1),
        "late_start_s_max": round(max(r.late_start_s for r in results), 3),
    }


def _rate_plots(harness: Harness, store: str, rates: list[float]) -> None:
    """Tail latency and achieved rate against the offered rate (the capacity picture)."""
    report = harness.report
    tails: dict[str, list[float]] = {}
    for method, metric in (
        ("health", "p999"),
        ("GetUnreadCount", "p999"),
        ("GetUnreadCount", "p99"),
        ("ListInbox", "p99"),
        ("PostMessage", "p99"),
    ):
        tails[f"{method} {metric}"] = [
            report.phase(f"{store}@{r:g}.{method}").metric(metric) for r in rates
        ]
    tails["Yammer unread p999 30 ms"] = [UNREAD_P999_MS] * len(rates)
    tails["Yammer list p99 250 ms"] = [LIST_P99_MS] * len(rates)
    report.add_line_plot(
        f"{store}: tail latency vs offered rate",
        rates,
        tails,
        "offered requests/s",
        "ms",
        logy=True,
    )
    achieved = {
        kind: [
            sum(report.phase(f"{store}@{r:g}.{m}").ok for m in methods)
            / max(report.phase(f"{store}@{r:g}.{m}").wall_s for m in methods)
            for r in rates
        ]
        for kind, methods in (("health", ("health",)), ("inbox mix", METHODS))
    }
    achieved["offered"] = rates
    report.add_line_plot(
        f"{store}: achieved vs offered rate (successful calls/s)",
        rates,
        achieved,
        "offered requests/s",
        "successful requests/s",
    )


async def _store_run(
    harness: Harness, pool: ProcessPoolExecutor, args: argparse.Namespace, store: str
) -> None:
    report = harness.report
    inboxes = [f"u{i:05d}" for i in range(args.inboxes)]
    threads = args.group_posts + args.heavy_threads
    extra = ["--inbox-store", store, "--log-level", args.server_log_level]
    env = store_env(store)
    announcement_s: float | None = None
    async with harness.server(extra_args=extra, env=env) as target:
        options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
        async with harness.channel(target, options=options) as channel:
            stub = inbox_pb2_grpc.InboxStub(channel)
            report.add_figure(f"{store}.population", await _populate(stub, args, inboxes))
            sustained: list[float] = []
            rates = [float(r) for r in str(args.rate).split(",")]
            for rate in rates:
                tag = f"{store}@{rate:g}"
                floor = await _run_clients(
                    harness, pool, args, target, "health", rate, inboxes, threads
                )
                floor_rates = _record(harness, tag, floor, ("health",))
                mix = await _run_clients(harness, pool, args, target, "mix", rate, inboxes, threads)
                mix_rates = _record(harness, tag, mix, METHODS)
                for method in METHODS:
                    for metric in ("p50", "p99", "p999"):
                        report.ratio(f"{tag}.{method}", f"{tag}.health", metric)
                unread = report.phase(f"{tag}.GetUnreadCount")
                listing = report.phase(f"{tag}.ListInbox")
                ok = (
                    mix_rates["achieved_rate"] >= 0.97 * rate
                    and mix_rates["failed_or_dropped"] == 0
                    and unread.p999_ms < UNREAD_P999_MS
                    and listing.p99_ms < LIST_P99_MS
                )
                report.add_figure(
                    f"{tag}.rates",
                    {
                        "offered": rate,
                        "health": floor_rates,
                        "mix": mix_rates,
                        "sustained": ok,
                        "unread_p999_under_30ms": unread.p999_ms < UNREAD_P999_MS,
                        "list_p99_under_250ms": listing.p99_ms < LIST_P99_MS,
                    },
                )
                if ok:
                    sustained.append(rate)
            report.add_figure(f"{store}.max_sustained_rate", max(sustained) if sustained else None)
            _rate_plots(harness, store, rates)
            if args.announcement > 0:
                probed = random.Random(args.seed).sample(inboxes, min(200, len(inboxes)))
                announcement_s = await announce(harness, pool, stub, target, store, args, probed)
    if store == "cassandra":
        try:
            if args.announcement > 0 and not args.no_raw_baseline:
                await raw_baseline(harness, args, env, announcement_s)
        finally:
            await asyncio.to_thread(
                drop_keyspace,
                env["LOOM_CASSANDRA__CONTACT_POINTS"].split(","),
                int(env["LOOM_CASSANDRA__PORT"]),
                env["LOOM_CASSANDRA__KEYSPACE"],
            )


async def run(args: argparse.Namespace, harness: Harness) -> None:
    """Every store in turn, one process pool of load generators for the whole run."""
    harness.report.add_figure("mix", dict(MIX))
    harness.report.add_figure("client_processes", args.clients)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.clients, mp_context=context) as pool:
        loop = asyncio.get_running_loop()
        # Start (import grpc in) every worker before any schedule starts.
        await asyncio.gather(*(loop.run_in_executor(pool, warm, 0.3) for _ in range(args.clients)))
        for store in [s.strip() for s in args.store.split(",") if s.strip()]:
            await _store_run(harness, pool, args, store)
