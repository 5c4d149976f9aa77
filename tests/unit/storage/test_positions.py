"""Positions: a read's keys packed flat, still a sequence of tuples to whoever indexes it."""

from __future__ import annotations

import pytest

from storage.ports import Positions

ROWS = [(1, 10), (1, 11), (2, 5), (4, 1), (4, 2), (4, 9)]


class TestPositions:
    def test_a_packed_read_is_the_sequence_of_its_keys(self) -> None:
        """Indexing, iterating, slicing and comparing see the tuples that were packed."""
        rows = Positions.of(2, ROWS)
        assert len(rows) == 6
        assert rows[0] == (1, 10)
        assert rows[-1] == (4, 9)
        assert list(rows) == ROWS
        assert rows[1:3] == ROWS[1:3]
        assert rows == ROWS
        assert rows == Positions.of(2, ROWS)
        assert rows != Positions.of(2, ROWS[:-1])
        with pytest.raises(IndexError):
            rows[6]

    def test_bytes_round_trip(self) -> None:
        """What the ledger stores reads back as the same positions."""
        rows = Positions.of(2, ROWS)
        back = Positions.from_bytes(2, rows.tobytes())
        assert back == rows
        assert len(rows.tobytes()) == 8 * 2 * len(ROWS)

    def test_columns_and_the_last_parents_rows(self) -> None:
        """A column is every position's n-th integer; the last run counts the rows sharing
        the last position's parent (positions are in order)."""
        rows = Positions.of(2, ROWS)
        assert list(rows.column(0)) == [1, 1, 2, 4, 4, 4]
        assert list(rows.column(1)) == [10, 11, 5, 1, 2, 9]
        assert rows.last_run() == 3
        assert Positions.of(2, [(7, 1)]).last_run() == 1
        assert Positions(2).last_run() == 0

    def test_extend_keeps_order_and_width(self) -> None:
        """Reads of several statements append into one result; widths must agree."""
        rows = Positions.of(2, ROWS[:2])
        rows.extend(Positions.of(2, ROWS[2:]))
        assert rows == ROWS
        with pytest.raises(ValueError, match="width"):
            rows.extend(Positions.of(1, [(3,)]))

    def test_an_empty_read_is_empty_and_falsy(self) -> None:
        """No rows: length 0, false, no last position."""
        empty = Positions(3)
        assert len(empty) == 0
        assert not empty
        assert list(empty) == []
        with pytest.raises(IndexError):
            empty[-1]

    def test_bad_shapes_are_refused(self) -> None:
        """A width below one, or integers that do not fill whole positions, are bugs."""
        with pytest.raises(ValueError, match="at least one"):
            Positions(0)
        with pytest.raises(ValueError, match="width 2"):
            Positions.from_bytes(2, Positions.of(1, [(1,), (2,), (3,)]).tobytes())
