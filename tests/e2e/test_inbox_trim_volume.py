"""Yammer's outage, replayed at a fifth of its scale: 10,000 deliveries into one never-read
inbox capped at 1,000 (Yammer's was 50,000 into 5,000; the overshoot a trim allows scales with
1/p, so p = 0.1 here holds the inbox within the same 10 % of its cap as p = 0.02 did there, and
the test takes a fifth of the time).

Drives the Inbox domain service on the real embedded engine, without gRPC (a call costs
~1 ms in-process, which would make this a minute-long test for no extra coverage; the gRPC
path is covered at a 50x ratio in test_inbox_grpc.py).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from server.inbox.model import Post
from server.inbox.service import InboxService
from server.inbox.settings import InboxSettings
from storage.sqlite.inbox import SqliteInboxStore
from tests.serving import eventually


async def test_ten_thousand_deliveries_stay_near_one_thousand(tmp_path: Path) -> None:
    """10,000 deliveries, cap 1,000, p = 0.1: the inbox ends near 1,000, never near 10,000."""
    cap, p, n = 1000, 0.1, 10_000
    store = await SqliteInboxStore.open(tmp_path / "inbox.sqlite3", synchronous="NORMAL")
    service = InboxService(
        store, InboxSettings(max_entries=cap, trim_probability=p), rng=random.Random(2015)
    )
    service.start()
    try:
        sem = asyncio.Semaphore(16)

        async def one(m: int) -> None:
            async with sem:
                await service.post(Post(f"spam-{m}", m, f"bot-{m % 100}", ["victim"]))

        await asyncio.gather(*(one(m) for m in range(1, n + 1)))
        await service.trimmer.idle()
        size = await eventually(lambda: store.unread_count("victim"), lambda c: c <= cap + 10 / p)
        rows = await store.scan_inbox("victim", n)
        print(
            f"\n{n} deliveries -> {len(rows)} rows (cap {cap}); "
            f"{service.trimmer.scheduled} trims, {service.trimmer.deleted} rows trimmed"
        )
        assert len(rows) == size
        assert cap <= size <= cap + 10 / p
        assert max(r.last_message_id for r in rows) == n
        assert min(r.last_message_id for r in rows) > n - size - 1 - 10 / p
    finally:
        await service.stop()
        await store.close()
