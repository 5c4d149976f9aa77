"""WatchInbox and GetInboxChanges: an inbox's changes, live and resumable, from any replica.

The changes themselves are the store's change log (`storage.ports.inbox_changes`): every
write logs what it changed, per inbox, in the store every replica shares. A stream is a
reader of one inbox's log that waits, between reads, for a wake-up:

- **One tail per process.** `ChangeTail` polls the whole log (`changed_inboxes`) every
  `watch_poll_s` while the process holds a watcher, and wakes the watchers of the inboxes it
  names. Its cost is one small read per poll per process, whatever the number of watchers
  (an idle watcher costs no store read at all), and it works across processes and replicas
  alike because the log is in the store: the processes of ``loom serve --workers N`` and the
  replicas of a deployment each tail it. No broker, no extra process.
- **Reads are exact.** A woken watcher reads its inbox's log strictly after the position it
  last sent, so the stream has no gap and no repeat whatever the wake-ups (a spurious one
  reads nothing). It subscribes before its first read, so no change slips between the two.
- **Bounded memory.** A watcher reads at most `watch_batch` changes at a time and reads no
  more until the handler has written them; a client that stops reading blocks the handler's
  write, which gives up after `watch_slow_consumer_s` and ends the stream UNAVAILABLE (reason
  RESUME). Nothing is dropped silently: the client resumes from its last token.
- **Drain.** `drain()` ends every stream UNAVAILABLE (reason RESUME) so clients reconnect
  elsewhere with their tokens before the server stops.

Each event carries the inbox's unread count, read once per batch after the batch's changes
were read: exact for the batch's newest event, at least as late for the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from server.inbox import watchtoken
from server.inbox.settings import InboxSettings
from server.inbox.watchtoken import Resume
from server.runtime.errors import ResumeRequired, ResyncRequired
from server.runtime.logs import get_logger
from storage.clock import now_ms
from storage.ports import InboxChange, InboxStore, LoggedChange

__all__ = ["ChangeTail", "ChangesPage", "Event", "Watching"]

_log = get_logger("inbox.watch")
_TAIL_LIMIT = 5_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One event of a stream: a change (None for the SYNCED marker) and its token."""

    resume_token: str
    change: InboxChange | None
    changed_at_ms: int
    unread_count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangesPage:
    """A page of GetInboxChanges."""

    events: list[Event]
    next_token: str
    has_more: bool
    unread_count: int


class _Watcher:
    __slots__ = ("erased", "wake")

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.erased = False


class ChangeTail:
    """The process's one reader of the whole change log (module docstring)."""

    def __init__(self, store: InboxStore, settings: InboxSettings) -> None:
        self._store = store
        self._poll = settings.watch_poll_s
        self._retention_ms = int(settings.change_retention_s * 1000)
        self._trim_every = settings.change_trim_interval_s
        self._watchers: dict[str, set[_Watcher]] = {}
        self._task: asyncio.Task[None] | None = None
        self._draining = False
        self.events_sent = 0
        self.lag_ms: Callable[[float], None] = lambda _: None

    @property
    def draining(self) -> bool:
        """Whether the server is draining (every stream ends)."""
        return self._draining

    @property
    def watching(self) -> int:
        """Streams open in this process."""
        return sum(len(w) for w in self._watchers.values())

    @contextlib.contextmanager
    def subscribe(self, inbox_id: str) -> Iterator[_Watcher]:
        """A watcher of `inbox_id` (its wake-up), for the `with` block's life."""
        watcher = _Watcher()
        self._watchers.setdefault(inbox_id, set()).add(watcher)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="inbox-tail")
        try:
            yield watcher
        finally:
            group = self._watchers.get(inbox_id)
            if group is not None:
                group.discard(watcher)
                if not group:
                    del self._watchers[inbox_id]

    def erased(self, inbox_id: str) -> None:
        """Tells this process's watchers of `inbox_id` that it was erased (DeleteInbox logs
        nothing naming the inbox, so only the server that erased it can say so)."""
        for watcher in self._watchers.get(inbox_id, ()):
            watcher.erased = True
            watcher.wake.set()

    def drain(self) -> None:
        """Ends every stream (they raise ResumeRequired at their next wake-up, now)."""
        self._draining = True
        for group in self._watchers.values():
            for watcher in group:
                watcher.wake.set()

    async def stop(self) -> None:
        """Stops polling."""
        self.drain()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        cursor: str | None = None
        next_trim = time.monotonic()
        while self._watchers:
            try:
                if cursor is None:
                    cursor = await self._store.change_head()
                names, cursor = await self._store.changed_inboxes(cursor, _TAIL_LIMIT)
                for name in names:
                    for watcher in self._watchers.get(name, ()):
                        watcher.wake.set()
                if time.monotonic() >= next_trim:
                    next_trim = time.monotonic() + self._trim_every
                    await self._store.trim_changes(now_ms() - self._retention_ms - 60_000)
            except Exception as exc:  # the engine is down: try again (from the same cursor)
                _log.warning("inbox.tail_failed", error=str(exc) or type(exc).__name__)
                names = []
                await asyncio.sleep(min(1.0, self._poll * 10))
            if len(names) == 0:
                await asyncio.sleep(self._poll)


class Watching:
    """WatchInbox's and GetInboxChanges' reads of the change log (module docstring)."""

    def __init__(
        self,
        store: InboxStore,
        settings: InboxSettings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self.tail = ChangeTail(store, settings)

    async def sync_token(self, inbox_id: str) -> str:
        """A token of "now" for `inbox_id` (ListInbox's sync_token; a stream's SYNCED)."""
        position = await self._store.change_head()
        return watchtoken.encode(Resume(position, self._now_ms()), inbox_id)

    def resume_point(self, inbox_id: str, token: str) -> Resume:
        """The position in `token`: ValueError when it is not a token of this inbox's;
        ResyncRequired when it is older than the log keeps."""
        resume = watchtoken.decode(token, inbox_id)
        if not self._store.position_valid(resume.position):
            raise ValueError("is not a resume token of this server's store")
        oldest = self._now_ms() - int(self._settings.change_retention_s * 1000)
        if resume.changed_at_ms < oldest:
            raise ResyncRequired(
                "the resume token is older than the change log keeps "
                f"({self._settings.change_retention_s:g} s): list the inbox again with "
                "ListInbox and watch from its sync_token"
            )
        return resume

    async def watch(self, inbox_id: str, resume: Resume | None) -> AsyncIterator[list[Event]]:
        """Batches of events: SYNCED first when there is no token, then every change after
        the position, live, until the server drains (ResumeRequired)."""
        batch = self._settings.watch_batch
        with self.tail.subscribe(inbox_id) as watcher:
            wake = watcher.wake
            if resume is None:
                resume = Resume(await self._store.change_head(), self._now_ms())
                count = await self._store.unread_count(inbox_id)
                token = watchtoken.encode(resume, inbox_id)
                yield [
                    Event(
                        resume_token=token,
                        change=None,
                        changed_at_ms=resume.changed_at_ms,
                        unread_count=count,
                    )
                ]
            position = resume.position
            while True:
                wake.clear()
                if watcher.erased:
                    watcher.erased = False
                    position = await self._store.change_head()
                    now = self._now_ms()
                    yield [
                        Event(
                            resume_token=watchtoken.encode(Resume(position, now), inbox_id),
                            change=InboxChange(inbox_id=inbox_id, kind="inbox_deleted"),
                            changed_at_ms=now,
                            unread_count=0,
                        )
                    ]
                logged = await self._store.read_changes(inbox_id, position, batch)
                if logged:
                    events = await self._events(inbox_id, logged)
                    yield events
                    self._sent(events)
                    position = logged[-1].position
                    if len(logged) == batch:
                        continue
                if self.tail.draining:
                    raise ResumeRequired(
                        "the server is shutting down: reconnect, to any replica, with the last "
                        "resume_token received"
                    )
                await wake.wait()

    async def changes(self, inbox_id: str, resume: Resume, page_size: int) -> ChangesPage:
        """The events after `resume`, oldest first, at most `page_size`."""
        logged = await self._store.read_changes(inbox_id, resume.position, page_size + 1)
        more = len(logged) > page_size
        logged = logged[:page_size]
        events = await self._events(inbox_id, logged)
        count = events[-1].unread_count if events else await self._store.unread_count(inbox_id)
        token = events[-1].resume_token if events else watchtoken.encode(resume, inbox_id)
        return ChangesPage(events=events, next_token=token, has_more=more, unread_count=count)

    async def stop(self) -> None:
        """Ends the streams and the tail."""
        await self.tail.stop()

    async def _events(self, inbox_id: str, logged: list[LoggedChange]) -> list[Event]:
        count = await self._store.unread_count(inbox_id)
        return [
            Event(
                resume_token=watchtoken.encode(Resume(c.position, c.changed_at_ms), inbox_id),
                change=c.change,
                changed_at_ms=c.changed_at_ms,
                unread_count=count,
            )
            for c in logged
        ]

    def _sent(self, events: list[Event]) -> None:
        now = self._now_ms()
        self.tail.events_sent += len(events)
        for e in events:
            self.tail.lag_ms(max(0, now - e.changed_at_ms))

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)
