"""`loom serve --workers 2`: two processes on one port, the same answers as one.

The processes share only their stores (here the embedded SQLite files). Clients open
separate connections, which the kernel spreads over both processes (SO_REUSEPORT; the test
makes sure each holds at least one); both must serve, and what they write together must be
exactly what one server would have written (tests/replicas.py): ThreadWeaver's unified
threads equal union-find's components, Inbox unread counts are exact, Summary loses no
delivery event.
"""

from __future__ import annotations

import random
from contextlib import AsyncExitStack
from pathlib import Path

from tests.replicas import (
    post_and_count,
    record_and_sum,
    weave_and_check,
    worker_channels,
    workload_workers,
)
from tests.serving import loom_process


async def test_two_workers_answer_as_one_server(tmp_path: Path) -> None:
    """`--workers 2`: both workers serve calls, every service answers as one server, both drain."""
    rng = random.Random(12)
    async with loom_process(tmp_path, "--workers", "2") as served, AsyncExitStack() as stack:
        chans = await worker_channels(served, stack, 2)
        await weave_and_check(chans, rng)
        await post_and_count(chans, rng)
        await record_and_sum(chans, rng)
    workers = workload_workers(served)
    assert workers == {0, 1}, f"calls were served by workers {workers}"
    stopped = [line for line in served.log_lines() if line.get("event") == "stopped"]
    assert len(stopped) == 2
    assert served.process.returncode == 0
