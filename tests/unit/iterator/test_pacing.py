"""The Iterator's GCRA booking as a pure function (the store's swap is conformance-tested)."""

from __future__ import annotations

from server.iterator.pacing import Booking, book


class TestBook:
    def test_a_job_behind_its_pace_books_from_now_and_waits_for_nothing(self) -> None:
        """A pace in the past (or never set) starts the booking at the current time."""
        assert book(pace_ms=0.0, objects=100, rate=100.0, now_ms=10_000) == Booking(
            pace_ms=11_000.0, wait_s=0.0
        )

    def test_a_job_ahead_of_its_pace_waits_for_the_earlier_bookings(self) -> None:
        """Objects booked before these are paid for first: the wait is the pace's lead."""
        assert book(pace_ms=11_000.0, objects=50, rate=100.0, now_ms=10_000) == Booking(
            pace_ms=11_500.0, wait_s=1.0
        )

    def test_the_pace_moves_by_objects_over_rate(self) -> None:
        """One object at 3 per second costs a third of a second, whatever the start."""
        booking = book(pace_ms=2_000.0, objects=1, rate=3.0, now_ms=1_000)
        assert booking == Booking(pace_ms=2_000.0 + 1000.0 / 3, wait_s=1.0)
