"""The Iterator's settings: the source database, its hierarchy, the pipeline's knobs.

Loaded with every other setting by `server.config` (``[iterator]``, ``[[iterator.levels]]``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_LEVELS", "IteratorLevel", "IteratorSettings"]


@dataclass(frozen=True, slots=True)
class IteratorLevel:
    """One level of the iterated hierarchy (``[[iterator.levels]]``, top level first)."""

    name: str = ""
    """What callers call it (``level`` in StartIteration), e.g. "file"."""
    table: str = ""
    """Its table."""
    id_column: str = ""
    """Its integer id column (or give ``id_columns``)."""
    id_columns: tuple[str, ...] = ()
    """A composite key, compared as a row value ``(a, b) > (?, ?)``; the last level only."""
    parent_column: str = ""
    """The column holding the parent's id (empty for the top level)."""
    where: str = ""
    """An SQL condition on this table's rows that count ("valid" rows: ``deleted = 0``)."""

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The id columns, whichever way they were given."""
        return self.id_columns or ((self.id_column,) if self.id_column else ())


DEFAULT_LEVELS = (
    IteratorLevel("enterprise", "enterprise", "id", where="deleted = 0"),
    IteratorLevel("user", "users", "id", parent_column="enterprise_id", where="deleted = 0"),
    IteratorLevel("file", "file", "id", parent_column="user_id", where="deleted = 0"),
    IteratorLevel("version", "file_version", "id", parent_column="file_id", where="deleted = 0"),
)
"""Box's hierarchy: enterprise -> user -> file -> version (`storage/sql/schema.py`)."""


@dataclass(frozen=True, slots=True)
class IteratorSettings:
    """Iterator: the source database, its hierarchy and the pipeline's knobs."""

    source_url: str = ""
    """SQLAlchemy async URL of the iterated database: ``sqlite+aiosqlite:///path``,
    ``postgresql+asyncpg://u:p@host/db``, ``mysql+aiomysql://u:p@host/db`` (the schemes of
    `storage.engines.ITERATION_SOURCES`). Empty: an embedded SQLite file
    ``iterator-source.sqlite3`` in the data directory with the default schema."""
    levels: tuple[IteratorLevel, ...] = DEFAULT_LEVELS
    """The hierarchy, top level first (``[[iterator.levels]]``)."""
    workers: int = 4
    """Worker tasks per server; every replica's workers share the queues."""
    large_range_threshold: int = 250_000
    """Rows of one parent after which the rest of it is split into ranges read in parallel."""
    steal_after_s: float = 5.0
    """A split range still running after this long is split again (work stealing)."""
    target_chunk_s: float = 0.05
    """Seconds one chunk read should take; each worker's LIMIT adapts to it."""
    min_chunk: int = 100
    """Smallest LIMIT of a chunk read."""
    max_chunk: int = 10_000
    """Largest LIMIT of a chunk read (a chunk is one ledger item: bounded). Each chunk costs a
    commit, a share of a lease and of a settlement and a stream message whatever its size,
    so on a fast source larger chunks are faster: 10,000 two-integer keys are 160 KB, well
    inside a DynamoDB item."""
    initial_chunk: int = 1000
    """LIMIT of a worker's first read of a level."""
    visibility_timeout_s: float = 30.0
    """A taken work item not finished within this reappears for another worker."""
    hold_steps: int = 16
    """Steps a worker takes on one range while holding its work item (within a third of
    the visibility timeout) before handing the rest back to the queue."""
    fanout: int = 4
    """Children tasks one step creates for the parents it found (1..32): their children
    are read in parallel by different workers and replicas."""
    ack_timeout_s: int = 30
    """Default seconds a delivered chunk may stay unacknowledged (require_ack)."""
    max_stream_batch: int = 5000
    """Default most objects per StreamObjects message."""
    poll_interval_s: float = 0.05
    """Idle workers and streams look for new work this often."""
    check_interval_s: float = 0.25
    """How often each server checks its running jobs for completion."""
    pause_poll_s: float = 1.0
    """A paused job's work item is looked at again after this long."""
    source_probe_s: float = 1.0
    """While the source is down, how often it is probed (jobs resume when it answers)."""
    resend_after_s: float = 120.0
    """A running job whose counters have not moved for this long has the current step of
    each of its open ranges sent again (copies are dropped by the marker check): work whose
    message the queue lost — sent while the queue was down, or held by a queue that
    restarted empty — still gets done. Keep it well above the visibility timeout."""
    finished_job_retention_s: float = 604_800.0
    """A finished job (completed, failed or cancelled) is deleted, with its ledger, this
    long after it finished (default 7 days); 0 keeps finished jobs until DeleteJob."""
    retention_sweep_s: float = 60.0
    """How often each server looks for finished jobs past their retention."""
