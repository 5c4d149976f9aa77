"""Inbox bulkhead isolation: GetUnreadCount before, during and after an announcement flood.

``python -m loadtest inbox-isolation [--store sqlite] [--probe-rate 200] [--duration 10]
--json OUT.json --png OUT.png``

Yammer's inbox went down because one kind of work took every resource of the service. Loom
gives every method its own bulkhead and runs large fan-outs in a bounded, paced background
stage, so GetUnreadCount (90 % of the traffic) should barely notice a saturated PostMessage.
Through a real ``loom serve`` (its fan-out queue set small, ``--fanout-queue``, so the flood
overflows into RESOURCE_EXHAUSTED):

1. ``unloaded``: an open-loop GetUnreadCount probe at ``--probe-rate`` for ``--duration``
   over ``--inboxes`` inboxes of 3 unread threads each, from a client process;
2. ``loaded``: the same probe while ``--posters`` callers in another process keep posting
   5,000-20,000-recipient announcements (started ``--warmup`` seconds earlier, so the
   steady flood is measured, not its start-up stampede);
3. ``unloaded-after``: the probe again once every accepted fan-out is DONE.

The figure is the loaded percentiles as a ratio of the unloaded ones (both baselines, since
these shared machines drift). Client processes are separate from the server's, so what is
measured is the server, not a load generator sharing its loop; on a 2-core machine they
still share the cores, which the report's machine facts record.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from loom.v1 import inbox_pb2, inbox_pb2_grpc

from loadtest.harness import Harness
from loadtest.recorder import LatencyRecorder
from loadtest.traffic.inbox_flood import FloodResult, FloodSpec, run_flood
from loadtest.traffic.inbox_mix import ClientResult, ClientSpec, run_client, warm
from loadtest.workloads.inbox import store_env

__all__ = ["add_arguments", "run"]

UNREAD_THREADS = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Store, probe, flood."""
    parser.add_argument("--store", default="sqlite", help="sqlite or cassandra")
    parser.add_argument("--probe-rate", type=float, default=200.0, help="GetUnreadCount/s")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per probe phase")
    parser.add_argument("--inboxes", type=int, default=200, help="probed inboxes")
    parser.add_argument("--posters", type=int, default=24, help="concurrent flood callers")
    parser.add_argument("--warmup", type=float, default=3.0, help="flood seconds before probing")
    parser.add_argument("--fanout-queue", type=int, default=8, help="server's fan-out queue")
    parser.add_argument(
        "--fanout-rate", type=float, default=None, help="server's fan-out pacing (default: its own)"
    )
    parser.add_argument("--drain-timeout", type=float, default=300.0)


def _probe_spec(
    args: argparse.Namespace, harness: Harness, target: str, start_at: float
) -> ClientSpec:
    return ClientSpec(
        target=target,
        kind="unread",
        rate=args.probe_rate,
        duration_s=args.duration,
        start_at=start_at,
        index=0,
        clients=1,
        inboxes=tuple(f"probe-{i}" for i in range(args.inboxes)),
        threads=0,
        seed=1,
        timeout_s=10.0,
        security=harness.security,
    )


def _record(harness: Harness, phase: str, result: ClientResult) -> None:
    rec = LatencyRecorder()
    for x in result.latencies.get("GetUnreadCount", ()):
        rec.record(x)
    for code, n in result.errors.get("GetUnreadCount", Counter()).items():
        for _ in range(n):
            rec.record_error(code)
    rec.dropped += result.dropped.get("GetUnreadCount", 0)
    harness.report.add_phase(phase, rec.stats(result.wall_s), rec.samples_ms())


async def _seed(stub: inbox_pb2_grpc.InboxStub, inboxes: int) -> None:
    for t in range(UNREAD_THREADS):
        await stub.PostMessage(
            inbox_pb2.PostMessageRequest(
                thread_id=f"seed-{t}",
                message_id=t + 1,
                sender_inbox_id="seeder",
                recipient_inbox_ids=[f"probe-{i}" for i in range(inboxes)],
            ),
            timeout=60.0,
        )


async def _drain(stub: inbox_pb2_grpc.InboxStub, flood: FloodResult, timeout_s: float) -> float:
    """Seconds until every accepted fan-out is DONE (fails the run past `timeout_s`)."""
    t0 = time.monotonic()
    pending = {d for *_, d in flood.accepted if d}
    while pending:
        if time.monotonic() - t0 > timeout_s:
            raise SystemExit(f"inbox-isolation: {len(pending)} fan-outs not DONE in {timeout_s}s")
        replies = await asyncio.gather(
            *(stub.GetDelivery(inbox_pb2.GetDeliveryRequest(delivery_id=d)) for d in pending)
        )
        failed = [r.delivery_id for r in replies if r.state == inbox_pb2.DELIVERY_STATE_FAILED]
        if failed:
            raise SystemExit(f"inbox-isolation: fan-outs FAILED: {failed}")
        pending = {r.delivery_id for r in replies if r.state != inbox_pb2.DELIVERY_STATE_DONE}
        await asyncio.sleep(0.2)
    return time.monotonic() - t0


async def run(args: argparse.Namespace, harness: Harness) -> None:
    """Unloaded, loaded, unloaded again; ratios of loaded to both unloaded phases."""
    report = harness.report
    env = {**store_env(args.store), "LOOM_INBOX__FANOUT_QUEUE": str(args.fanout_queue)}
    if args.fanout_rate is not None:
        env["LOOM_INBOX__FANOUT_RATE_PER_S"] = str(args.fanout_rate)
    extra = ["--inbox-store", args.store, "--log-level", "warning"]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(pool, warm, 0.3) for _ in range(2)))
        async with (
            harness.server(extra_args=extra, env=env) as target,
            harness.channel(target) as channel,
        ):
            stub = inbox_pb2_grpc.InboxStub(channel)
            await _seed(stub, args.inboxes)
            warmup = _probe_spec(args, harness, target, time.monotonic() + 0.5)
            await loop.run_in_executor(pool, run_client, warmup)  # channel, threads, caches

            before = _probe_spec(args, harness, target, time.monotonic() + 0.5)
            _record(harness, "unloaded", await loop.run_in_executor(pool, run_client, before))

            flood_start = time.monotonic() + 0.5
            flood_spec = FloodSpec(
                target=target,
                start_at=flood_start,
                duration_s=args.warmup + args.duration + 0.5,
                posters=args.posters,
                security=harness.security,
            )
            probe_spec = _probe_spec(args, harness, target, flood_start + args.warmup)
            flood, loaded = await asyncio.gather(
                loop.run_in_executor(pool, run_flood, flood_spec),
                loop.run_in_executor(pool, run_client, probe_spec),
            )
            _record(harness, "loaded", loaded)
            drain_s = await _drain(stub, flood, args.drain_timeout)

            after = _probe_spec(args, harness, target, time.monotonic() + 0.5)
            _record(harness, "unloaded-after", await loop.run_in_executor(pool, run_client, after))

    for metric in ("p50", "p99", "p999"):
        report.ratio("loaded", "unloaded", metric)
        report.ratio("loaded", "unloaded-after", metric)
    report.add_figure(
        "flood",
        {
            "posts": dict(flood.outcomes),
            "accepted_recipients": sum(size for _, _, size, _ in flood.accepted),
            "drain_s_after_flood": round(drain_s, 2),
        },
    )
    refused = flood.outcomes.get("RESOURCE_EXHAUSTED", 0)
    report.add_figure("flood_saturated_postmessage", refused > 0)
