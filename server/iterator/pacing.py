"""The Iterator's rate limit: one GCRA booking per job, shared by every worker of every replica.

A job emitting at `rate` objects per second keeps one number in its record, its *pace*: the
theoretical arrival time (GCRA's TAT, in ms) of the next object it may emit. Booking n
objects at time `now` starts at max(pace, now), moves the pace n / rate seconds later, and
tells the caller to wait until that start. No burst beyond one booking is allowed, so the
job's emission never runs ahead of the rate, however many workers book at once.

The arithmetic is the domain's (`book`); the store only keeps the pace and swaps it by
compare-and-set (`JobStore.get_pace` / `set_pace`), atomic on every engine. Of two workers
who read the same pace, one swap wins and the other reads again and books after it
(`reserve`), so bookings from every process and replica form one queue.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.ports import JobStore

__all__ = ["Booking", "book", "reserve"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Booking:
    """What booking some objects does: the job's new pace and the caller's wait."""

    pace_ms: float
    """The theoretical arrival time of the object after these."""
    wait_s: float
    """How long the caller waits before emitting them (0 when the job is behind its pace)."""


def book(*, pace_ms: float, objects: int, rate: float, now_ms: int) -> Booking:
    """GCRA: `objects` at `rate` per second, booked after everything booked before (pure)."""
    start = max(pace_ms, float(now_ms))
    return Booking(pace_ms=start + objects * 1000.0 / rate, wait_s=(start - now_ms) / 1000.0)


async def reserve(store: JobStore, job_id: str, *, objects: int, rate: float, now_ms: int) -> float:
    """Books `objects` for job `job_id` and returns how long to wait before using them.

    Retries only when another booking of the same job won the swap (each retry means some
    booking went through, so the job as a whole always progresses); a job that no longer
    exists books nothing and waits for nothing.
    """
    while True:
        pace = await store.get_pace(job_id)
        if pace is None:
            return 0.0
        booking = book(pace_ms=pace, objects=objects, rate=rate, now_ms=now_ms)
        if await store.set_pace(job_id, booking.pace_ms, expected_ms=pace):
            return booking.wait_s
