"""A long soak: every service's traffic at once, for minutes, watching for slow leaks.

``python -m loadtest soak --minutes 30 [--scale 1.0] --json OUT.json --png OUT.png``

One ``loom serve`` on the embedded engine (an Iterator source generated beside it), and from
this process a fixed-rate mix of every service (`loadtest/workloads/_soak_mix.py`): weaving
and reading unified threads, Yammer's inbox mix with a periodic announcement, delivery
events and summaries, iteration jobs streamed and acknowledged, emails submitted and
annotated. The default rates are about half of what this 2-core machine sustains with
everything running together (``--scale`` multiplies them).

Reported: the server's RSS and open file descriptors each minute (flat is the goal: start,
end and the largest), every call's outcome by method and status (0 failures beyond the
intended refusals — RESOURCE_EXHAUSTED from a bulkhead or a full queue — and NOT_FOUND for
reads of ids not written yet), and p99 per method per minute as a plot.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from loadtest.corpora.iterator import CorpusShape, generate, write_sqlite
from loadtest.harness import Harness
from loadtest.server import SERVER_PIDS
from loadtest.traffic.soak_mix import DRIVERS, Outcomes

__all__ = ["add_arguments", "run"]

REFUSALS = {"RESOURCE_EXHAUSTED"}
"""Intended refusals: a bulkhead or a queue shedding load."""
EXPECTED = {"NOT_FOUND"}
"""Reads of ids the mix has not written yet (a random message, a thread not yet woven)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Length and intensity."""
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every rate")
    parser.add_argument("--sample-s", type=float, default=60.0, help="RSS/fd sampling period")


def _process_facts(pid: int) -> tuple[int, int]:
    """(RSS bytes, open fds) of `pid` and its children (`--workers`), from /proc."""
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(c) for c in children.read_text().split()]
    rss = fds = 0
    for p in pids:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) * 1024
        fds += len(os.listdir(f"/proc/{p}/fd"))
    return rss, fds


async def _sample(
    pid: int, period_s: float, samples: list[tuple[float, int, int]], stop: asyncio.Event
) -> None:
    started = time.monotonic()
    while True:
        rss, fds = _process_facts(pid)
        samples.append((time.monotonic() - started, rss, fds))
        try:
            await asyncio.wait_for(stop.wait(), period_s)
            return
        except TimeoutError:
            continue


async def run(args: argparse.Namespace, harness: Harness) -> None:
    """Warm up, soak, report."""
    report = harness.report
    with tempfile.TemporaryDirectory(prefix="loom-soak-") as tmp:
        source = Path(tmp) / "source.sqlite3"
        write_sqlite(source, generate(CorpusShape(enterprises=3, users_per_enterprise=30)))
        env = {
            "LOOM_ITERATOR__SOURCE_URL": f"sqlite+aiosqlite:///{source}",
            "LOOM_SQLITE__SYNCHRONOUS": "NORMAL",
        }
        async with harness.server(extra_args=["--log-level", "warning"], env=env) as target:
            pid = SERVER_PIDS.get(target)
            if pid is None:
                raise SystemExit("soak needs a server it started itself (no --target)")
            outcomes = Outcomes()
            samples: list[tuple[float, int, int]] = []
            stop = asyncio.Event()
            sampler = asyncio.create_task(_sample(pid, args.sample_s, samples, stop))
            deadline = time.monotonic() + args.minutes * 60
            drivers = [driver(target, args.scale, deadline, outcomes) for driver in DRIVERS]
            await asyncio.gather(*drivers)
            stop.set()
            await sampler
            samples.append((samples[-1][0] + 1e-3, *_process_facts(pid)))
    _report(harness, args, outcomes, samples)
    del report


def _report(
    harness: Harness,
    args: argparse.Namespace,
    outcomes: Outcomes,
    samples: list[tuple[float, int, int]],
) -> None:
    report = harness.report
    codes: dict[str, Counter[str]] = defaultdict(Counter)
    per_minute: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for minute, method, ms, code in outcomes.rows:
        codes[method][code] += 1
        if code == "OK":
            per_minute[method][minute].append(ms)
    failures = {
        m: {c: n for c, n in counter.items() if c != "OK" and c not in REFUSALS | EXPECTED}
        for m, counter in codes.items()
    }
    report.add_figure("calls_by_method_and_status", {m: dict(c) for m, c in sorted(codes.items())})
    report.add_figure("failures_beyond_refusals", {m: f for m, f in failures.items() if f})
    report.add_figure(
        "server_process",
        {
            "rss_mb_start": round(samples[0][1] / 2**20, 1),
            "rss_mb_end": round(samples[-1][1] / 2**20, 1),
            "rss_mb_max": round(max(s[1] for s in samples) / 2**20, 1),
            "fds_start": samples[0][2],
            "fds_end": samples[-1][2],
            "fds_max": max(s[2] for s in samples),
        },
    )
    minutes = list(range(int(np.ceil(args.minutes))))
    p99: dict[str, list[float]] = {}
    for method, buckets in sorted(per_minute.items()):
        p99[method] = [
            float(np.percentile(buckets[m], 99)) if buckets.get(m) else float("nan")
            for m in minutes
        ]
    report.add_line_plot("p99 per method per minute", minutes, p99, "minute", "p99 ms", logy=True)
    report.add_line_plot(
        "server RSS and open fds",
        [s[0] / 60 for s in samples],
        {"RSS MB": [s[1] / 2**20 for s in samples], "open fds": [float(s[2]) for s in samples]},
        "minute",
        "MB / fds",
    )
