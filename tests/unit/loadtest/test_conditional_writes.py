"""The raw insert-if-absent baseline: one call per message copy, shaped like the weave."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence

from loadtest.baselines.conditional_writes import measure_raw_rate, raw_keys


def test_one_key_per_copy_repeats_included() -> None:
    """Twenty copies of a message are twenty calls on its MD5 key."""
    items = raw_keys(["<a@x>", "<b@x>", "<a@x>"], ["g:1", "g:2", "h:1"])
    assert [k for k, _ in items] == [
        hashlib.md5(r.encode()).digest() for r in ("<a@x>", "<b@x>", "<a@x>")
    ]
    assert [v for _, v in items] == ["g:1", "g:2", "h:1"]


async def test_every_item_goes_through_in_batches_by_several_callers() -> None:
    """All items reach the engine once, in batches of the weave's size, callers at once."""
    seen: list[int] = []
    in_flight = peak = 0

    async def insert(batch: Sequence[tuple[bytes, str]]) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001)
        seen.append(len(batch))
        in_flight -= 1

    items = [(bytes([i % 256]) * 16, "v") for i in range(2500)]
    calls, seconds = await measure_raw_rate(insert, items, batch=1000, callers=4)
    assert calls == 2500
    assert seconds > 0
    assert sorted(seen) == [500, 1000, 1000]
    assert peak == 3
