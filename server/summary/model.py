"""MessageSummary: per-status recipient sets of one message, with record / merge / view / codec.

A summary is a grow-only CRDT: its state is a pure function of the set of (recipient, status)
events ever recorded. That is what makes the storage story simple: a handler that loses an
optimistic-concurrency race re-reads the row and records the same events again (or merges the
two versions); the result is identical either way, and a replayed event changes nothing, so the
handler can skip the write when :meth:`MessageSummary.record` returns ``False``.

Statuses never retract: a recipient recorded FAILED and later DELIVERED is counted in both
(sketches cannot delete). READ implies DELIVERED: a READ event is recorded in both sets.

Encoding (little-endian). Version 2, written since sketches are CPC::

    b"LS" | 2 u8 | codec u8 | exact_threshold u16 | exact_byte_budget u32 | cpc_lg_k u8
          | crc32(header before it + body) u32 | codec(body)

Version 1, still read (and, for a summary already sketched in v1, still written: its bitmap
and registers cannot be turned into CPC without the ids)::

    b"LS" | 1 u8 | codec u8 | exact_threshold u16 | exact_byte_budget u32
          | bitmap_log2_bits u8 | hll_precision u8 | codec(body)

    body = RecipientSet.encode() for DELIVERED, READ, FAILED in that order

A v1 row whose three sets are still exact decodes as a v2 summary (same state, same counts);
its next change is written as v2. The CRC guards the CPC deserializer, which trusts its input
(``cpc.py``). Sorted ids, canonical CPC sketches and a deterministic codec make the bytes
canonical: equal states encode equally.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from server.summary.codec import compress, decompress
from server.summary.limits import MAX_RECIPIENT_ID_BYTES
from server.summary.recipients import RecipientSet, SketchParams, Tier
from server.summary.sketch import HashPair, hash_recipient

__all__ = [
    "DEFAULT_PARAMS",
    "DELETED",
    "FORMAT_VERSION",
    "LEGACY_VERSION",
    "MAGIC",
    "STATUS_ORDER",
    "DeliveryEvent",
    "DeliveryStatus",
    "MessageSummary",
    "StatusView",
    "SummaryView",
    "check_recipient_id",
    "is_deleted",
]

MAGIC = b"LS"
FORMAT_VERSION = 2
LEGACY_VERSION = 1
_HEADER = struct.Struct("<2sBBHIBI")
_CRC_SPAN = struct.calcsize("<2sBBHIB")  # the header bytes the CRC covers (all but itself)
_LEGACY_HEADER = struct.Struct("<2sBBHIBB")


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


DELETED = MAGIC + b"\xffdeleted"
"""What a deleted message's row holds instead of a summary: a marker, no recipient. It never
decodes as a summary (version 255), so nothing reads it as one by mistake."""


def is_deleted(data: bytes) -> bool:
    """Whether a stored row is a deleted message's marker."""
    return data == DELETED


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
        if read_ids and self._sets[DeliveryStatus.READ].needs_hashes:
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

    def forget(self, recipient_ids: Collection[str]) -> bool:
        """Erases recipients from every exact set (counts follow); return whether it changed.

        Sketched sets keep their bits (a sketch cannot forget one member). This is the one
        way a summary shrinks: it breaks the grow-only rule on purpose, for an erasure.
        """
        changed = False
        for status in STATUS_ORDER:
            changed = self._sets[status].discard(recipient_ids) or changed
        if changed:
            self._encoded = None
        return changed

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
            if p.cpc_lg_k:
                fields = (
                    MAGIC, FORMAT_VERSION, codec_id, p.exact_threshold, p.exact_byte_budget,
                    p.cpc_lg_k,
                )  # fmt: skip
                crc = zlib.crc32(body, zlib.crc32(_HEADER.pack(*fields, 0)[:_CRC_SPAN]))
                header = _HEADER.pack(*fields, crc)
            else:
                header = _LEGACY_HEADER.pack(
                    MAGIC,
                    LEGACY_VERSION,
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
        if len(data) < _LEGACY_HEADER.size or data[:2] != MAGIC:
            raise ValueError("not a summary (too short or no magic)")
        version = data[2]
        if version == FORMAT_VERSION:
            if len(data) < _HEADER.size:
                raise ValueError("summary too short")
            _, _, codec_id, threshold, budget, lg_k, crc = _HEADER.unpack_from(data)
            body = decompress(codec_id, data[_HEADER.size :])
            if zlib.crc32(body, zlib.crc32(data[:_CRC_SPAN])) != crc:
                raise ValueError("corrupt summary: CRC mismatch")
            if not lg_k:
                raise ValueError("v2 summary without a CPC lg_k")
            params = SketchParams(threshold, budget, cpc_lg_k=lg_k)
        elif version == LEGACY_VERSION:
            _, _, codec_id, threshold, budget, log2_bits, precision = _LEGACY_HEADER.unpack_from(
                data
            )
            params = SketchParams(threshold, budget, log2_bits, precision, cpc_lg_k=0)
            body = decompress(codec_id, data[_LEGACY_HEADER.size :])
        else:
            raise ValueError(f"unknown summary version {version}")
        summary = cls(params)
        view = memoryview(body)
        offset = 0
        try:
            for status in STATUS_ORDER:
                summary._sets[status], offset = RecipientSet.decode(view, offset, params)
        except struct.error as exc:
            raise ValueError(f"truncated summary: {exc}") from exc
        if offset != len(body):
            raise ValueError("trailing bytes after summary body")
        if version == LEGACY_VERSION and all(s.tier is Tier.EXACT for s in summary._sets.values()):
            return summary._as_current_version()
        summary._encoded = bytes(data)
        return summary

    def _as_current_version(self) -> MessageSummary:
        """This all-exact (v1) summary under v2 params (default lg_k): same members, counts."""
        p = self.params
        out = MessageSummary(SketchParams(p.exact_threshold, p.exact_byte_budget))
        for status in STATUS_ORDER:
            out._sets[status].add(self._sets[status].members())
        return out

    @classmethod
    def from_events(
        cls, events: Iterable[DeliveryEvent], params: SketchParams = DEFAULT_PARAMS
    ) -> MessageSummary:
        """Build a summary from scratch."""
        summary = cls(params)
        summary.record(events)
        return summary
