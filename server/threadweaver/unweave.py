"""UnweaveThreads and UnweaveMailbox: removal from the union-find, and its operations.

A removal is acknowledged once every read is exact (`rebuild.rebuild` has rewritten the
conversations around the removed threads), except for a unified thread past the spam guard
(more member threads than `default_max_threads`): there the removed threads' mappings are
deleted at once (so no read lists or resolves them) and the rebuild runs in the background,
reported by `GetOperation`. Either way an `Operation` is returned, DONE only when nothing of
the removed threads is left: the rebuild finished, the retired UT ids forgotten after the
grace period that outlives any weave that may still be writing into them, and the SQLite
file scrubbed.

Operations are kept in this process's memory: `GetOperation` answers on the server that
started one (a restart forgets it; retrying the removal resumes anything unfinished, since
every step is idempotent).
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from server.runtime.errors import NotFound
from server.runtime.logs import get_logger
from server.threadweaver.closure import walk
from server.threadweaver.rebuild import Rebuilt, rebuild
from storage.ports import ThreadKey, ThreadStore

__all__ = ["OperationView", "Unweaving"]

_log = get_logger("threadweaver.unweave")
_NO_LIMIT = 1 << 30
_KEEP_DONE = 1000  # finished operations remembered for GetOperation


@dataclass(slots=True)
class OperationView:
    """One background removal as `GetOperation` reports it."""

    operation_id: str
    kind: str
    state: str = "running"
    """``running``, ``done`` or ``failed``."""
    done: int = 0
    total: int = 0
    error: str = ""
    rows_read: int = 0
    round_trips: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def end(self, state: str, error: str = "") -> None:
        """Marks the operation finished (``done`` or ``failed``)."""
        self.state, self.error = state, error
        self.ended.set()


class Unweaving:
    """Removes threads from the union-find over one `ThreadStore` (module doc)."""

    def __init__(self, store: ThreadStore, *, max_threads: int, grace_s: float) -> None:
        self._store = store
        self._max_threads = max_threads
        self._grace_s = grace_s
        self._ops: dict[str, OperationView] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def operation(self, operation_id: str) -> OperationView:
        """The operation `operation_id`; NotFound when this server never started it."""
        op = self._ops.get(operation_id)
        if op is None:
            raise NotFound(f"no operation {operation_id!r} on this server")
        return op

    async def wait(self, operation_id: str) -> OperationView:
        """Returns once the operation is no longer running (for tests and `loom load`)."""
        op = self.operation(operation_id)
        await op.ended.wait()
        return op

    async def mailbox(self, gid: str) -> OperationView:
        """Every thread of `gid` (woven with edges, or listed by the engine) removed."""
        threads = await self._store.get_mailbox_threads(gid)
        return await self.threads(threads, kind="unweave_mailbox")

    async def threads(self, threads: Sequence[ThreadKey], *, kind: str) -> OperationView:
        """Removes `threads` (unknown ones are ignored); see the module doc."""
        op = self._new(kind)
        gone = sorted(set(threads))
        store = self._store
        uts = await store.get_thread_uts(gone)
        seeds = set(uts.values())
        if not uts:
            # Unmapped: unknown, or a removal that stopped after deleting the mappings (past
            # the guard, or a crash): its edges still lead to the conversation to rebuild.
            edges = await store.get_thread_messages(gone)
            keys = sorted({k for held in edges.values() for k in held})
            found = await store.get_message_uts(keys) if keys else {}
            seeds = {m.ut for m in found.values()}
            if not seeds:
                await store.remove_thread_messages(gone)
                self._finish_later(op, Rebuilt())
                return op
        links = await walk(store, seeds, max_size=_NO_LIMIT)
        rows = await store.read_uts(sorted(links), None, self._max_threads + 1)
        op.total = len(rows.threads)
        if len(rows.threads) <= self._max_threads:
            done = await rebuild(store, seed_uts=seeds, removed=gone, progress=_progress(op))
            self._finish_later(op, done)
            return op
        # Past the guard: the removed threads leave every read now, the rest in background.
        await store.rehome([(t, None) for t in gone], [], [])
        self._spawn(self._background(op, seeds, gone))
        return op

    async def _background(
        self,
        op: OperationView,
        seeds: set[str],
        gone: list[ThreadKey],
    ) -> None:
        try:
            done = await rebuild(
                self._store,
                seed_uts=seeds,
                removed=gone,
                progress=_progress(op),
            )
        except Exception as exc:  # reported through GetOperation; a retry resumes it
            op.end("failed", str(exc))
            _log.warning("threadweaver.unweave_failed", operation=op.operation_id, error=str(exc))
            return
        await self._finish(op, done)

    def forget_later(self, done: Rebuilt) -> None:
        """Drops the retired marks of a weave's repair rebuild after the grace period."""
        if done.retired:
            self._spawn(self._forget(sorted(done.retired)))

    def _finish_later(self, op: OperationView, done: Rebuilt) -> None:
        self._spawn(self._finish(op, done))

    async def _finish(self, op: OperationView, done: Rebuilt) -> None:
        op.rows_read += done.rows_read
        op.round_trips += done.round_trips
        op.done = op.total = max(op.total, done.threads + done.removed)
        try:
            await self._forget(sorted(done.retired))
            await self._store.scrub()
        except Exception as exc:
            op.end("failed", str(exc))
            return
        op.end("done")

    async def _forget(self, retired: list[str]) -> None:
        if retired:
            await asyncio.sleep(self._grace_s)
            await self._store.forget_retired(retired)

    def _new(self, kind: str) -> OperationView:
        if len(self._ops) >= _KEEP_DONE:
            for key in [k for k, v in self._ops.items() if v.state != "running"][:100]:
                del self._ops[key]
        op = OperationView(operation_id=uuid.uuid4().hex, kind=kind)
        self._ops[op.operation_id] = op
        return op

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        # A fresh context: the request's deadline (a context variable) must not bound it.
        task = asyncio.get_running_loop().create_task(
            coro,
            context=contextvars.Context(),
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _progress(op: OperationView) -> _Progress:
    return _Progress(op)


class _Progress:
    def __init__(self, op: OperationView) -> None:
        self._op = op

    def __call__(self, done: int, total: int) -> None:
        self._op.done, self._op.total = done, max(total, self._op.total)
