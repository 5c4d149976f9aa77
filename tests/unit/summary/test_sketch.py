"""Sketch primitives: hash layout, linear counting, HLL (Ertl estimator) and the hand-over."""

from __future__ import annotations

import math

import pytest

from server.summary.recipients import SketchParams
from server.summary.sketch import (
    HyperLogLog,
    LinearCounter,
    handover_cardinality,
    hash_recipient,
    hll_standard_error,
    linear_counting_standard_error,
)


def test_hash_is_fixed_and_unsigned() -> None:
    """The seeded hash is stable across runs (it is part of the stored format) and unsigned."""
    h1, h2 = hash_recipient("amy")
    assert (h1, h2) == hash_recipient("amy")
    assert 0 <= h1 < 2**64
    assert 0 <= h2 < 2**64
    assert hash_recipient("amy") != hash_recipient("chris")


def test_chosen_bitmap_meets_one_percent_at_50k() -> None:
    """m = 2^15 gives ~0.52 % at n = 50K; the next size down (2^14) would miss 1 %."""
    assert linear_counting_standard_error(50_000, 2**15) == pytest.approx(0.00521, abs=1e-4)
    assert linear_counting_standard_error(50_000, 2**14) > 0.01


def test_handover_is_where_hll_becomes_more_accurate() -> None:
    """Linear counting hands over near 110K, while ~3.5 % of the bitmap is still zero."""
    n = handover_cardinality(15, 14)
    assert 105_000 < n < 115_000
    assert linear_counting_standard_error(n, 2**15) == pytest.approx(hll_standard_error(14))
    assert SketchParams().handover_zero_bits == math.ceil(2**15 * math.exp(-n / 2**15))


def test_linear_counter_estimates_and_merges() -> None:
    """Bitmap estimate is close for 5K ids; OR-merge of two halves equals the whole."""
    hashes = [hash_recipient(f"id-{i}")[0] for i in range(5_000)]
    whole, a, b = LinearCounter(), LinearCounter(), LinearCounter()
    whole.add_hashes(hashes)
    a.add_hashes(hashes[:2_500])
    b.add_hashes(hashes[2_000:])
    a.merge(b)
    assert a.bits == whole.bits
    assert whole.estimate() == pytest.approx(5_000, rel=0.02)
    assert not whole.add_hashes(hashes)  # idempotent


def test_full_bitmap_estimate_is_infinite() -> None:
    """A saturated bitmap cannot estimate (why Loom hands over to HLL long before)."""
    lc = LinearCounter(6, b"\xff" * 8)
    assert lc.estimate() == math.inf


@pytest.mark.parametrize("n", [0, 10, 1_000, 30_000, 300_000])
def test_hll_ertl_estimator_is_unbiased_across_range(n: int) -> None:
    """Ertl's estimator needs no bias tables: within 4 standard errors from 0 to 300K."""
    hll = HyperLogLog()
    hll.add_hashes(hash_recipient(f"h-{i}")[1] for i in range(n))
    assert hll.estimate() == pytest.approx(n, rel=4 * hll_standard_error(14), abs=1)


def test_hll_merge_is_register_max_and_rejects_bad_input() -> None:
    """Union of registers is max; wrong sizes or out-of-range values are refused."""
    a, b = HyperLogLog(), HyperLogLog()
    a.add_hashes(hash_recipient(f"a{i}")[1] for i in range(500))
    b.add_hashes(hash_recipient(f"b{i}")[1] for i in range(500))
    merged = HyperLogLog(registers=bytes(a.registers))
    merged.merge(b)
    assert list(merged.registers) == [
        max(x, y) for x, y in zip(a.registers, b.registers, strict=True)
    ]
    with pytest.raises(ValueError, match="registers"):
        HyperLogLog(registers=b"\x00" * 10)
    with pytest.raises(ValueError, match="out of range"):
        HyperLogLog(registers=b"\x40" * 2**14)
    with pytest.raises(ValueError, match="precision"):
        a.merge(HyperLogLog(12))
