"""The inbox workload's announcement phase: 300K recipients, the unread probe around it, and
the Cassandra node's raw write rate for the same rows (see ``inbox.py`` step 3)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from loom.v1 import inbox_pb2, inbox_pb2_grpc

from loadtest.baselines.cassandra_raw import raw_insert_rows
from loadtest.channels import PLAINTEXT, ChannelSecurity
from loadtest.harness import Harness
from loadtest.recorder import LatencyRecorder
from loadtest.traffic.inbox_mix import ClientResult, ClientSpec, run_client

__all__ = ["ANNOUNCEMENT_S", "announce", "probe_calls", "probe_spec", "raw_baseline"]

ANNOUNCEMENT_S = 10.0
"""Yammer: an announcement to 300K inboxes delivered in under 10 s."""


def probe_calls(
    result: ClientResult, window: tuple[float, float] | None = None
) -> list[tuple[float, float]]:
    """(scheduled instant, latency s) of each GetUnreadCount call of a probe that succeeded,
    only those scheduled inside `window` if given."""
    lat = result.latencies.get("GetUnreadCount", ())
    due = result.due.get("GetUnreadCount", ())
    return [
        (d, x)
        for x, d in zip(lat, due, strict=True)
        if window is None or window[0] <= d <= window[1]
    ]


def _probe_phase(
    harness: Harness,
    name: str,
    results: list[ClientResult],
    window: tuple[float, float] | None = None,
) -> LatencyRecorder:
    """GetUnreadCount latencies of a probe (only calls scheduled inside `window`, if given)."""
    rec = LatencyRecorder()
    for r in results:
        for _, x in probe_calls(r, window):
            rec.record(x)
        for code, n in r.errors.get("GetUnreadCount", Counter()).items():
            for _ in range(n):
                rec.record_error(code)
    wall = (window[1] - window[0]) if window else max(r.wall_s for r in results)
    harness.report.add_phase(name, rec.stats(wall), rec.samples_ms())
    return rec


async def announce(
    harness: Harness,
    pool: ProcessPoolExecutor,
    stub: inbox_pb2_grpc.InboxStub,
    target: str,
    store: str,
    args: argparse.Namespace,
    probe_inboxes: list[str],
) -> float | None:
    """Time a ``--announcement``-recipient PostMessage until GetDelivery says DONE, with the
    unread-count probe before and during it; returns the seconds to DONE (None if not)."""
    report = harness.report
    loop = asyncio.get_running_loop()
    threads = args.group_posts + args.heavy_threads
    probe = functools.partial(
        probe_spec,
        target,
        probe_inboxes,
        rate=args.probe_rate,
        threads=threads,
        seed=args.seed,
        security=harness.security,
    )
    unloaded = await loop.run_in_executor(pool, run_client, probe(seconds=args.probe_seconds))
    _probe_phase(harness, f"{store}.announcement.unread-unloaded", [unloaded])

    recipients = [f"ann{i:07d}" for i in range(args.announcement)]
    req = inbox_pb2.PostMessageRequest(
        thread_id="announcement",
        message_id=2 * 10**12,
        sender_inbox_id="ceo",
        recipient_inbox_ids=recipients,
    )
    spec = probe(seconds=args.announcement_probe_seconds)
    during = loop.run_in_executor(pool, run_client, spec)
    await asyncio.sleep(max(0.0, spec.start_at + 0.5 - time.monotonic()))
    t0 = time.perf_counter()
    m0 = time.monotonic()
    reply = await stub.PostMessage(req, timeout=120.0)
    ack_s = time.perf_counter() - t0
    xs: list[float] = [0.0, ack_s]
    done: list[float] = [0.0, 0.0]
    state = "DONE" if reply.delivered else "RUNNING"
    while state == "RUNNING" and time.perf_counter() - t0 < args.announcement_timeout:
        d = await stub.GetDelivery(
            inbox_pb2.GetDeliveryRequest(delivery_id=reply.delivery_id), timeout=5.0
        )
        state = inbox_pb2.DeliveryState.Name(d.state).removeprefix("DELIVERY_STATE_")
        xs.append(time.perf_counter() - t0)
        done.append(float(d.progress.done))
        if state == "RUNNING":
            await asyncio.sleep(0.05)
    total_s = time.perf_counter() - t0
    m1 = time.monotonic()
    loaded = await during
    probe_end = spec.start_at + spec.duration_s
    _probe_phase(harness, f"{store}.announcement.unread-during", [loaded], (m0, min(m1, probe_end)))
    for metric in ("p50", "p99"):
        report.ratio(
            f"{store}.announcement.unread-during", f"{store}.announcement.unread-unloaded", metric
        )
    during_p99 = report.phase(f"{store}.announcement.unread-during").p99_ms
    unloaded_p99 = report.phase(f"{store}.announcement.unread-unloaded").p99_ms
    report.add_figure(
        f"{store}.announcement",
        {
            "recipients": args.announcement,
            "request_bytes": req.ByteSize(),
            "ack_s": round(ack_s, 3),
            "done_s": round(total_s, 3) if state == "DONE" else None,
            "final_state": state,
            "deliveries_per_s": round(args.announcement / total_s) if state == "DONE" else None,
            "under_yammer_10s": state == "DONE" and total_s < ANNOUNCEMENT_S,
            "probe_covered_whole_announcement": m1 <= probe_end,
            "unread_p99_during_over_unloaded": round(during_p99 / unloaded_p99, 3),
            "unread_p99_under_2x_unloaded": during_p99 < 2 * unloaded_p99,
            "load_average_1m_after": round(os.getloadavg()[0], 2),
        },
    )
    report.add_line_plot(
        f"{store}: {args.announcement:,}-recipient announcement (GetDelivery progress)",
        xs,
        {f"{store} inboxes delivered": done},
        "seconds since PostMessage",
        "inboxes",
    )
    return total_s if state == "DONE" else None


def probe_spec(
    target: str,
    inboxes: list[str],
    *,
    rate: float,
    seconds: float,
    threads: int,
    seed: int,
    security: ChannelSecurity = PLAINTEXT,
) -> ClientSpec:
    """An open-loop GetUnreadCount probe at `rate`/s over `inboxes`, starting in 1 s."""
    return ClientSpec(
        target=target,
        kind="unread",
        rate=rate,
        duration_s=seconds,
        start_at=time.monotonic() + 1.0,
        index=0,
        clients=1,
        inboxes=tuple(inboxes),
        threads=threads,
        seed=seed,
        max_in_flight=max(100, int(rate)),
        security=security,
    )


async def raw_baseline(
    harness: Harness, args: argparse.Namespace, env: dict[str, str], announcement_s: float | None
) -> None:
    """The same rows as the announcement, written by a plain concurrent insert loop."""
    raw = await asyncio.to_thread(
        raw_insert_rows,
        env["LOOM_CASSANDRA__CONTACT_POINTS"].split(","),
        int(env["LOOM_CASSANDRA__PORT"]),
        env["LOOM_CASSANDRA__KEYSPACE"],
        [f"ann{i:07d}" for i in range(args.announcement)],
        "announcement-raw",
        2 * 10**12,
        concurrency=args.raw_concurrency,
    )
    harness.report.add_figure(
        "cassandra.raw_writes",
        {
            "rows": raw.rows,
            "seconds": round(raw.seconds, 3),
            "rows_per_s": round(raw.rows_per_s),
            "recipients_per_s": round(raw.rows_per_s / 2),
            "concurrency": args.raw_concurrency,
            "announcement_time_over_raw_time": (
                round(announcement_s / raw.seconds, 3) if announcement_s else None
            ),
        },
    )
