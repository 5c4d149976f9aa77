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

import pytest

from loadtest.benches.orphans import submit
from loadtest.processes import kill_all, tree, wait_gone
from tests.serving import loom_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

CPU_WORKERS = 2
GONE_WITHIN_S = 10.0


@pytest.mark.parametrize("servers", [1, 2], ids=["one-process", "workers-2"])
async def test_sigkill_leaves_no_process_behind(tmp_path: Path, servers: int) -> None:
    """Every process below a SIGKILLed `loom serve` (with and without `--workers 2`) exits."""
    args = ["--workers", str(servers)] if servers > 1 else []
    env = {"LOOM_TEMPLATES__CPU_WORKERS": str(CPU_WORKERS)}
    async with loom_process(tmp_path, *args, env=env) as served:
        await submit(served.target, 200)  # the CPU pool's workers run
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
