"""Summary orchestration: read -> decode -> record -> encode -> compare-and-set, with retries.

Why optimistic concurrency and not a lock or an engine-side merge: the stored value is an
opaque compressed blob (DynamoDB cannot OR two bitmaps for us), events for one message arrive
from many servers at once, and conflicts are rare outside the first seconds of a large send.
So each RecordDeliveryEvents reads the row and its version, applies its events to the decoded
summary and writes it back only if the version is unchanged. A loser re-reads and re-applies:
the summary is a grow-only CRDT (see ``model.py``), so re-applying is always correct and a
replayed event is a no-op, which also makes a retried or duplicated RPC harmless.

Two refinements keep the retry loop short:

* within one server, writers of the same message queue on a per-message asyncio lock, so
  conflicts only come from *other* servers (20 concurrent batches for one hot message would
  otherwise burn each other's retries);
* a batch that changes nothing (``record`` returns False) is not written at all.

Backoff after a lost race is "full jitter" (uniform in [0, min(cap, base * 2^attempt)]), so
two servers that collided do not collide again in lock-step. After `max_attempts` lost races
the call fails UNAVAILABLE: retrying later is the right thing for the caller to do.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from server.runtime.deadlines import concurrently
from server.runtime.errors import CorruptData, NotFound, Unavailable
from server.summary.model import (
    DELETED,
    DeliveryEvent,
    MessageSummary,
    SummaryView,
    is_deleted,
)
from server.summary.operations import OperationRecord, Operations
from server.summary.recipients import SketchParams
from server.summary.settings import SummarySettings
from storage.ports import StoredSummary, SummaryStore

__all__ = ["RecordOutcome", "SummaryService"]

_DELETE_CONCURRENCY = 32
"""Messages one DeleteMessageSummaries call marks at once (each a read and a conditional
write): 1,000 ids take ~32 round-trip pairs, not 1,000."""


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    """What one RecordDeliveryEvents did: whether it wrote, and how many attempts it took."""

    written: bool
    attempts: int
    version: int
    ignored: bool = False
    """The message's summary was deleted: its events were ignored."""


class _KeyedLocks:
    """One asyncio.Lock per key, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextmanager
    def held(self, key: str) -> Iterator[asyncio.Lock]:
        """The lock of `key` (the caller acquires it); forgotten once no block references it."""
        lock, refs = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, refs + 1)
        try:
            yield lock
        finally:
            lock, refs = self._locks[key]
            if refs == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, refs - 1)


class SummaryService:
    """Records delivery events into, and reads, per-message summaries kept in a SummaryStore."""

    @classmethod
    def from_settings(cls, store: SummaryStore, s: SummarySettings) -> SummaryService:
        """The service as the settings configure it (the server's, and a load's erasure)."""
        return cls(
            store,
            params=SketchParams(
                exact_threshold=s.exact_threshold,
                exact_byte_budget=s.exact_byte_budget,
                cpc_lg_k=s.cpc_lg_k,
            ),
            max_attempts=s.max_retries,
            retry_base_s=s.retry_base_s,
            retry_max_s=s.retry_max_s,
        )

    def __init__(
        self,
        store: SummaryStore,
        *,
        params: SketchParams | None = None,
        max_attempts: int = 10,
        retry_base_s: float = 0.002,
        retry_max_s: float = 0.1,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._params = params or SketchParams()
        self._max_attempts = max(1, max_attempts)
        self._retry_base_s = retry_base_s
        self._retry_max_s = retry_max_s
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._locks = _KeyedLocks()
        self.operations = Operations()
        """This server's background erasures (GetOperation reads them)."""
        self._erasing: dict[str, int] = {}
        """Recipient ids of erasures still running, each with how many erase it: reads
        leave them out already."""
        self.erase_page = 100
        """Summaries an erasure reads per store call."""

    @property
    def params(self) -> SketchParams:
        """Sketch parameters of summaries this service creates (old rows keep their own)."""
        return self._params

    async def record(self, message_id: str, events: Sequence[DeliveryEvent]) -> RecordOutcome:
        """Apply `events` to the message's summary; creates it on the first event.

        Raises Unavailable when `max_attempts` conditional writes in a row lost their race.
        """
        with self._locks.held(message_id) as lock:
            async with lock:
                return await self._record_unlocked(message_id, events)

    async def _record_unlocked(
        self, message_id: str, events: Sequence[DeliveryEvent]
    ) -> RecordOutcome:
        for attempt in range(1, self._max_attempts + 1):
            stored = await self._store.get(message_id)
            if stored is not None and is_deleted(stored.data):
                return RecordOutcome(False, attempt, stored.version, ignored=True)
            summary = (
                self._decode(message_id, stored)
                if stored is not None
                else MessageSummary(self._params)
            )
            changed = summary.record(events)
            if stored is not None and not changed:
                return RecordOutcome(written=False, attempts=attempt, version=stored.version)
            expected = stored.version if stored is not None else None
            if await self._store.put_if_version(message_id, summary.encode(), expected):
                return RecordOutcome(written=True, attempts=attempt, version=(expected or 0) + 1)
            if attempt < self._max_attempts:
                await self._sleep(self._backoff(attempt))
        raise Unavailable(
            f"summary of {message_id!r} is contended: {self._max_attempts} conditional writes "
            "lost their race; retry later"
        )

    def _backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2^(attempt-1))]."""
        ceiling = min(self._retry_max_s, self._retry_base_s * (1 << min(attempt - 1, 20)))
        return self._rng.uniform(0.0, ceiling)

    async def view(self, message_id: str) -> SummaryView:
        """The message's per-status summary; NotFound when no event was ever recorded."""
        stored = await self._store.get(message_id)
        if stored is None or is_deleted(stored.data):
            raise NotFound(f"no delivery events recorded for message {message_id!r}")
        summary = self._decode(message_id, stored)
        if self._erasing:
            summary.forget(self._erasing.keys())
        return summary.view()

    async def delete_messages(self, message_ids: Sequence[str]) -> None:
        """Replaces each message's summary with the deletion marker (idempotent).

        A marker, not a row delete: a writer that read the summary before the deletion
        loses its compare-and-set and then sees the marker, and a late event never starts
        a fresh summary. An id never recorded is marked too (its events may still come).
        """
        distinct = list(dict.fromkeys(message_ids))
        for start in range(0, len(distinct), _DELETE_CONCURRENCY):
            part = distinct[start : start + _DELETE_CONCURRENCY]
            await concurrently(*(self._delete(message_id) for message_id in part))

    async def _delete(self, message_id: str) -> None:
        with self._locks.held(message_id) as lock:
            async with lock:
                await self._delete_unlocked(message_id)

    async def _delete_unlocked(self, message_id: str) -> None:
        for attempt in range(1, self._max_attempts + 1):
            stored = await self._store.get(message_id)
            if stored is not None and is_deleted(stored.data):
                return
            expected = None if stored is None else stored.version
            if await self._store.put_if_version(message_id, DELETED, expected):
                return
            if attempt < self._max_attempts:
                await self._sleep(self._backoff(attempt))
        raise Unavailable(f"summary of {message_id!r} is contended; retry the deletion later")

    async def erase_recipients(self, recipient_ids: Sequence[str]) -> OperationRecord:
        """Erases recipients from every summary's exact sets, in the background.

        Returns at once with the operation; this server's reads leave the ids out from then
        on. The operation walks every summary a page at a time, writes back each one that
        held an id (compare-and-set, re-read on a lost race) and scrubs the store at the end.
        Idempotent: a second erasure of the same ids finds nothing left to remove.
        """
        ids = frozenset(recipient_ids)
        for rid in ids:
            self._erasing[rid] = self._erasing.get(rid, 0) + 1

        async def work(op: OperationRecord) -> None:
            try:
                await self._erase(ids, op)
            finally:
                for rid in ids:
                    left = self._erasing[rid] - 1
                    if left:
                        self._erasing[rid] = left
                    else:
                        del self._erasing[rid]

        return self.operations.start("erase_recipients", work)

    async def _erase(self, ids: frozenset[str], op: OperationRecord) -> None:
        cursor: str | None = None
        while True:
            rows, cursor = await self._store.page_after(cursor, self.erase_page)
            for message_id, stored in rows:
                if not is_deleted(stored.data) and self._decode(message_id, stored).forget(ids):
                    with self._locks.held(message_id) as lock:
                        async with lock:
                            await self._forget_unlocked(message_id, ids)
            op.done += len(rows)
            if cursor is None:
                break
        op.total = op.done
        await self._store.scrub()

    async def _forget_unlocked(self, message_id: str, ids: frozenset[str]) -> None:
        for attempt in range(1, self._max_attempts + 1):
            stored = await self._store.get(message_id)
            if stored is None or is_deleted(stored.data):
                return
            summary = self._decode(message_id, stored)
            if not summary.forget(ids):
                return
            if await self._store.put_if_version(message_id, summary.encode(), stored.version):
                return
            if attempt < self._max_attempts:
                await self._sleep(self._backoff(attempt))
        raise Unavailable(f"summary of {message_id!r} is contended; retry the erasure later")

    @staticmethod
    def _decode(message_id: str, stored: StoredSummary) -> MessageSummary:
        try:
            return MessageSummary.decode(stored.data)
        except ValueError as exc:
            raise CorruptData(f"summary of {message_id!r} does not decode: {exc}") from exc
