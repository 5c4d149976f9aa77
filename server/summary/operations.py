"""Background operations of one server (erasures that must scan a whole store), in memory.

An operation is an asyncio task plus what GetOperation reports: its kind, state and
progress. The call that starts one answers at once with it. Operations live in this
process only: they are not shared between replicas and do not survive a restart, which is
safe because every operation started here is idempotent and re-issuing its call resumes
the work from the start. An ended operation is kept `keep_s` (an hour) for GetOperation,
then forgotten. Nothing here holds a subject's identifier once the operation has ended:
the work's closure (which may hold the ids being erased) is dropped with its task.

Shared by Summary and TemplateInduction (both import it from here).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum

from server.runtime.errors import NotFound
from server.runtime.logs import get_logger

__all__ = ["OperationRecord", "OperationState", "Operations"]

_log = get_logger("operations")


class OperationState(Enum):
    """Where an operation is."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(slots=True)
class OperationRecord:
    """What GetOperation reports; the work updates `done` and `total` as it goes."""

    operation_id: str
    kind: str
    state: OperationState = OperationState.RUNNING
    done: int = 0
    total: int = 0
    error: str = ""
    ended_at: float | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)


class Operations:
    """The operations this process started, by id."""

    def __init__(
        self, *, keep_s: float = 3600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._keep_s = keep_s
        self._clock = clock
        self._ops: dict[str, OperationRecord] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def start(
        self, kind: str, work: Callable[[OperationRecord], Awaitable[None]]
    ) -> OperationRecord:
        """Runs `work(record)` in the background; returns its record (RUNNING) at once."""
        self._forget_old()
        record = OperationRecord(operation_id=uuid.uuid4().hex, kind=kind)
        self._ops[record.operation_id] = record
        task = asyncio.get_running_loop().create_task(self._run(record, work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return record

    async def _run(
        self, record: OperationRecord, work: Callable[[OperationRecord], Awaitable[None]]
    ) -> None:
        try:
            await work(record)
            record.state = OperationState.DONE
        except asyncio.CancelledError:
            record.state, record.error = OperationState.FAILED, "the server stopped"
            raise
        except Exception as exc:  # reported through GetOperation, never raised to nobody
            record.state = OperationState.FAILED
            record.error = f"{type(exc).__name__}: {exc}"
            _log.warning("operation failed", kind=record.kind, error=type(exc).__name__)
        finally:
            record.ended_at = self._clock()
            record.finished.set()

    def get(self, operation_id: str) -> OperationRecord:
        """The operation; NotFound when this process does not know it (any more)."""
        self._forget_old()
        record = self._ops.get(operation_id)
        if record is None:
            raise NotFound(f"operation {operation_id!r} not found on this server")
        return record

    async def wait(self, operation_id: str) -> OperationRecord:
        """Returns once the operation has ended (DONE or FAILED)."""
        record = self.get(operation_id)
        await record.finished.wait()
        return record

    async def stop(self) -> None:
        """Cancels every running operation (the server is stopping)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _forget_old(self) -> None:
        now = self._clock()
        old = [
            i
            for i, r in self._ops.items()
            if r.ended_at is not None and now - r.ended_at > self._keep_s
        ]
        for operation_id in old:
            del self._ops[operation_id]
