"""Apache DataSketches' CPC sketch in the one form a grow-only summary can store: canonical.

Why CPC (Lang, "Back to the Future: an Even More Nearly Optimal Cardinality Estimation
Algorithm", 2017): it is a compressed FM85 coupon matrix, the smallest mergeable sketch per
unit of error that a library maintains. Measured beside the v1 bitmap + HLL pair it replaces
(``python -m loadtest summary``, docs/benchmarks.md "Summary"): at lgK = 13 a 50,000-recipient status
stores ~4.9 KB instead of ~11 KB at a comparable mean error (~0.6 %), 0.13 µs of CPU per
recorded id, and the same bytes for the same set of ids whatever their order or batching.

Canonical form
--------------
A freshly updated CPC sketch carries the HIP estimator's accumulators, which depend on the
*order* of the updates, so its serialized bytes do too: the same recipients recorded in
another order, or replayed, would give different bytes and break the summary's promise that
its state (and stored bytes) is a function of the set of events only. Passing a sketch
through a ``cpc_union`` drops HIP (the result is a "merged" sketch estimated by ICON); what
is left is the coupon set, which depends only on the set of items, and its serialization is
canonical (checked by the unit tests: orders, batchings, replays and merges give identical
bytes). The price is ICON's error instead of HIP's: relative standard error ≈ 0.693/√k
instead of ≈ 0.589/√k, i.e. ~1.38 times the bytes of a single-writer HIP sketch for equal error —
a price any mergeable summary pays anyway, since a union always drops HIP.

Safety
------
The C++ deserializer trusts its preamble: flipped bits in the first bytes can crash the
process (measured: segmentation fault), so bytes reach :func:`decode` only after the
summary's CRC-32 over its whole body has matched (``model.py``). Rows are only ever written
by Loom; the CRC turns a storage-level corruption into a ValueError instead of a crash.
"""

from __future__ import annotations

from typing import Protocol, cast

import datasketches

__all__ = ["CPC_LG_K", "CpcSketch", "canonical", "decode", "error_bound", "new", "union"]

CPC_LG_K = 13
"""k = 8,192: ICON relative standard error 0.693/√8192 ≈ 0.77 % (mean |error| ≈ 0.61 %), so
the mean error stays under Remind's 1 % at every n with a wide margin; lgK = 12 would halve
the bytes (~2.5 KB) at ≈ 0.86 % mean error, too close to the bar to promise it."""

MIN_LG_K, MAX_LG_K = 4, 26  # DataSketches' own bounds


class CpcSketch(Protocol):
    """What Loom uses of ``datasketches.cpc_sketch`` (the package ships no type stubs)."""

    @property
    def lg_k(self) -> int: ...
    def update(self, datum: str) -> None: ...
    def get_estimate(self) -> float: ...
    def get_upper_bound(self, kappa: int) -> float: ...
    def get_lower_bound(self, kappa: int) -> float: ...
    def serialize(self) -> bytes: ...


def check_lg_k(lg_k: int) -> None:
    """Raise ValueError outside DataSketches' supported range."""
    if not MIN_LG_K <= lg_k <= MAX_LG_K:
        raise ValueError(f"cpc_lg_k must be in {MIN_LG_K}..{MAX_LG_K}")


def new(lg_k: int) -> CpcSketch:
    """An empty sketch (canonical already: it holds no HIP state)."""
    return cast(CpcSketch, datasketches.cpc_sketch(lg_k))


def canonical(sketch: CpcSketch, lg_k: int) -> CpcSketch:
    """The order-independent form of `sketch` (a union's result: coupons only, no HIP)."""
    u = datasketches.cpc_union(lg_k)
    u.update(sketch)
    return cast(CpcSketch, u.get_result())


def union(a: CpcSketch, b: CpcSketch, lg_k: int) -> CpcSketch:
    """The canonical sketch of the union of `a` and `b` (same lg_k)."""
    u = datasketches.cpc_union(lg_k)
    u.update(a)
    u.update(b)
    return cast(CpcSketch, u.get_result())


def decode(data: bytes, lg_k: int) -> CpcSketch:
    """Deserializes bytes that passed the summary's CRC; ValueError if they are not a
    canonical sketch of `lg_k` (or not a sketch at all)."""
    try:
        sketch = cast(CpcSketch, datasketches.cpc_sketch.deserialize(data))
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"corrupt CPC sketch: {exc}") from exc
    if sketch.lg_k != lg_k:
        raise ValueError(f"CPC sketch has lg_k {sketch.lg_k}, the summary says {lg_k}")
    return sketch


def error_bound(sketch: CpcSketch) -> float:
    """One standard deviation of the estimate, relative (the library's own bounds)."""
    estimate = float(sketch.get_estimate())
    if estimate <= 0:
        return 0.0
    upper, lower = float(sketch.get_upper_bound(1)), float(sketch.get_lower_bound(1))
    return max(upper - estimate, estimate - lower) / estimate
