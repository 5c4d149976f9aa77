"""Summary: accuracy vs a HyperLogLog, stored bytes vs n, and throughput per store.

``python -m loadtest summary [--store sqlite,dynamodb] --json OUT.json --png OUT.png``

(a) Accuracy and bytes of ``count`` at n = 1 .. 1M (>= 20 random recipient sets each) for
    Loom's exact -> CPC summary, for the v1 format it replaced (linear counting + HLL), and for
    Apache DataSketches' CPC and HLL_4 at several lgK on the same ids, compared at equal mean
    error (``_summary_figures.py``), plus PNG plots of error and bytes vs n; CPU per recorded
    event and whether each sketch's bytes survive a reordering. (b) Stored bytes per summary
    vs n next to Remind's exact UUID sets. (c) Per store, through a real ``loom serve --summary-store S``: RecordDeliveryEvents
    events/s (batches of 1,000 over messages that grow to 50K recipients each) and
    GetMessageSummary p50/p99; the same server's ``grpc.health.v1`` Check in closed loop is the
    in-run baseline every throughput is quoted against (these machines are noisy).

DynamoDB needs DynamoDB Local: ``scripts/engines/up.sh dynamodb && source .engines/env``
(LOOM_TEST_DYNAMODB_ENDPOINT); each run creates tables under a fresh prefix.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time
import uuid
from collections.abc import Sequence

from grpc_health.v1 import health_pb2, health_pb2_grpc
from loom.v1 import summary_pb2, summary_pb2_grpc

from loadtest.figures.summary_estimators import (
    Competitor,
    ErrorRow,
    PairedRow,
    SizeRow,
    accuracy_table,
    cpu_per_event,
    determinism,
    equal_error_bytes,
    paired_cpc,
    size_table,
)
from loadtest.harness import Harness
from loadtest.report import Report

__all__ = ["add_arguments", "run"]

SIZES = (1, 10, 100, 250, 251, 1_000, 10_000, 50_000, 100_000, 1_000_000)
_STATUSES = (
    (summary_pb2.DELIVERY_STATUS_DELIVERED, 0.7),
    (summary_pb2.DELIVERY_STATUS_READ, 0.2),
    (summary_pb2.DELIVERY_STATUS_FAILED, 0.1),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Stores to load, run counts and phase sizes."""
    parser.add_argument("--store", default="sqlite,dynamodb", help="comma-separated stores")
    parser.add_argument("--runs", type=int, default=20, help="random sets per n (accuracy)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--batches", type=int, default=300, help="RecordDeliveryEvents calls")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--recipients-per-message", type=int, default=50_000)
    parser.add_argument("--reads", type=int, default=3000, help="GetMessageSummary calls")
    parser.add_argument("--health-checks", type=int, default=5000, help="baseline calls")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument(
        "--paired-runs", type=int, default=150, help="runs of the Loom-vs-CPC paired comparison"
    )


def _at_equal(loom_err: float, competitors: list[Competitor], n: int) -> float:
    equal = equal_error_bytes(loom_err, competitors, n)
    return math.nan if equal is None else equal[1]


def _accuracy(args: argparse.Namespace, harness: Harness) -> None:
    """Error and bytes against DataSketches, CPU per event, determinism, stored bytes."""
    report = harness.report
    sizes = [int(s) for s in args.sizes.split(",")]
    t0 = time.perf_counter()
    rows = accuracy_table(sizes, args.runs, args.seed)
    report.add_figure("accuracy_seconds", round(time.perf_counter() - t0, 1))
    report.add_figure("accuracy", [_error_entry(r) for r in rows])
    paired = paired_cpc((50_000, 1_000_000), args.paired_runs, args.seed + 10_000)
    report.add_figure("cpc_paired_equal_error", [_paired_entry(p) for p in paired])
    report.add_figure("cpu_per_event_us", {k: round(v, 3) for k, v in cpu_per_event().items()})
    report.add_figure("same_bytes_after_reordering", determinism())
    _error_plots(report, rows)
    _stored_bytes(report, size_table(sizes, args.seed))


def _error_entry(r: ErrorRow) -> dict[str, object]:
    """One n of the accuracy table: Loom, v1, and each competitor at every lgK and at
    Loom's mean error."""
    entry: dict[str, object] = {
        "n": r.n,
        "runs": r.runs,
        "loom_mean_abs_err": round(r.loom_mean, 6),
        "loom_max_abs_err": round(r.loom_max, 6),
        "loom_rms_err": round(r.loom_rms, 6),
        "loom_bytes_1_status": round(r.loom_bytes),
        "v1_mean_abs_err": round(r.v1_mean, 6),
        "v1_bytes_1_status": round(r.v1_bytes),
    }
    for name, comps in (("cpc", r.cpc), ("hll4", r.hll4)):
        entry[name] = {
            f"lgK{c.lg_k}": {"mean_abs_err": round(c.mean_err, 6), "bytes": round(c.bytes)}
            for c in comps
        }
        equal = equal_error_bytes(r.loom_mean, comps, r.n)
        if equal is not None:
            nearest, at_equal = equal
            entry[f"{name}_nearest_lgK"] = nearest.lg_k
            entry[f"{name}_bytes_at_loom_error"] = round(at_equal)
            entry[f"loom_bytes_over_{name}_at_equal_error"] = round(r.loom_bytes / at_equal, 3)
    return entry


def _paired_entry(p: PairedRow) -> dict[str, object]:
    """Loom's canonical CPC against a single-writer CPC (HIP) on the same ids."""
    return {
        "n": p.n,
        "runs": p.runs,
        "loom_mean_abs_err": round(p.loom_mean, 6),
        "cpc_hip_mean_abs_err": round(p.cpc_hip_mean, 6),
        "loom_bytes_1_status": round(p.loom_bytes),
        "cpc_hip_bytes": round(p.cpc_hip_bytes),
        "loom_over_cpc_bytes_at_equal_error": round(p.bytes_ratio_at_equal_error, 3),
    }


def _error_plots(report: Report, rows: Sequence[ErrorRow]) -> None:
    """Error vs n, and bytes vs n with the competitors scaled to Loom's mean error."""
    xs = [float(r.n) for r in rows]
    report.add_line_plot(
        "mean |relative error| of count vs recipients (same ids, same run)",
        xs,
        {
            "Loom (CPC lgK 13, canonical) %": [100 * r.loom_mean for r in rows],
            "Loom v1 (bitmap + HLL) %": [100 * r.v1_mean for r in rows],
            **{
                f"DataSketches CPC lgK {c.lg_k} %": [100 * row.cpc[k].mean_err for row in rows]
                for k, c in enumerate(rows[0].cpc)
                if c.lg_k in (12, 13)
            },
            **{
                f"DataSketches HLL_4 lgK {c.lg_k} %": [100 * row.hll4[k].mean_err for row in rows]
                for k, c in enumerate(rows[0].hll4)
                if c.lg_k == 14
            },
        },
        "recipients n",
        "relative error (%)",
        logx=True,
    )
    report.add_line_plot(
        "bytes of one status vs recipients (competitors scaled to Loom's mean error)",
        xs,
        {
            "Loom (stored row, 1 status)": [r.loom_bytes for r in rows],
            "Loom v1 (stored row, 1 status)": [r.v1_bytes for r in rows],
            "CPC at Loom's error": [_at_equal(r.loom_mean, r.cpc, r.n) for r in rows],
            "HLL_4 at Loom's error": [_at_equal(r.loom_mean, r.hll4, r.n) for r in rows],
        },
        "recipients n",
        "bytes",
        logx=True,
        logy=True,
    )


def _stored_bytes(report: Report, sized: Sequence[SizeRow]) -> None:
    """A realistic summary's stored bytes against Remind's exact UUID sets and the item limit."""
    report.add_figure(
        "stored_bytes",
        [
            {
                "n": s.n,
                "loom_bytes": s.loom_bytes,
                "v1_bytes": s.v1_bytes,
                "exact_uuid_set_bytes": s.exact_uuid_bytes,
                "exact_exceeds_400KB": s.exact_exceeds_item_limit,
            }
            for s in sized
        ],
    )
    report.add_line_plot(
        "stored bytes per summary (n delivered, n/2 read, n/10 failed)",
        [float(s.n) for s in sized],
        {
            "Loom encoded summary": [float(s.loom_bytes) for s in sized],
            "Loom v1 encoded summary": [float(s.v1_bytes) for s in sized],
            "exact 36-byte UUID sets (Remind)": [float(s.exact_uuid_bytes) for s in sized],
            "DynamoDB 400 KB item limit": [400.0 * 1024] * len(sized),
        },
        "recipients n",
        "bytes",
        logx=True,
        logy=True,
    )


def _dynamodb_env() -> dict[str, str]:
    """Environment pointing a started ``loom serve`` at DynamoDB Local, fresh table prefix."""
    endpoint = os.environ.get("LOOM_TEST_DYNAMODB_ENDPOINT")
    if not endpoint:
        raise SystemExit("--store dynamodb needs LOOM_TEST_DYNAMODB_ENDPOINT (source .engines/env)")
    return {
        "LOOM_DYNAMODB__ENDPOINT_URL": endpoint,
        "LOOM_DYNAMODB__CREATE_TABLES": "true",
        "LOOM_DYNAMODB__TABLE_PREFIX": f"lt{uuid.uuid4().hex[:8]}-",
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "loomload"),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "loomload"),
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    }


def _batches(args: argparse.Namespace) -> list[summary_pb2.RecordDeliveryEventsRequest]:
    """Pre-built requests: batch i goes to message i % M, so concurrent calls hit different
    messages and each message grows by one batch per round up to recipients_per_message."""
    rng = random.Random(args.seed)
    per_message = max(1, args.recipients_per_message // args.batch_size)
    messages = max(args.concurrency, -(-args.batches // per_message))
    statuses = [s for s, _ in _STATUSES]
    weights = [w for _, w in _STATUSES]
    run = uuid.uuid4().hex[:8]
    out = []
    for i in range(args.batches):
        message, round_ = i % messages, i // messages
        picked = rng.choices(statuses, weights, k=args.batch_size)
        base = round_ * args.batch_size
        out.append(
            summary_pb2.RecordDeliveryEventsRequest(
                message_id=f"{run}-m{message}",
                events=[
                    summary_pb2.DeliveryEvent(recipient_id=f"{run}-u{base + j}", status=st)
                    for j, st in enumerate(picked)
                ],
            )
        )
    return out


async def _serve_and_load(args: argparse.Namespace, harness: Harness, store: str) -> None:
    report = harness.report
    requests = _batches(args)
    message_ids = sorted({r.message_id for r in requests})
    async with (
        harness.server(
            extra_args=["--summary-store", store],
            env=_dynamodb_env() if store == "dynamodb" else None,
        ) as target,
        harness.channel(target) as channel,
    ):
        health = health_pb2_grpc.HealthStub(channel)
        summary = summary_pb2_grpc.SummaryStub(channel)
        check = health_pb2.HealthCheckRequest(service="")

        async def health_op(_i: int) -> object:
            return await health.Check(check, timeout=10)

        async def record_op(i: int) -> object:
            return await summary.RecordDeliveryEvents(requests[i], timeout=30)

        async def get_op(i: int) -> object:
            req = summary_pb2.GetMessageSummaryRequest(message_id=message_ids[i % len(message_ids)])
            return await summary.GetMessageSummary(req, timeout=10)

        c = args.concurrency
        await harness.closed_loop(
            f"health-{store}", health_op, concurrency=c, count=args.health_checks
        )
        rec = await harness.closed_loop(
            f"record-{store}", record_op, concurrency=c, count=len(requests)
        )
        get = await harness.closed_loop(f"get-{store}", get_op, concurrency=c, count=args.reads)
        last = await summary.GetMessageSummary(
            summary_pb2.GetMessageSummaryRequest(message_id=message_ids[0]), timeout=10
        )
    report.add_figure(f"{store}_events_per_s", round(rec.throughput * args.batch_size))
    report.add_figure(f"{store}_get_p50_ms", round(get.p50_ms, 3))
    report.add_figure(f"{store}_get_p99_ms", round(get.p99_ms, 3))
    report.add_figure(f"{store}_encoded_bytes_largest_message", last.encoded_size_bytes)
    report.ratio(f"record-{store}", f"health-{store}", "throughput")
    report.ratio(f"get-{store}", f"health-{store}", "throughput")
    report.ratio(f"get-{store}", f"health-{store}", "p50")
    report.ratio(f"get-{store}", f"health-{store}", "p99")


async def run(args: argparse.Namespace, harness: Harness) -> None:
    """Accuracy and bytes in-process, then one server per store for throughput and latency."""
    if not args.skip_accuracy:
        _accuracy(args, harness)
    for store in [s.strip() for s in args.store.split(",") if s.strip()]:
        await _serve_and_load(args, harness, store)
