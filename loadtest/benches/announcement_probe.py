"""Where the unread-count tail under a 300K announcement comes from: Loom's process or the node.

``source .engines/env && python -m loadtest.benches.announcement_probe --reps 2
[--same-server] [--fanout-env LOOM_INBOX__FANOUT_RATE_PER_S=32000]``

Two ``loom serve`` processes on one fresh Cassandra keyspace: the probe server (A) answers an
open-loop GetUnreadCount probe (``--probe-rate``/s over 200 inboxes, from a client process of
its own), and the fan-out server (B) takes the ``--recipients`` announcement and runs its
background fan-out. So A's event loop, driver thread and GIL never see a fan-out chunk; what
is left of the probe's tail during the announcement is the machine and the node.
``--same-server`` posts the announcement to A instead: the shape the inbox workload measures
(``python -m loadtest inbox``), for comparison in the same run. ``--fanout-env K=V`` is
passed to the server that fans out (B, or A with ``--same-server``): pacing, chunking, e.g.
to see how slow a fan-out must be to leave the tail alone (the pacing sweep in docs/benchmarks.md).

Each repetition prints the probe unloaded (5 s, nothing else running) and during the
announcement (calls scheduled between the PostMessage and DONE): p50/p95/p99/max in ms, the
p99 ratio, the time to DONE, and the 0.3 s windows in which calls took over 30 ms — to line
up with the node's GC log (``LOOM_CASSANDRA_GC_FLAGS=... -Xlog:gc:file=...:time``) and its
``system.log`` flushes. The inbox workload's figures are the ones docs/benchmarks.md reports; this
bench explains them.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import grpc
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from loadtest.phases.inbox_announcement import probe_calls, probe_spec
from loadtest.recorder import LatencyRecorder, PhaseStats
from loadtest.server import loom_server
from loadtest.traffic.inbox_mix import run_client
from loadtest.workloads.inbox import store_env

__all__ = ["main", "slow_windows"]

_PROBED = 200
_SLOW_S = 0.030
_GAP_S = 0.3


def _stats(calls: list[tuple[float, float]]) -> PhaseStats:
    rec = LatencyRecorder()
    for _, x in calls:
        rec.record(x)
    wall = (calls[-1][0] - calls[0][0]) if len(calls) > 1 else 1.0
    return rec.stats(wall)


def slow_windows(
    calls: list[tuple[float, float]], *, slow_s: float = _SLOW_S, gap_s: float = _GAP_S
) -> list[tuple[float, float, float, int]]:
    """Windows of calls over `slow_s`, split where `gap_s` passes without one: (start, end,
    worst latency, calls), instants relative to the first call."""
    if not calls:
        return []
    t0 = calls[0][0]
    out: list[tuple[float, float, float, int]] = []
    for due, lat in calls:
        if lat <= slow_s:
            continue
        t = due - t0
        if out and t - out[-1][1] < gap_s:
            start, _, worst, n = out[-1]
            out[-1] = (start, t, max(worst, lat), n + 1)
        else:
            out.append((t, t, lat, 1))
    return out


def _line(name: str, s: PhaseStats) -> str:
    return (
        f"{name:9} n={s.ok:5} p50={s.p50_ms:6.1f} p95={s.p95_ms:6.1f} "
        f"p99={s.p99_ms:6.1f} max={s.max_ms:6.1f} ms"
    )


async def _populate(stub: inbox_pb2_grpc.InboxStub, inboxes: list[str]) -> None:
    """20 group posts of 50 probed inboxes each: counts between 0 and 20."""
    for t in range(20):
        members = inboxes[(t * 37) % len(inboxes) :] + inboxes[: (t * 37) % len(inboxes)]
        await stub.PostMessage(
            inbox_pb2.PostMessageRequest(
                thread_id=f"t{t}",
                message_id=t + 1,
                sender_inbox_id="sender",
                recipient_inbox_ids=members[:50],
            )
        )


async def _announce(
    stub: inbox_pb2_grpc.InboxStub, rep: int, recipients: int
) -> tuple[float, float, bool]:
    """PostMessage to `recipients` inboxes, then GetDelivery until it leaves RUNNING:
    (ack s, done s, reached DONE)."""
    t0 = time.perf_counter()
    reply = await stub.PostMessage(
        inbox_pb2.PostMessageRequest(
            thread_id=f"announcement-{rep}",
            message_id=10**12 + rep,
            sender_inbox_id="ceo",
            recipient_inbox_ids=[f"ann{i:07d}" for i in range(recipients)],
        ),
        timeout=120.0,
    )
    ack = time.perf_counter() - t0
    state = inbox_pb2.DELIVERY_STATE_DONE if reply.delivered else inbox_pb2.DELIVERY_STATE_RUNNING
    while state == inbox_pb2.DELIVERY_STATE_RUNNING and time.perf_counter() - t0 < 300:
        await asyncio.sleep(0.05)
        progress = await stub.GetDelivery(
            inbox_pb2.GetDeliveryRequest(delivery_id=reply.delivery_id), timeout=5.0
        )
        state = progress.state
    return ack, time.perf_counter() - t0, state == inbox_pb2.DELIVERY_STATE_DONE


async def _main(args: argparse.Namespace) -> None:
    env = store_env("cassandra")  # one keyspace for both servers
    fanout_env = dict(kv.split("=", 1) for kv in args.fanout_env)
    extra = ["--inbox-store", "cassandra", "--log-level", "warning"]
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    inboxes = [f"u{i:04d}" for i in range(_PROBED)]
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    loop = asyncio.get_running_loop()
    async with (
        loom_server(
            extra_args=extra, env={**env, **fanout_env} if args.same_server else env
        ) as probe_target,
        loom_server(extra_args=extra, env={**env, **fanout_env}) as fanout_target,
        grpc.aio.insecure_channel(probe_target) as probe_channel,
        grpc.aio.insecure_channel(
            probe_target if args.same_server else fanout_target, options=options
        ) as fanout_channel,
    ):
        await _populate(inbox_pb2_grpc.InboxStub(probe_channel), inboxes)
        fanout = inbox_pb2_grpc.InboxStub(fanout_channel)
        shape = "same server" if args.same_server else "fan-out on its own server"
        print(
            f"{args.recipients:,}-recipient announcement, {shape}, fan-out server env {fanout_env}"
        )
        with pool:
            for rep in range(args.reps):
                spec = probe_spec(
                    probe_target, inboxes, rate=args.probe_rate, seconds=5.0, threads=10, seed=1
                )
                unloaded = _stats(probe_calls(await loop.run_in_executor(pool, run_client, spec)))
                spec = probe_spec(
                    probe_target,
                    inboxes,
                    rate=args.probe_rate,
                    seconds=args.probe_seconds,
                    threads=10,
                    seed=1,
                )
                during_run = loop.run_in_executor(pool, run_client, spec)
                await asyncio.sleep(max(0.0, spec.start_at + 0.5 - time.monotonic()))
                m0 = time.monotonic()
                ack_s, done_s, done = await _announce(fanout, rep, args.recipients)
                m1 = time.monotonic()
                calls = probe_calls(await during_run, (m0, m1))
                during = _stats(calls)
                print(_line("unloaded", unloaded))
                print(_line("during", during))
                print(
                    f"rep {rep}: ack {ack_s:.2f} s, {'DONE' if done else 'NOT DONE'} after "
                    f"{done_s:.2f} s, p99 during / unloaded = "
                    f"{during.p99_ms / unloaded.p99_ms:.1f}x"
                )
                for start, end, worst, n in slow_windows(calls):
                    print(
                        f"  slow {start:6.2f}-{end:6.2f} s: {n:3} calls, worst {worst * 1000:.0f} ms"
                    )


def main(argv: list[str] | None = None) -> None:
    """Parse options and run `--reps` announcements."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--recipients", type=int, default=300_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--probe-rate", type=float, default=200.0, help="GetUnreadCount/s")
    parser.add_argument(
        "--probe-seconds", type=float, default=40.0, help="probe length (must outlast it)"
    )
    parser.add_argument("--same-server", action="store_true", help="announce to the probed one")
    parser.add_argument(
        "--fanout-env",
        action="append",
        default=[],
        metavar="K=V",
        help="env of the server that fans out",
    )
    asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
