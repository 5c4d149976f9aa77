"""The SummaryStore contract, run unchanged against every engine (SQLite, DynamoDB Local)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random

from server.summary.limits import DYNAMODB_ITEM_LIMIT_BYTES, ENCODED_SUMMARY_TARGET_BYTES
from server.summary.model import DeliveryEvent, DeliveryStatus, MessageSummary
from server.summary.recipients import SketchParams, Tier
from storage.ports import StoredSummary, SummaryStore

# Header (12 B) + 3 statuses x (tier byte + 4 KiB bitmap + 16 KiB HLL registers), stored raw
# when incompressible: the largest body the default parameters can produce.
LARGEST_ENCODED = 12 + 3 * (1 + 4096 + 16384)


async def test_missing_message_reads_as_none(summary_store: SummaryStore) -> None:
    """A message never written has no summary."""
    assert await summary_store.get("never-written") is None


async def test_create_with_expected_none_sets_version_one(summary_store: SummaryStore) -> None:
    """Creating (expected None) writes the bytes with version 1."""
    assert await summary_store.put_if_version("m1", b"\x00first\xff", None) is True
    assert await summary_store.get("m1") == StoredSummary(b"\x00first\xff", 1)


async def test_second_create_conflicts_and_keeps_the_first(summary_store: SummaryStore) -> None:
    """A create on an existing row returns False and changes nothing."""
    assert await summary_store.put_if_version("m", b"a", None)
    assert await summary_store.put_if_version("m", b"b", None) is False
    assert await summary_store.get("m") == StoredSummary(b"a", 1)


async def test_update_needs_the_current_version(summary_store: SummaryStore) -> None:
    """An update with the stored version wins (version + 1); a stale or future one loses."""
    assert await summary_store.put_if_version("m", b"v1", None)
    assert await summary_store.put_if_version("m", b"v2", 1) is True
    assert await summary_store.get("m") == StoredSummary(b"v2", 2)
    assert await summary_store.put_if_version("m", b"stale", 1) is False
    assert await summary_store.put_if_version("m", b"future", 7) is False
    assert await summary_store.get("m") == StoredSummary(b"v2", 2)


async def test_update_of_a_missing_row_conflicts(summary_store: SummaryStore) -> None:
    """Expecting a version of a row that does not exist is a conflict, not a create."""
    assert await summary_store.put_if_version("ghost", b"x", 3) is False
    assert await summary_store.get("ghost") is None


async def test_message_ids_are_independent_and_unicode_safe(summary_store: SummaryStore) -> None:
    """Ids with separators, unicode and 256 bytes each keep their own row."""
    ids = ["a:b", "a", "ü#/\\", "m" * 256, "ß" * 128]
    for i, message_id in enumerate(ids):
        assert await summary_store.put_if_version(message_id, bytes([i]) * 3, None)
    for i, message_id in enumerate(ids):
        assert await summary_store.get(message_id) == StoredSummary(bytes([i]) * 3, 1)


async def test_concurrent_read_modify_write_loses_nothing(summary_store: SummaryStore) -> None:
    """20 writers each add their own id by read-modify-write with retries: all 20 survive."""

    async def writer(me: int) -> int:
        rng = random.Random(me)
        for attempt in range(1, 500):
            stored = await summary_store.get("hot")
            members = set(json.loads(stored.data)) if stored else set()
            members.add(me)
            data = json.dumps(sorted(members)).encode()
            if await summary_store.put_if_version("hot", data, stored.version if stored else None):
                return attempt
            await asyncio.sleep(rng.uniform(0, 0.005 * min(attempt, 8)))
        raise AssertionError(f"writer {me} never won")

    attempts = await asyncio.gather(*(writer(i) for i in range(20)))
    stored = await summary_store.get("hot")
    assert stored is not None
    assert json.loads(stored.data) == list(range(20))
    assert stored.version == 20  # every win added exactly one member
    assert max(attempts) > 1  # the race really happened


async def test_largest_encoded_summary_round_trips(summary_store: SummaryStore) -> None:
    """An incompressible item of the largest encoded-summary size stores and reads back."""
    assert LARGEST_ENCODED <= ENCODED_SUMMARY_TARGET_BYTES
    data = os.urandom(ENCODED_SUMMARY_TARGET_BYTES)
    assert await summary_store.put_if_version("big", data, None)
    assert await summary_store.put_if_version("big", data[::-1], 1)
    assert await summary_store.get("big") == StoredSummary(data[::-1], 2)


@functools.cache
def _million_recipient_summary() -> bytes:
    """1,000,000 delivered, 500,000 of them read, 100,000 other recipients failed."""
    summary = MessageSummary(SketchParams())
    for start in range(0, 1_000_000, 10_000):
        ids = [f"r{i}" for i in range(start, start + 10_000)]
        summary.record([DeliveryEvent(i, DeliveryStatus.DELIVERED) for i in ids])
        if start < 500_000:
            summary.record([DeliveryEvent(i, DeliveryStatus.READ) for i in ids])
        if start < 100_000:
            summary.record([DeliveryEvent(f"f{i}", DeliveryStatus.FAILED) for i in ids])
    return summary.encode()


async def test_million_recipient_summary_stays_far_below_the_item_limit(
    summary_store: SummaryStore,
) -> None:
    """A real 1M-recipient summary (all three statuses) is stored whole and reads back equal."""
    data = _million_recipient_summary()
    assert len(data) < DYNAMODB_ITEM_LIMIT_BYTES // 8  # ~24 KB against 400 KB
    assert await summary_store.put_if_version("announcement-1m", data, None)
    stored = await summary_store.get("announcement-1m")
    assert stored == StoredSummary(data, 1)
    view = MessageSummary.decode(stored.data).view()
    for status, n in (
        (DeliveryStatus.DELIVERED, 1_000_000),
        (DeliveryStatus.READ, 500_000),
        (DeliveryStatus.FAILED, 100_000),
    ):
        sv = view.statuses[status]
        assert sv.tier is not Tier.EXACT
        assert abs(sv.count / n - 1) < 0.03  # well inside 3 sigma of 0.81 %
