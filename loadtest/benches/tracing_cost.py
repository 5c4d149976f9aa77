"""What tracing costs per call: the same calls against a server with tracing off and one
exporting every span to an OpenTelemetry Collector, in the same run.

``python -m loadtest.benches.tracing_cost [--seconds 5] [--rounds 3] [--concurrency 16]
[--before DIR]``

Starts three ``loom serve`` processes of this tree on the embedded engines (SQLite): one with
no ``OTEL_*`` variable (tracing off), one with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set to
LOOM_TEST_OTELCOL_ENDPOINT (``scripts/engines/otelcol.sh``; every call sampled, exported in
batches), and one sampling 1% of traces (``OTEL_TRACES_SAMPLER=parentbased_traceidratio``,
``OTEL_TRACES_SAMPLER_ARG=0.01``). Each round drives GetUnreadCount (one RPC span and one
storage span per sampled call) with `concurrency` callers for `seconds` against each server in
turn (forwards, then backwards), so a neighbour's load on the shared machine falls on all
alike. With ``--before DIR`` (a tree of the commit before tracing was added, e.g. ``git archive
<commit> | tar -x -C DIR``) a fourth server runs that code: what "off" costs against no
tracing code at all. Prints per server: calls/s,
p50/p99 latency as the client saw it, and the server process's CPU time per call (user +
system, from /proc), which is the cost that matters: on a loaded server it is calls lost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from loadtest.server import SERVER_PIDS, loom_server

__all__ = ["main"]

_REPO = Path(__file__).resolve().parents[2]
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Tally:
    """What one server did over every round."""

    calls: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    latencies: list[float] = field(default_factory=list)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


async def _drive(target: str, seconds: float, concurrency: int, tally: Tally) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = inbox_pb2_grpc.InboxStub(channel)
        request = inbox_pb2.GetUnreadCountRequest(inbox_id="bench-inbox")
        await stub.GetUnreadCount(request)  # connected and warm before the clock starts
        pid = SERVER_PIDS[target]
        cpu_before = _cpu_seconds(pid)
        started = time.perf_counter()
        stop = started + seconds

        async def caller() -> None:
            while time.perf_counter() < stop:
                sent = time.perf_counter()
                await stub.GetUnreadCount(request)
                tally.latencies.append(time.perf_counter() - sent)
                tally.calls += 1

        await asyncio.gather(*(caller() for _ in range(concurrency)))
        tally.seconds += time.perf_counter() - started
        tally.cpu_s += _cpu_seconds(pid) - cpu_before


def _report(name: str, tally: Tally) -> str:
    cuts = statistics.quantiles(tally.latencies, n=100)
    return (
        f"{name:14} {tally.calls / tally.seconds:8.0f} calls/s   p50 {cuts[49] * 1e3:6.2f} ms"
        f"   p99 {cuts[98] * 1e3:6.2f} ms   server CPU {tally.cpu_s / tally.calls * 1e6:6.1f}"
        " us/call"
    )


async def run(
    seconds: float, rounds: int, concurrency: int, before: Path | None = None
) -> dict[str, Tally]:
    """Every server, `rounds` alternating rounds each; the tallies by server."""
    endpoint = os.environ.get("LOOM_TEST_OTELCOL_ENDPOINT")
    if not endpoint:
        raise SystemExit("LOOM_TEST_OTELCOL_ENDPOINT unset: run scripts/engines/otelcol.sh start")
    if any(name.startswith("OTEL_") for name in os.environ):
        raise SystemExit("unset every OTEL_* variable first: the servers inherit them")
    # This tree's server (not whichever the venv's editable install points at).
    base = {"PYTHONPATH": str(_REPO)}
    envs = {
        "tracing off": base,
        "tracing on": {
            **base,
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_SERVICE_NAME": "loom-tracing-cost",
        },
        "on, 1% kept": {
            **base,
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_SERVICE_NAME": "loom-tracing-cost",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.01",
        },
    }
    if before is not None:
        envs = {"before tracing": {"PYTHONPATH": str(before)}, **envs}
    tallies = {name: Tally() for name in envs}
    async with AsyncExitStack() as stack:
        targets = {
            name: await stack.enter_async_context(loom_server(env=env))
            for name, env in envs.items()
        }
        order = list(targets)
        for round_no in range(rounds):
            for name in order if round_no % 2 == 0 else reversed(order):
                await _drive(targets[name], seconds, concurrency, tallies[name])
    return tallies


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtest.benches.tracing_cost")
    parser.add_argument("--seconds", type=float, default=5.0, help="per server per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--before", type=Path, help="a tree of the code before tracing")
    args = parser.parse_args()
    before = args.before.resolve() if args.before else None
    tallies = asyncio.run(run(args.seconds, args.rounds, args.concurrency, before))
    print(
        f"GetUnreadCount, embedded engines, {args.concurrency} callers, "
        f"{args.rounds} x {args.seconds:g} s per server"
    )
    for name, tally in tallies.items():
        print(_report(name, tally))


if __name__ == "__main__":
    main()
