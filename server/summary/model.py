"""MessageSummary: per-status recipient sets of one message, with record / merge / view / codec.

A summary is a grow-only CRDT: its state is a pure function of the set of (recipient, status)
events ever recorded. That is what makes the storage story simple: a handler that loses an
optimistic-concurrency race re-reads the row and records the same events again (or merges the
two versions); the result is identical either way, and a replayed event changes nothing, so the
handler can skip the write when :meth:`MessageSummary.record` returns ``False``.

Statuses never retract: a recipient recorded FAILED and later DELIVERED is counted in both
(sketches cannot delete). READ implies DELIVERED: a READ event is recorded in both sets.

Encoding (version 1, little-endian)::

    b"LS" | version u8 | codec u8 | exact_threshold u16 | exact_byte_budget u32
          | bitmap_log2_bits u8 | hll_precision u8 | codec(body)
    body = RecipientSet.encode() for DELIVERED, READ, FAILED in that order

Sorted ids and a deterministic codec make the bytes canonical: equal states encode equally.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from server.summary.codec import compress, decompress
from server.summary.limits import MAX_RECIPIENT_ID_BYTES
from server.summary.recipients import RecipientSet, SketchParams, Tier
from server.summary.sketch import HashPair, hash_recipient

MAGIC = b"LS"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<2sBBHIBB")


class DeliveryStatus(Enum):
    """Delivery state of one recipient for one message."""

    DELIVERED = "delivered"
    READ = "read"
    FAILED = "failed"


STATUS_ORDER: tuple[DeliveryStatus, ...] = (
    DeliveryStatus.DELIVERED,
    DeliveryStatus.READ,
    DeliveryStatus.FAILED,
)
DEFAULT_PARAMS = SketchParams()


@dataclass(frozen=True, slots=True)
class DeliveryEvent:
    """One recipient reached one status."""

    recipient_id: str
    status: DeliveryStatus


@dataclass(frozen=True, slots=True)
class StatusView:
    """What a user sees for one status."""

    count: int
    exact: bool
    recipient_ids: tuple[str, ...]
    relative_error_bound: float
    tier: Tier


@dataclass(frozen=True, slots=True)
class SummaryView:
    """What GetMessageSummary returns (before protobuf translation)."""

    statuses: Mapping[DeliveryStatus, StatusView]
    encoded_size_bytes: int


def check_recipient_id(recipient_id: str) -> None:
    """Raise ValueError for an id the encoding cannot hold (the handler validates first)."""
    if not recipient_id:
        raise ValueError("recipient_id must not be empty")
    if len(recipient_id) * 4 > MAX_RECIPIENT_ID_BYTES and (
        len(recipient_id.encode()) > MAX_RECIPIENT_ID_BYTES
    ):
        raise ValueError(f"recipient_id longer than {MAX_RECIPIENT_ID_BYTES} UTF-8 bytes")


class MessageSummary:
    """Delivery summary of one message: a RecipientSet per DeliveryStatus."""

    __slots__ = ("_encoded", "_sets", "params")

    def __init__(self, params: SketchParams = DEFAULT_PARAMS) -> None:
        self.params = params
        self._sets = {status: RecipientSet(params) for status in STATUS_ORDER}
        self._encoded: bytes | None = None

    def record(self, events: Iterable[DeliveryEvent]) -> bool:
        """Record events; return whether anything changed (False: the write can be skipped)."""
        by_status: dict[DeliveryStatus, list[str]] = {s: [] for s in STATUS_ORDER}
        for event in events:
            check_recipient_id(event.recipient_id)
            by_status[event.status].append(event.recipient_id)
        read_ids = by_status[DeliveryStatus.READ]
        changed = False
        read_hashes: list[HashPair] | None = None
        if read_ids and self._sets[DeliveryStatus.READ].tier is not Tier.EXACT:
            read_hashes = [hash_recipient(i) for i in read_ids]  # hashed once, used twice
        for status in STATUS_ORDER:
            ids = by_status[status]
            if status is DeliveryStatus.DELIVERED and read_ids:
                delivered = self._sets[status]
                if ids:
                    changed = delivered.add(ids) or changed
                changed = delivered.add(read_ids, read_hashes) or changed
            elif ids:
                hashes = read_hashes if status is DeliveryStatus.READ else None
                changed = self._sets[status].add(ids, hashes) or changed
        if changed:
            self._encoded = None
        return changed

    def record_one(self, recipient_id: str, status: DeliveryStatus) -> bool:
        """Convenience for a single event."""
        return self.record((DeliveryEvent(recipient_id, status),))

    def merge_in(self, other: MessageSummary) -> bool:
        """Union ``other`` into this summary (same params required); return whether it changed."""
        if other.params != self.params:
            raise ValueError("cannot merge summaries with different sketch parameters")
        changed = False
        for status in STATUS_ORDER:
            changed = self._sets[status].merge(other._sets[status]) or changed
        if changed:
            self._encoded = None
        return changed

    def merge(self, other: MessageSummary) -> MessageSummary:
        """Pure union: a new summary equal to recording both event sets."""
        out = self.copy()
        out.merge_in(other)
        return out

    def copy(self) -> MessageSummary:
        """Deep copy through the canonical encoding (cheap: a few tens of KB at most)."""
        return MessageSummary.decode(self.encode())

    def tier(self, status: DeliveryStatus) -> Tier:
        """Representation currently used for ``status``."""
        return self._sets[status].tier

    def view(self) -> SummaryView:
        """Per-status count / exactness / ids / error bound plus the encoded size."""
        statuses: dict[DeliveryStatus, StatusView] = {}
        for status in STATUS_ORDER:
            rset = self._sets[status]
            estimate = rset.count()
            exact = rset.tier is Tier.EXACT
            statuses[status] = StatusView(
                count=round(estimate),
                exact=exact,
                recipient_ids=tuple(rset.members()) if exact else (),
                relative_error_bound=rset.relative_error_bound(estimate),
                tier=rset.tier,
            )
        return SummaryView(statuses=statuses, encoded_size_bytes=len(self.encode()))

    def encode(self) -> bytes:
        """Canonical, versioned, compressed bytes (cached until the next change)."""
        if self._encoded is None:
            body = b"".join(self._sets[s].encode() for s in STATUS_ORDER)
            codec_id, payload = compress(body)
            p = self.params
            header = _HEADER.pack(
                MAGIC,
                FORMAT_VERSION,
                codec_id,
                p.exact_threshold,
                p.exact_byte_budget,
                p.bitmap_log2_bits,
                p.hll_precision,
            )
            self._encoded = header + payload
        return self._encoded

    @classmethod
    def decode(cls, data: bytes) -> MessageSummary:
        """Inverse of :meth:`encode`; raises ValueError on anything malformed."""
        if len(data) < _HEADER.size:
            raise ValueError("summary too short")
        magic, version, codec_id, threshold, budget, log2_bits, precision = _HEADER.unpack_from(
            data
        )
        if magic != MAGIC or version != FORMAT_VERSION:
            raise ValueError(f"not a v{FORMAT_VERSION} summary")
        params = SketchParams(threshold, budget, log2_bits, precision)
        body = memoryview(decompress(codec_id, data[_HEADER.size :]))
        summary = cls(params)
        offset = 0
        for status in STATUS_ORDER:
            summary._sets[status], offset = RecipientSet.decode(body, offset, params)
        if offset != len(body):
            raise ValueError("trailing bytes after summary body")
        summary._encoded = bytes(data)
        return summary

    @classmethod
    def from_events(
        cls, events: Iterable[DeliveryEvent], params: SketchParams = DEFAULT_PARAMS
    ) -> MessageSummary:
        """Build a summary from scratch."""
        summary = cls(params)
        summary.record(events)
        return summary
