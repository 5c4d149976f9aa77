"""The recipients of one message in one status: an exact set that promotes itself to a sketch.

Tiers (each one a pure function of the *set* of recipients ever added, so recording is
idempotent, order-independent, and ``merge`` equals recording the union):

``EXACT``   the ids themselves, while ``|S| <= exact_threshold`` and their UTF-8 bytes fit in
            ``exact_byte_budget``.
``CPC``     (format v2, every new summary) a canonical DataSketches CPC sketch of lgK
            ``cpc_lg_k`` (``cpc.py``), filled with every member: the exact members go in at
            promotion, so none is lost.

Format v1 summaries (written before CPC) promoted instead to:

``BITMAP``  a linear-counting bitmap *and* HLL registers, both filled from every member.
            Linear counting reports.
``HLL``     once the bitmap's zero bits fall below the hand-over floor (≈ 110K recipients)
            the bitmap is dropped and the registers, which saw every member, report.

A v1 set already in BITMAP/HLL cannot become CPC (the ids are gone), so it keeps growing in its
v1 sketches (``cpc_lg_k == 0`` in its params marks that); a v1 summary whose sets are all still
exact is read as v2 (``model.py``). Monotonicity makes every tier choice safe under union: a
superset never has fewer coupons, set bits or members, so a merged state never "un-promotes".
"""

from __future__ import annotations

import math
import struct
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from server.summary import cpc
from server.summary.limits import (
    DEFAULT_EXACT_BYTE_BUDGET,
    DEFAULT_EXACT_THRESHOLD,
    MAX_EXACT_THRESHOLD,
    MAX_RECIPIENT_ID_BYTES,
)
from server.summary.sketch import (
    HLL_PRECISION,
    LINEAR_COUNTING_LOG2_BITS,
    HashPair,
    HyperLogLog,
    LinearCounter,
    handover_cardinality,
    hash_recipient,
    hll_standard_error,
    linear_counting_standard_error,
)

__all__ = ["RecipientSet", "SketchParams", "Tier"]

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")


class Tier(IntEnum):
    """Representation of a recipient set; the value is its byte in the encoding."""

    EXACT = 0
    BITMAP = 1  # v1 only
    HLL = 2  # v1 only
    CPC = 3


@dataclass(frozen=True, slots=True)
class SketchParams:
    """Parameters stored in every encoded summary; two summaries merge only if these match.

    ``cpc_lg_k > 0``: sets promote to CPC (format v2). ``cpc_lg_k == 0``: a v1 summary, whose
    sets promote to the linear-counting bitmap + HLL pair sized by the two v1 fields.
    """

    exact_threshold: int = DEFAULT_EXACT_THRESHOLD
    exact_byte_budget: int = DEFAULT_EXACT_BYTE_BUDGET
    bitmap_log2_bits: int = LINEAR_COUNTING_LOG2_BITS
    hll_precision: int = HLL_PRECISION
    cpc_lg_k: int = cpc.CPC_LG_K
    handover_zero_bits: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.cpc_lg_k:
            cpc.check_lg_k(self.cpc_lg_k)
        if not 0 <= self.exact_threshold <= MAX_EXACT_THRESHOLD:
            raise ValueError(f"exact_threshold must be in 0..{MAX_EXACT_THRESHOLD}")
        if not 0 <= self.exact_byte_budget < 2**32:
            raise ValueError("exact_byte_budget must fit in a u32")
        if not 6 <= self.bitmap_log2_bits <= 24:
            raise ValueError("bitmap_log2_bits must be in 6..24")
        if not 4 <= self.hll_precision <= 18:
            raise ValueError("hll_precision must be in 4..18")
        m = 1 << self.bitmap_log2_bits
        n_cross = handover_cardinality(self.bitmap_log2_bits, self.hll_precision)
        # Integer floor so the tier decision is exact and identical on every machine.
        object.__setattr__(self, "handover_zero_bits", math.ceil(m * math.exp(-n_cross / m)))


class RecipientSet:
    """Grow-only set of recipient ids: exact, then CPC (v1: bitmap(+HLL), then HLL)."""

    __slots__ = ("_bitmap", "_cpc", "_cpc_bytes", "_hll", "_member_bytes", "_members", "params")

    def __init__(self, params: SketchParams) -> None:
        self.params = params
        self._members: set[str] | None = set()
        self._member_bytes = 0
        self._bitmap: LinearCounter | None = None
        self._hll: HyperLogLog | None = None
        self._cpc: cpc.CpcSketch | None = None  # always canonical (no HIP state)
        self._cpc_bytes = b""  # its serialization, kept to detect change and to encode

    @property
    def tier(self) -> Tier:
        """Current representation."""
        if self._members is not None:
            return Tier.EXACT
        if self._cpc is not None:
            return Tier.CPC
        return Tier.BITMAP if self._bitmap is not None else Tier.HLL

    @property
    def needs_hashes(self) -> bool:
        """Whether :meth:`add` would hash ids itself (v1 sketches): callers may share hashes."""
        return self._members is None and self._cpc is None

    def members(self) -> list[str]:
        """Sorted recipient ids; only an exact set knows them."""
        if self._members is None:
            raise ValueError("recipient ids are not kept above the exact threshold")
        return sorted(self._members)

    # ---- recording ---------------------------------------------------------------------------

    def add(self, ids: Sequence[str], hashes: Sequence[HashPair] | None = None) -> bool:
        """Add ids (``hashes``, if given, aligned with ``ids``); return whether the set changed."""
        if self._members is not None:
            new = set(ids).difference(self._members)
            if not new:
                return False
            self._members |= new
            if len(self._members) > self.params.exact_threshold:
                self._promote()
            else:
                self._member_bytes += sum(len(i.encode()) for i in new)
                if self._member_bytes > self.params.exact_byte_budget:
                    self._promote()
            return True
        if self._cpc is not None:
            return self._add_to_cpc(ids)
        return self._add_hashes(hashes if hashes is not None else [hash_recipient(i) for i in ids])

    def discard(self, ids: Collection[str]) -> bool:
        """Removes `ids` from an exact set (an erasure); returns whether it changed.

        A sketch cannot forget one member (its bits or coupons are shared by many ids and
        hold no identifier), so a sketched set is left as it is. Removing ids never
        un-promotes a sketch, and an exact set stays exact.
        """
        if self._members is None:
            return False
        gone = self._members.intersection(ids)
        if not gone:
            return False
        self._members -= gone
        self._member_bytes -= sum(len(i.encode()) for i in gone)
        return True

    def _add_to_cpc(self, ids: Iterable[str]) -> bool:
        """Updates the sketch and re-canonicalizes it; changed iff the coupons changed."""
        assert self._cpc is not None
        sketch, lg_k = self._cpc, self.params.cpc_lg_k
        for rid in ids:
            sketch.update(rid)
        return self._set_cpc(cpc.canonical(sketch, lg_k))

    def _set_cpc(self, sketch: cpc.CpcSketch) -> bool:
        data = sketch.serialize()
        self._cpc = sketch
        changed = data != self._cpc_bytes
        self._cpc_bytes = data
        return changed

    def _add_hashes(self, hashes: Sequence[HashPair]) -> bool:
        assert self._hll is not None
        changed = self._hll.add_hashes([h2 for _, h2 in hashes])
        if self._bitmap is not None:
            changed = self._bitmap.add_hashes([h1 for h1, _ in hashes]) or changed
            self._maybe_hand_over()
        return changed

    def _promote(self) -> None:
        """Exact -> CPC (v1: BITMAP): every exact member goes into the sketch (none is lost)."""
        assert self._members is not None
        members = self._members
        self._members, self._member_bytes = None, 0
        if self.params.cpc_lg_k:
            self._cpc, self._cpc_bytes = cpc.new(self.params.cpc_lg_k), b""
            self._add_to_cpc(members)
            return
        self._bitmap = LinearCounter(self.params.bitmap_log2_bits)
        self._hll = HyperLogLog(self.params.hll_precision)
        self._add_hashes([hash_recipient(i) for i in members])

    def _maybe_hand_over(self) -> None:
        """BITMAP -> HLL once linear counting's error would exceed HLL's."""
        if self._bitmap is not None and self._bitmap.zero_bits() < self.params.handover_zero_bits:
            self._bitmap = None

    def merge(self, other: RecipientSet) -> bool:
        """Union in place (exact: set union; bitmaps: OR; registers: max); return changed."""
        if other.params != self.params:
            raise ValueError("cannot merge recipient sets with different sketch parameters")
        if other._members is not None:
            if self._members is not None or self._cpc is not None:
                return self.add(list(other._members))
            return self._add_hashes([hash_recipient(i) for i in other._members])
        before = self.encode()
        if self._members is not None:
            self._promote()
        if other._cpc is not None:
            assert self._cpc is not None  # same params, so both promote to CPC
            self._set_cpc(cpc.union(self._cpc, other._cpc, self.params.cpc_lg_k))
            return self.encode() != before
        assert self._hll is not None
        assert other._hll is not None
        self._hll.merge(other._hll)
        if self._bitmap is not None:
            if other._bitmap is None:
                self._bitmap = None
            else:
                self._bitmap.merge(other._bitmap)
                self._maybe_hand_over()
        return self.encode() != before

    # ---- reading -----------------------------------------------------------------------------

    def count(self) -> float:
        """Exact size, or the active estimator's estimate."""
        if self._members is not None:
            return float(len(self._members))
        if self._cpc is not None:
            return float(self._cpc.get_estimate())
        if self._bitmap is not None:
            return self._bitmap.estimate()
        assert self._hll is not None
        return self._hll.estimate()

    def relative_error_bound(self, estimate: float) -> float:
        """Theoretical standard error of the active estimator at ``estimate`` (0 when exact)."""
        tier = self.tier
        if tier is Tier.EXACT:
            return 0.0
        if self._cpc is not None:
            return cpc.error_bound(self._cpc)
        if tier is Tier.BITMAP:
            return linear_counting_standard_error(estimate, 1 << self.params.bitmap_log2_bits)
        return hll_standard_error(self.params.hll_precision)

    # ---- encoding (uncompressed; the summary compresses the whole body at once) ---------------

    def encode(self) -> bytes:
        """Canonical bytes: tier, then sorted length-prefixed UTF-8 ids, a u32-length-prefixed
        canonical CPC sketch, or (v1) bitmap + registers."""
        if self._members is not None:
            parts = [bytes((Tier.EXACT,)), _U16.pack(len(self._members))]
            for rid in sorted(self._members):
                raw = rid.encode()
                parts += (_U16.pack(len(raw)), raw)
            return b"".join(parts)
        if self._cpc is not None:
            return bytes((Tier.CPC,)) + _U32.pack(len(self._cpc_bytes)) + self._cpc_bytes
        assert self._hll is not None
        if self._bitmap is not None:
            return bytes((Tier.BITMAP,)) + self._bitmap.bits + self._hll.registers
        return bytes((Tier.HLL,)) + self._hll.registers

    @classmethod
    def decode(
        cls, data: memoryview, offset: int, params: SketchParams
    ) -> tuple[RecipientSet, int]:
        """Inverse of :meth:`encode`; returns the set and the offset just past it."""
        rset = cls(params)
        tier = Tier(data[offset])
        offset += 1
        if tier is Tier.EXACT:
            (count,) = _U16.unpack_from(data, offset)
            offset += 2
            ids: list[str] = []
            for _ in range(count):
                (size,) = _U16.unpack_from(data, offset)
                offset += 2
                if size == 0 or size > MAX_RECIPIENT_ID_BYTES or offset + size > len(data):
                    raise ValueError("corrupt exact recipient id")
                ids.append(bytes(data[offset : offset + size]).decode())
                offset += size
            rset._members = set(ids)
            rset._member_bytes = sum(len(i.encode()) for i in rset._members)
            return rset, offset
        rset._members = None
        if (tier is Tier.CPC) != bool(params.cpc_lg_k):
            raise ValueError(f"a {tier.name} set cannot appear in this summary version")
        if tier is Tier.CPC:
            (size,) = _U32.unpack_from(data, offset)
            raw = _take(data, offset + 4, size)
            # Canonicalized again so the in-memory sketch never carries HIP state, whatever
            # wrote these bytes; for Loom's own rows the bytes come out identical.
            rset._set_cpc(cpc.canonical(cpc.decode(raw, params.cpc_lg_k), params.cpc_lg_k))
            return rset, offset + 4 + size
        if tier is Tier.BITMAP:
            size = (1 << params.bitmap_log2_bits) // 8
            rset._bitmap = LinearCounter(params.bitmap_log2_bits, _take(data, offset, size))
            offset += size
        size = 1 << params.hll_precision
        rset._hll = HyperLogLog(params.hll_precision, _take(data, offset, size))
        return rset, offset + size


def _take(data: memoryview, offset: int, size: int) -> bytes:
    if offset + size > len(data):
        raise ValueError("truncated sketch")
    return bytes(data[offset : offset + size])
