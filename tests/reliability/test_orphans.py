"""A SIGKILLed `loom serve` leaves no process of its own behind.

`loom serve` starts processes of its own: TemplateInduction's CPU pool (its workers, and
multiprocessing's forkserver and resource tracker), and with `--workers N` N server processes,
each with a pool of its own. Only the top process is killed here, as an OOM kill, an
operator's `kill -9` or systemd's `KillMode=process` would; every other process of the tree
must be gone within 10 s (`server/runtime/lifetime.py` says how each one notices). The tree is
read from Linux's /proc.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import grpc
import pytest
from loom.v1 import templates_pb2, templates_pb2_grpc

from loadtest.processes import kill_all, tree, wait_gone
from tests.serving import loom_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

CPU_WORKERS = 2
GONE_WITHIN_S = 10.0


async def _submit(target: str) -> None:
    """Emails through SubmitEmails, so the CPU pool's workers run."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = templates_pb2_grpc.TemplateInductionStub(channel)
        emails = [
            templates_pb2.Email(
                email_id=f"orphan-{i}",
                sender="shop@orphans.example",
                recipient_id=f"r{i % 5}",
                subject=f"Order {i}",
                html_body=f"<html><body><p>Order {i}</p><p>Thanks</p></body></html>",
            )
            for i in range(200)
        ]
        await stub.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=emails), timeout=30)


@pytest.mark.parametrize("servers", [1, 2], ids=["one-process", "workers-2"])
async def test_sigkill_leaves_no_process_behind(tmp_path: Path, servers: int) -> None:
    """Every process below a SIGKILLed `loom serve` (with and without `--workers 2`) exits."""
    args = ["--workers", str(servers)] if servers > 1 else []
    env = {"LOOM_TEMPLATES__CPU_WORKERS": str(CPU_WORKERS)}
    async with loom_process(tmp_path, *args, env=env) as served:
        await _submit(served.target)
        procs = tree(served.process.pid)
        os.kill(served.process.pid, signal.SIGKILL)
        left = await asyncio.to_thread(wait_gone, procs[1:], GONE_WITHIN_S)
    kill_all(left)  # a failing run leaves nothing behind either
    pool = [p for p in procs if "multiprocessing.forkserver" in p.command]
    trackers = [p for p in procs if "multiprocessing.resource_tracker" in p.command]
    # each server process: its forkserver and the CPU_WORKERS workers forked from it
    assert len(pool) == servers * (1 + CPU_WORKERS), [p.command for p in procs]
    assert len(trackers) == servers
    assert len(procs) == 1 + (servers if servers > 1 else 0) + servers * (2 + CPU_WORKERS)
    assert [p.command for p in left] == []
