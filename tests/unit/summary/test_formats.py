"""Stored-format promises: v1 rows still decode and grow, v2 bytes are canonical and guarded."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from server.summary.model import DeliveryEvent, DeliveryStatus, MessageSummary
from server.summary.recipients import SketchParams, Tier

D, R, F = DeliveryStatus.DELIVERED, DeliveryStatus.READ, DeliveryStatus.FAILED

# Written by the v1 code (commit 32dbf68, before CPC) with SketchParams(exact_threshold=3):
# u0..u5 DELIVERED (a linear-counting bitmap + HLL), u1 READ, zz FAILED.
V1_SKETCHED = bytes.fromhex(
    "4c5301020300004000000f0e28b52ffd600f4fcd0200e80100020020000800040010000100010301000200"
    "753100010002007a7a110052801f8a06fce30afcec3ae2a4b622408f63803f5c307c28e0062ab0ab4da702"
    "59017a4c175418018a0da670f5020591418519a038891f6001"
)
# Written by the v1 code with default params: amy READ, dave FAILED (every set exact).
V1_EXACT = bytes.fromhex(
    "4c530100fa00004000000f0e0001000300616d790001000300616d79000100040064617665"
)


def events(ids: Iterable[str], status: DeliveryStatus = D) -> list[DeliveryEvent]:
    return [DeliveryEvent(i, status) for i in ids]


def test_v1_sketched_row_decodes_and_keeps_growing_as_v1() -> None:
    """A row sketched before CPC reads back its counts, records new events, stays v1."""
    summary = MessageSummary.decode(V1_SKETCHED)
    view = summary.view().statuses
    assert (view[D].count, view[D].tier) == (6, Tier.BITMAP)
    assert (view[R].recipient_ids, view[F].recipient_ids) == (("u1",), ("zz",))
    assert summary.encode() == V1_SKETCHED
    assert not summary.record(events(["u3", "u4"]))  # already counted
    assert summary.record(events(f"new{i}" for i in range(20)))
    grown = summary.encode()
    assert grown[2] == 1  # still format v1: its bitmap cannot become CPC
    assert MessageSummary.decode(grown).view().statuses[D].count == pytest.approx(26, abs=1)
    # Still a grow-only CRDT: another order of the same events gives the same bytes.
    again = MessageSummary.decode(V1_SKETCHED)
    again.record(events(f"new{i}" for i in reversed(range(20))))
    assert again.encode() == grown


def test_v1_exact_row_is_read_as_v2_and_written_as_v2_on_change() -> None:
    """An all-exact v1 row keeps its ids; its next change is stored in the CPC format."""
    summary = MessageSummary.decode(V1_EXACT)
    view = summary.view().statuses
    assert view[R].recipient_ids == ("amy",)
    assert view[D].recipient_ids == ("amy",)
    assert view[F].recipient_ids == ("dave",)
    assert summary.params == SketchParams()
    assert not summary.record(events(["amy"], R))
    assert summary.record(events(f"r{i}" for i in range(300)))
    data = summary.encode()
    assert data[2] == 2
    assert summary.tier(D) is Tier.CPC
    assert (
        data
        == MessageSummary.from_events(
            events(["amy"], R) + events(["dave"], F) + events(f"r{i}" for i in range(300))
        ).encode()
    )


def test_v2_bytes_depend_only_on_the_set_of_events() -> None:
    """Shuffled, re-batched, replayed and merged recordings of one sketched set: same bytes."""
    ids = [f"id-{i}" for i in range(30_000)]
    reference = MessageSummary.from_events(events(ids)).encode()
    rng = random.Random(11)
    for _ in range(3):
        order = rng.sample(ids, len(ids))
        summary = MessageSummary()
        for start in range(0, len(order), rng.randint(500, 9_000)):
            summary.record(events(order[start : start + 9_000]))
        summary.record(events(order[:5_000]))  # a replayed batch
        assert summary.encode() == reference
    left = MessageSummary.from_events(events(ids[:20_000]))
    right = MessageSummary.from_events(events(ids[10_000:]))
    assert left.merge(right).encode() == reference
    assert MessageSummary.decode(reference).encode() == reference


def test_every_single_bit_flip_of_a_v2_row_is_rejected() -> None:
    """Storage corruption anywhere in a sketched row is a ValueError, never a crash."""
    data = MessageSummary.from_events(events(f"r{i}" for i in range(2_000))).encode()
    rng = random.Random(5)
    positions = list(range(min(len(data), 64))) + rng.sample(range(len(data)), 200)
    for pos in positions:
        bad = bytearray(data)
        bad[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(ValueError, match=r"(?i)summary|codec|corrupt|crc|version"):
            MessageSummary.decode(bytes(bad))


def test_summaries_of_another_lg_k_decode_but_never_mix() -> None:
    """A summary written with another lg_k reads back with it, and refuses to merge."""
    small = MessageSummary.from_events(
        events(f"r{i}" for i in range(500)), SketchParams(cpc_lg_k=11)
    )
    assert small.tier(D) is Tier.CPC
    assert MessageSummary.decode(small.encode()).params.cpc_lg_k == 11
    with pytest.raises(ValueError, match="parameters"):
        small.merge(MessageSummary())
