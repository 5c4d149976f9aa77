"""The one slicing helper: every item once, in order, in bounded parts."""

from __future__ import annotations

from storage.slices import slices


class TestSlices:
    def test_parts_cover_the_list_in_order_at_most_size_each(self) -> None:
        """2,500 items in parts of 1,000: 1,000, 1,000, 500, nothing lost or repeated."""
        items = [str(i) for i in range(2500)]
        parts = list(slices(items, 1000))
        assert [len(c) for c in parts] == [1000, 1000, 500]
        assert [x for part in parts for x in part] == items

    def test_a_resumed_fan_out_starts_at_its_stored_progress(self) -> None:
        """`start` skips what was already done (the Inbox resumes a delivery this way)."""
        items = [str(i) for i in range(2500)]
        assert [c[0] for c in slices(items, 1000, start=2000)] == ["2000"]
        assert list(slices(items, 1000, start=2500)) == []

    def test_a_list_slices_into_lists(self) -> None:
        """Parts keep the sequence's type: drivers bind a list's parts as lists."""
        assert all(isinstance(c, list) for c in slices([1, 2, 3], 2))
