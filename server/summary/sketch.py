"""Cardinality-sketch primitives of format v1 summaries: one hash, a linear-counting bitmap, HLL.

New summaries sketch with CPC (``cpc.py``, format v2); these primitives remain because v1 rows
that were already sketched keep decoding and growing in them (``recipients.py``).

Why these three pieces
----------------------
Remind's summaries keep the exact recipient set up to 250 per status and switch to linear
counting (Whang, Vander-Zanden & Taylor 1990) above. Linear counting is excellent while its
bitmap still has free bits but collapses as the bitmap fills (V -> 0), so Loom shadows the bitmap
with HyperLogLog registers from the moment of promotion and hands over to HLL once the bitmap's
error would exceed HLL's. Both are fed by the *same* 128-bit hash, so one recipient always lands
on the same bit and the same register: union is OR / max and recording is idempotent.

Hash
----
``mmh3.hash64(recipient_id, seed=HASH_SEED, signed=False)`` (MurmurHash3 x64-128 split into two
unsigned 64-bit halves; ``str`` input is hashed as its UTF-8 bytes). The low half ``h1`` picks the
bitmap bit (``h1 & (m - 1)``); the high half ``h2`` picks the HLL register (its low ``p`` bits)
and the rank (leading zeros of the remaining ``64 - p`` bits, plus one). Using independent halves
keeps the two estimators' errors uncorrelated. **The seed is part of the stored format**: changing
it makes every persisted sketch meaningless, so it is a constant, never configuration.

Choosing the bitmap size m (linear counting)
--------------------------------------------
The paper's standard error of n^/n is  SE(n, m) = sqrt(m * (e^t - t - 1)) / n  with  t = n / m.
Requirement: SE < 1 % at n = 50,000.

* m = 2^14 = 16,384 bits:  t = 3.0518, e^t = 21.151, e^t - t - 1 = 17.099,
  m * 17.099 = 280,150, sqrt = 529.3, / 50,000 = **1.06 %**  -> fails (barely).
* m = 2^15 = 32,768 bits:  t = 1.5259, e^t = 4.5991, e^t - t - 1 = 2.0732,
  m * 2.0732 = 67,934,  sqrt = 260.6, / 50,000 = **0.52 %**  -> passes with 2x margin.

The exact solution (≈ 17.4K bits) is not a power of two; 2^15 lets the index be a mask and buys
the margin that keeps the *average* error well under 1 % at 50K and beyond. Cost: 4,096 bytes
raw, far less compressed while sparse (see ``codec.py``).

Choosing the HLL precision p and the hand-over point
----------------------------------------------------
HLL's standard error is 1.04 / sqrt(2^p). p = 14 (16,384 registers, as Redis and DataSketches
lgK=14) gives 1.04 / 128 = **0.8125 %**; p = 13 would give 1.15 % (too much), p = 15 doubles
the stored registers for 0.57 %. The registers are estimated with Ertl's improved raw estimator
(arXiv:1702.01284, 2017), which is unbiased from n = 0 upwards without empirical bias tables.

SE_LC(n) grows monotonically with n, so there is a single hand-over cardinality where
SE_LC(n) = 0.8125 %. Solving sqrt((e^t - t - 1) / m) / t = 0.008125 with m = 32,768 gives
t ≈ 3.36, i.e. **n ≈ 110,000**, where the bitmap still has ≈ 3.5 % zero bits (≈ 1,140), so linear
counting is still well inside its valid range when it retires. Below the hand-over Loom reports
linear counting (lower error); above it the bitmap is dropped and HLL reports.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import mmh3

__all__ = [
    "HASH_SEED",
    "HLL_ALPHA_INF",
    "HLL_PRECISION",
    "LINEAR_COUNTING_LOG2_BITS",
    "HashPair",
    "HyperLogLog",
    "LinearCounter",
    "handover_cardinality",
    "hash_recipient",
    "hll_standard_error",
    "linear_counting_standard_error",
]

HASH_SEED = 0x4C4F4F4D  # b"LOOM" read as a big-endian u32; fixed forever (see module docstring).
LINEAR_COUNTING_LOG2_BITS = 15  # m = 32,768 bits = 4 KiB.
HLL_PRECISION = 14  # 16,384 registers, SE 0.8125 %.
HLL_ALPHA_INF = 1.0 / (2.0 * math.log(2.0))  # Ertl's alpha_inf for the improved raw estimator.

HashPair = tuple[int, int]
_LEGAL_RANKS = bytes(range(256))


def hash_recipient(recipient_id: str) -> HashPair:
    """Return the (h1, h2) unsigned 64-bit halves of the recipient's seeded MurmurHash3."""
    return mmh3.hash64(recipient_id, seed=HASH_SEED, signed=False)


def linear_counting_standard_error(n: float, m: int) -> float:
    """Whang et al.'s standard error of n^/n: sqrt(m(e^t - t - 1)) / n with t = n / m."""
    if n <= 0:
        return 0.0
    t = n / m
    return math.sqrt(m * math.expm1(t) - m * t) / n


def hll_standard_error(precision: int) -> float:
    """Flajolet et al.'s asymptotic standard error 1.04 / sqrt(2^p)."""
    return 1.04 / math.sqrt(1 << precision)


@functools.lru_cache(maxsize=32)
def handover_cardinality(log2_bits: int, precision: int) -> float:
    """Cardinality above which HLL's standard error beats linear counting's (bisection)."""
    m = 1 << log2_bits
    target = hll_standard_error(precision)
    lo, hi = 1.0, 64.0 * m
    for _ in range(200):
        mid = (lo + hi) / 2
        if linear_counting_standard_error(mid, m) < target:
            lo = mid
        else:
            hi = mid
    return lo


class LinearCounter:
    """Whang/Vander-Zanden/Taylor bitmap: set bit h1 mod m, estimate -m ln(zeros / m)."""

    __slots__ = ("_mask", "bits", "log2_bits")

    def __init__(
        self, log2_bits: int = LINEAR_COUNTING_LOG2_BITS, bits: bytes | None = None
    ) -> None:
        self.log2_bits = log2_bits
        self._mask = (1 << log2_bits) - 1
        size = (1 << log2_bits) // 8
        if bits is not None and len(bits) != size:
            raise ValueError(f"bitmap must be {size} bytes, got {len(bits)}")
        self.bits = bytearray(bits) if bits is not None else bytearray(size)

    @property
    def m(self) -> int:
        """Number of bits in the bitmap."""
        return 1 << self.log2_bits

    def add_hashes(self, h1s: Iterable[int]) -> bool:
        """Set one bit per hash; return whether any bit flipped (drives write skipping)."""
        bits, mask, changed = self.bits, self._mask, False
        for h1 in h1s:
            i = h1 & mask
            byte, bit = i >> 3, 1 << (i & 7)
            if not bits[byte] & bit:
                bits[byte] |= bit
                changed = True
        return changed

    def zero_bits(self) -> int:
        """Count of unset bits (popcount on one big int is C-speed)."""
        return self.m - int.from_bytes(self.bits, "little").bit_count()

    def estimate(self) -> float:
        """n^ = -m ln(V); infinite when the bitmap is full (callers hand over long before)."""
        zeros = self.zero_bits()
        if zeros == 0:
            return math.inf
        return -self.m * math.log(zeros / self.m)

    def merge(self, other: LinearCounter) -> None:
        """Union: bitwise OR of equally sized bitmaps."""
        if other.log2_bits != self.log2_bits:
            raise ValueError("cannot merge bitmaps of different sizes")
        merged = int.from_bytes(self.bits, "little") | int.from_bytes(other.bits, "little")
        self.bits = bytearray(merged.to_bytes(len(self.bits), "little"))


class HyperLogLog:
    """HLL registers (one byte each, values 0..65-p) with Ertl's improved raw estimator."""

    __slots__ = ("_mask", "precision", "registers")

    def __init__(self, precision: int = HLL_PRECISION, registers: bytes | None = None) -> None:
        if not 4 <= precision <= 18:
            raise ValueError("HLL precision must be in 4..18")
        self.precision = precision
        self._mask = (1 << precision) - 1
        size = 1 << precision
        if registers is not None:
            if len(registers) != size:
                raise ValueError(f"HLL needs {size} registers, got {len(registers)}")
            # One C pass (delete every legal value; anything left is out of range): max() over
            # 16K bytes boxes each one and cost ~1.2 ms per decode, most of a read's CPU.
            if bytes(registers).translate(None, _LEGAL_RANKS[: 66 - precision]):
                raise ValueError("HLL register value out of range")
        self.registers = bytearray(registers) if registers is not None else bytearray(size)

    @property
    def m(self) -> int:
        """Number of registers."""
        return 1 << self.precision

    def add_hashes(self, h2s: Iterable[int]) -> bool:
        """Raise register (h2 mod 2^p) to the rank of h2 >> p; return whether any rose."""
        regs, mask, p, changed = self.registers, self._mask, self.precision, False
        top = 65 - p  # rank = (64 - p) - bit_length(w) + 1; w == 0 gives the maximum 65 - p.
        for h2 in h2s:
            idx = h2 & mask
            rank = top - (h2 >> p).bit_length()
            if rank > regs[idx]:
                regs[idx] = rank
                changed = True
        return changed

    def merge(self, other: HyperLogLog) -> None:
        """Union: register-wise max."""
        if other.precision != self.precision:
            raise ValueError("cannot merge HLLs of different precision")
        self.registers = bytearray(map(max, self.registers, other.registers))

    def estimate(self) -> float:
        """Ertl (2017) improved raw estimator: unbiased over the whole range, no bias tables."""
        m, q = self.m, 64 - self.precision
        regs = bytes(self.registers)
        counts = [regs.count(k) for k in range(q + 2)]
        z = m * _tau((m - counts[q + 1]) / m)
        for k in range(q, 0, -1):
            z = 0.5 * (z + counts[k])
        z += m * _sigma(counts[0] / m)
        return HLL_ALPHA_INF * m * m / z if z > 0 else 0.0


def _sigma(x: float) -> float:
    """Ertl's sigma(x) = x + sum_{k>=1} x^(2^k) 2^(k-1); accounts for empty registers."""
    if x == 1.0:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        z_old = z
        z += x * y
        y += y
        if z == z_old:
            return z


def _tau(x: float) -> float:
    """Ertl's tau(x); accounts for saturated registers (never reached in practice at p=14)."""
    if x in (0.0, 1.0):
        return 0.0
    y, z = 1.0, 1.0 - x
    while True:
        x = math.sqrt(x)
        z_old = z
        y *= 0.5
        z -= (1.0 - x) ** 2 * y
        if z == z_old:
            return z / 3.0
