"""A short-lived cache of job records for the workers.

Every step needs its job's state (paused? cancelled?) and rate; reading the job store for
each would double the store's load. Entries live `ttl_s` (a quarter second by default), so
PauseJob, CancelJob and UpdateJob reach every worker of every replica within that.
"""

from __future__ import annotations

import time

from server.iterator.model import JobSpec
from storage.ports import JobRecord, JobStore

__all__ = ["JobCache"]


class JobCache:
    """job_id -> (record, parsed spec), refreshed after `ttl_s`."""

    __slots__ = ("_entries", "_store", "_ttl")

    def __init__(self, store: JobStore, ttl_s: float = 0.25) -> None:
        self._store = store
        self._ttl = ttl_s
        self._entries: dict[str, tuple[float, JobRecord, JobSpec]] = {}

    async def get(self, job_id: str) -> tuple[JobRecord, JobSpec] | None:
        """The job and its spec, at most `ttl_s` old; None when it does not exist."""
        now = time.monotonic()
        entry = self._entries.get(job_id)
        if entry is not None and now - entry[0] < self._ttl:
            return entry[1], entry[2]
        record = await self._store.get_job(job_id)
        if record is None:
            self._entries.pop(job_id, None)
            return None
        spec = entry[2] if entry is not None else JobSpec.loads(record.spec)
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[job_id] = (now, record, spec)
        return record, spec

    def put(self, record: JobRecord) -> None:
        """Refreshes an entry with a record this server just wrote."""
        self._entries[record.job_id] = (time.monotonic(), record, JobSpec.loads(record.spec))

    def forget(self, job_id: str) -> None:
        """Drops the entry of a job this server just deleted."""
        self._entries.pop(job_id, None)
