"""Iterator's job-state port: jobs, task markers, counters, the chunk ledger and the pace
(the rate limiter's state; its arithmetic is `server.iterator.pacing`'s).

Every write that must not happen twice is a conditional write on a version or a sequence
number, so at-least-once queues and many workers on many replicas never count twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from storage.ports.iteration_source import Key

__all__ = [
    "ChunkRecord",
    "ChunkState",
    "JobRecord",
    "JobStateName",
    "JobStore",
    "LedgerSummary",
    "Step",
    "TaskRecord",
]


JobStateName = Literal["running", "paused", "completed", "cancelled", "failed"]
"""A job's state as stored (the gRPC enum is the handler's business)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    """One iteration job; replaced whole by compare-and-set on `version`."""

    job_id: str
    created_ms: int
    spec: str
    """The domain's description of the job (scope, emitted level, ...); opaque here."""
    state: JobStateName
    rate: int
    """Objects per second across every worker (0 = unlimited)."""
    paused_by: str
    """Who paused it: "" when not paused, "user", or "source" (the database was down)."""
    error: str
    finished_ms: int
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord:
    """A range of one level to read: the unit of work, its marker and its outcome.

    Messages only name a task and a step (`seq`); this record is the truth. A step reads
    one chunk after `after` and is committed by `JobStore.commit_step` only if `seq` still
    holds what the worker read (the seed's work de-duplication, as a conditional write).
    """

    task_id: str
    level: int
    parents: tuple[int, ...]
    """Sorted parent ids of a children read; empty for a bounded read."""
    first: Key
    """Bounded read: first id key (inclusive)."""
    last: Key
    """Bounded read: last id key (inclusive)."""
    after: Key
    """The marker: last position read (empty: nothing read yet)."""
    upto: Key
    """Last position of the range, inclusive (empty: none); a split lowers it."""
    seq: int
    """Steps committed so far."""
    done: bool
    rows: int
    """Rows read since the marker entered its current parent (all rows, for bounded
    reads): what tells a large parent, to be split, from a small one."""
    started_ms: int
    spawned: tuple[str, ...]
    """Tasks created by the last committed step (re-announced if that step's messages were
    lost)."""


ChunkState = Literal["ready", "leased", "delivered", "acked"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkRecord:
    """One emitted chunk of the ledger: the objects one step read, under a stable id."""

    chunk_id: str
    width: int
    """Integers per position in `keys` (the parent id first, for children reads)."""
    keys: bytes
    """The objects' positions, packed by the domain (opaque here)."""
    count: int
    state: ChunkState
    lease_until_ms: int
    """While leased: when it becomes available again (a re-send under the same id)."""
    sends: int
    acked_keys: bytes
    """Objects of this chunk acknowledged one by one so far (packed by the domain)."""
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """What one committed step writes, atomically: the task's new state, the tasks it
    creates, the chunk it emits and the counters it moves."""

    task: TaskRecord
    new_tasks: Sequence[TaskRecord]
    chunk: ChunkRecord | None
    counters: Mapping[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerSummary:
    """Completion as the ledger sees it, counted record by record."""

    tasks: int
    tasks_open: int
    chunks: int
    chunks_unsettled: int
    """Chunks not yet delivered (or acknowledged, for jobs that need acks)."""
    objects: int


class JobStore(Protocol):
    """Iterator job state: jobs, task markers, counters, the chunk ledger and the pace.

    Every write that must not happen twice is conditional: `commit_step` on the task's
    `seq`, `update_job` on the job's version, leases and settlements on the chunk's state,
    `set_pace` on the pace it replaces. Counters move only inside those writes, so they
    never count a duplicate.
    """

    async def create_job(
        self, job: JobRecord, root: TaskRecord, counters: Mapping[str, int]
    ) -> None:
        """Stores a new job, its first task and its initial counters together."""
        ...

    async def get_job(self, job_id: str) -> JobRecord | None:
        """The job, or None."""
        ...

    async def list_jobs(self, limit: int, before: tuple[int, str] | None) -> list[JobRecord]:
        """Up to `limit` jobs ordered by (created_ms, job_id) descending, strictly before
        `before` when given."""
        ...

    async def active_jobs(self) -> list[JobRecord]:
        """Every job that is running or paused."""
        ...

    async def update_job(self, job: JobRecord, expected_version: int) -> bool:
        """Replaces the job (version becomes expected + 1) iff its version is `expected`."""
        ...

    async def get_task(self, job_id: str, task_id: str) -> TaskRecord | None:
        """The task, or None."""
        ...

    async def open_tasks(self, job_id: str) -> list[TaskRecord]:
        """Every task of the job that is not done (for re-sending work a queue lost)."""
        ...

    async def commit_step(self, job_id: str, step: Step, expected_seq: int) -> bool:
        """Writes `step` iff the task's stored seq is `expected_seq` (else nothing, False).

        New tasks and the chunk are created, counters incremented by `step.counters`, all
        in one atomic write.
        """
        ...

    async def counters(self, job_id: str) -> dict[str, int]:
        """Every counter of the job (missing ones are zero)."""
        ...

    async def add_counters(self, job_id: str, deltas: Mapping[str, int]) -> None:
        """Increments counters (statistics that need no de-duplication)."""
        ...

    async def lease_chunks(
        self, job_id: str, *, now_ms: int, lease_ms: int, max_objects: int, max_chunks: int
    ) -> list[ChunkRecord]:
        """Leases available chunks (ready, or leased with lease_until <= now): each becomes
        leased until now + lease_ms and its `sends` grows by one. A chunk is leased by one
        caller at a time. Stops at `max_chunks` or once `max_objects` are reached (at least
        one chunk when any is available); an adapter may stop sooner (one page, one
        transaction of its engine)."""
        ...

    async def settle_chunks(
        self,
        job_id: str,
        chunk_ids: Sequence[str],
        state: ChunkState,
        counts: Mapping[str, int] | None = None,
    ) -> tuple[int, int]:
        """Moves chunks that are not yet delivered/acked to `state` ("delivered" or "acked");
        returns (chunks, objects) newly settled and adds them to the counters
        ``<state>_chunks`` / ``<state>_objects`` in the same write. Unknown ids are ignored.
        `counts` (chunk id -> object count, as leased) may spare the adapter a read; a count
        that is not the chunk's is never applied."""
        ...

    async def leased_chunks(self, job_id: str, limit: int) -> list[ChunkRecord]:
        """Chunks sent and not settled (for acknowledging objects by id)."""
        ...

    async def save_chunk_acks(self, job_id: str, chunk: ChunkRecord, expected_version: int) -> bool:
        """Stores `chunk.acked_keys` iff the chunk's version is `expected_version`."""
        ...

    async def ledger(self, job_id: str, *, settled: ChunkState) -> LedgerSummary:
        """Counts the job's task and chunk records; unsettled = not in `settled` state."""
        ...

    async def get_pace(self, job_id: str) -> float | None:
        """The job's pace: the rate limiter's state (a time in ms, 0.0 until first set), or
        None when the job does not exist. The domain's GCRA reads and sets it."""
        ...

    async def set_pace(self, job_id: str, pace_ms: float, *, expected_ms: float) -> bool:
        """Stores `pace_ms` iff the stored pace is still `expected_ms` (compare-and-set,
        atomic against every other writer of any process); False when it moved or the job
        does not exist. Never raises for a lost race, only for engine faults."""
        ...

    async def delete_job(self, job_id: str) -> int:
        """Removes every record of the job: its tasks, counters, chunks (and their keys), its
        pace and the job record itself, the job record last, so a call interrupted part way
        leaves the job listed and a retry removes the rest. Returns the records removed (0
        for an unknown job: not an error). The caller decides whether the job may go."""
        ...

    async def close(self) -> None:
        """Releases connections."""
