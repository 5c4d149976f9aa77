"""More than one core: ghz at a fixed concurrency against `--workers 1` and `--workers N`.

``python -m loadtest workers [--store sqlite,cassandra] [--workers 1,2] [--concurrency 32]
[--duration 10] --json OUT.json``

Per store and worker count, a fresh ``loom serve --inbox-store S --workers W`` is
pre-populated (``--inboxes`` inboxes with a few unread threads each), then `ghz` — the
ecosystem's gRPC load tester, from outside the server's processes, through reflection —
calls GetUnreadCount over ``--connections`` connections (the kernel spreads connections over
the worker processes) at a fixed ``--concurrency`` for ``--duration`` seconds. Figures:
calls/s, p50/p99 and status codes per run, and each worker count's throughput as a ratio of
one worker's in the same run. On a 2-core machine ghz competes with the server for the same
cores, so the ratio stays below 2x: the report says what it is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from loom.v1 import inbox_pb2, inbox_pb2_grpc

from loadtest.channels import ChannelSecurity
from loadtest.harness import Harness
from loadtest.workloads.inbox import store_env

__all__ = ["add_arguments", "run"]

GHZ_CANDIDATES = (Path.home() / ".cache" / "loom" / "bin" / "ghz",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Stores, worker counts, load shape."""
    parser.add_argument("--store", default="sqlite", help="comma-separated: sqlite,cassandra")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--concurrency", type=int, default=32, help="ghz -c")
    parser.add_argument("--connections", type=int, default=8, help="ghz --connections")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    parser.add_argument("--inboxes", type=int, default=200)


def _ghz() -> str:
    found = shutil.which("ghz") or next((str(p) for p in GHZ_CANDIDATES if p.exists()), None)
    if found is None:
        raise SystemExit("workers: ghz is not installed (make tools)")
    return found


async def _populate(harness: Harness, target: str, inboxes: int) -> None:
    async with harness.channel(target) as channel:
        stub = inbox_pb2_grpc.InboxStub(channel)
        for t in range(3):
            await stub.PostMessage(
                inbox_pb2.PostMessageRequest(
                    thread_id=f"w{t}",
                    message_id=t + 1,
                    sender_inbox_id="lt-sender",
                    recipient_inbox_ids=[f"lt-{i}" for i in range(inboxes)],
                ),
                timeout=60,
            )


def _ghz_security(security: ChannelSecurity, directory: Path) -> list[str]:
    """ghz's flags for the run's TLS and token; what ghz reads from files is written (0600)
    into `directory`, so no key or token appears on a command line."""

    def written(name: str, data: bytes) -> str:
        path = directory / name
        path.touch(mode=0o600)
        path.write_bytes(data)
        return str(path)

    flags = ["--insecure"]
    if security.root_certificates is not None:
        flags = ["--cacert", written("ca.pem", security.root_certificates)]
        if security.certificate_chain is not None and security.private_key is not None:
            flags += ["--cert", written("cert.pem", security.certificate_chain)]
            flags += ["--key", written("key.pem", security.private_key)]
    if security.token is not None:
        metadata = json.dumps({"authorization": f"Bearer {security.token}"}).encode()
        flags += ["--metadata-file", written("metadata.json", metadata)]
    return flags


async def _ghz_run(args: argparse.Namespace, harness: Harness, target: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="loom-ghz-") as tmp:
        return await _ghz_process(args, _ghz_security(harness.security, Path(tmp)), target)


async def _ghz_process(
    args: argparse.Namespace, security: list[str], target: str
) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        _ghz(),
        *security,
        "--call",
        "loom.v1.Inbox/GetUnreadCount",
        "-d",
        '{"inbox_id": "lt-{{.RequestNumber}}"}',
        "-c",
        str(args.concurrency),
        "--connections",
        str(args.connections),
        "-z",
        f"{args.duration}s",
        "--duration-stop",
        "ignore",  # calls cut off by the end of the run are not failures
        "--format",
        "json",
        target,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"ghz failed ({process.returncode}): {err.decode()[-2000:]}")
    report: dict[str, Any] = json.loads(out)
    return report


def _percentile(report: dict[str, Any], p: int) -> float | None:
    for entry in report.get("latencyDistribution") or []:
        if entry.get("percentage") == p:
            return round(entry["latency"] / 1e6, 3)  # ns -> ms
    return None


async def run(args: argparse.Namespace, harness: Harness) -> None:
    """Every store, every worker count, the same ghz load; ratios to one worker."""
    report = harness.report
    for store in [s.strip() for s in args.store.split(",") if s.strip()]:
        baseline: float | None = None
        for workers in [int(w) for w in args.workers.split(",")]:
            extra = ["--inbox-store", store, "--workers", str(workers), "--log-level", "warning"]
            async with harness.server(extra_args=extra, env=store_env(store)) as target:
                await _populate(harness, target, args.inboxes)
                ghz = await _ghz_run(args, harness, target)
            rps = float(ghz["rps"])
            baseline = baseline or rps
            report.add_figure(
                f"{store}.workers{workers}",
                {
                    "calls_per_s": round(rps),
                    "p50_ms": _percentile(ghz, 50),
                    "p99_ms": _percentile(ghz, 99),
                    "status_codes": ghz.get("statusCodeDistribution"),
                    "throughput_vs_1_worker": round(rps / baseline, 3),
                },
            )
