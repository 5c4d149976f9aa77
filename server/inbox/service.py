"""Yammer's inbox over any `InboxStore`: fan-out on write, read-sort-filter, async trims.

- PostMessage is admitted before it is parsed (`admit`): a large post is refused at once
  while the fan-out queue is full, and a long recipient list is validated in a worker
  thread, so neither refused floods nor parsing hold the event loop.
- PostMessage: the sender's row is advanced as read and every distinct recipient's as
  unread (idempotent in the store: last_message_id only grows). Up to `sync_fanout_max`
  recipients are delivered within the call; more go to the bounded background stage under
  a delivery id derived from the whole request (thread_id, message_id, the sender, the
  recipient set), so a retry finds the same delivery, resumes it when it failed, and never
  delivers twice. One rule for both sizes: a post reusing (thread_id, message_id) for
  another sender or other recipients delivers to them too (a large one with a delivery of
  its own); inboxes that already hold the message change nothing.
- ListInbox: the whole inbox (bounded by trimming) is read, filtered and sorted here; an
  inbox seen above its cap is queued for a trim, as Yammer trimmed on read.
- GetUnreadCount: the materialized unread rows, never the inbox.
- Every delivery may schedule an async trim (probability p), which keeps even a
  never-read inbox near `max_entries`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from server.inbox.adoption import Adopter
from server.inbox.deletion import KIND, DeletionCounts, Phantoms, Sweeper, operation_id_for
from server.inbox.fanout import FanoutJob, FanoutStage
from server.inbox.listing import select_page
from server.inbox.model import (
    OFF_LOOP_RECIPIENTS,
    FanoutPlan,
    InboxFilter,
    MarkResult,
    Page,
    Post,
    PostResult,
    legacy_delivery_id_for,
    plan_fanout,
)
from server.inbox.pagetoken import Cursor
from server.inbox.settings import InboxSettings
from server.inbox.trimming import Trimmer
from server.inbox.watch import Watching
from server.runtime.deadlines import concurrently
from server.runtime.errors import FailedPrecondition, NotFound, ResourceExhausted
from storage.ports import DeliveryRecord, InboxOperation, InboxStore
from storage.slices import slices

__all__ = ["InboxService"]


class InboxService:
    """The Inbox domain; `start()` / `stop()` bracket its background workers."""

    def __init__(
        self,
        store: InboxStore,
        settings: InboxSettings,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self.trimmer = Trimmer(
            store,
            max_entries=settings.max_entries,
            probability=settings.trim_probability,
            queue_size=settings.trim_queue,
            workers=settings.trim_workers,
            scan_limit=settings.scan_limit,
            rng=rng,
        )
        self.fanout = FanoutStage(
            store,
            self.trimmer,
            workers=settings.fanout_workers,
            queue_size=settings.fanout_queue,
            chunk_size=settings.fanout_chunk,
            progress_interval_s=settings.progress_interval_s,
            rate_per_s=settings.fanout_rate_per_s,
            chunks_in_flight=settings.fanout_chunks_in_flight,
            clock=clock,
        )
        self.counts = DeletionCounts()
        self.phantoms = Phantoms(store, self.counts)
        self.sweeper = Sweeper(
            store,
            self.counts,
            page=settings.sweep_page,
            interval_s=settings.sweep_interval_s,
            settle_s=settings.delete_settle_s,
            progress_interval_s=settings.progress_interval_s,
            clock=clock,
        )
        self.watching = Watching(store, settings, clock)
        self.adopter = Adopter(
            store,
            self.fanout,
            stall_after_s=settings.stall_after_s,
            interval_s=settings.adopt_interval_s,
            now_ms=self.fanout.now_ms,
        )

    def start(self) -> None:
        """Starts the trim and fan-out workers and the adopter (inside the running loop)."""
        self.trimmer.start()
        self.fanout.start()
        self.adopter.start()
        self.sweeper.start()

    async def stop(self) -> None:
        """Stops adopting, then fan-outs (releasing them at their progress), then trims."""
        await self.watching.stop()
        await self.sweeper.stop()
        await self.adopter.stop()
        await self.fanout.stop()
        await self.trimmer.stop()
        await self.phantoms.stop()

    async def admit(
        self, thread_id: str, message_id: int, recipients: int, parse: Callable[[], Post]
    ) -> PostResult:
        """Sheds, parses, then posts: PostMessage as the handler hands it over.

        `parse` is the handler's translation of the request into a `Post` (validation and
        de-duplication included). It runs only once the post is admitted, and in a worker
        thread when the list is long (above `OFF_LOOP_RECIPIENTS`): for 300K ids it holds
        the GIL ~50-65 ms, which on the event loop stalled every other call.
        """
        self._refuse_if_saturated(thread_id, message_id, recipients)
        if recipients > OFF_LOOP_RECIPIENTS:
            post = await asyncio.to_thread(parse)
        else:
            post = parse()
        return await self.post(post)

    def _refuse_if_saturated(self, thread_id: str, message_id: int, recipients: int) -> None:
        """Refuses a large post at once when the fan-out queue is full.

        Called before the recipient list is validated or de-duplicated: under a flood of
        announcements, per-id work on refused posts would hold the event loop and starve
        GetUnreadCount (the bulkhead isolation test). A post whose key is running here is
        let through so its retry still learns its delivery id (a post reusing the key for
        other recipients is then refused by `_post_in_background`, once parsed).
        """
        if recipients <= self._settings.sync_fanout_max or self.fanout.has_room():
            return
        if not self.fanout.posting(thread_id, message_id):
            self.fanout.refused += 1
            raise ResourceExhausted("inbox fan-out queue is full; retry PostMessage later")

    async def post(self, post: Post) -> PostResult:
        """Delivers `post` (see the module docstring); a deleted thread is refused."""
        if await self._store.deleted_threads([post.thread_id]):
            raise FailedPrecondition(f"thread {post.thread_id!r} was deleted")
        sync_max = self._settings.sync_fanout_max
        if len(post.recipient_inbox_ids) > OFF_LOOP_RECIPIENTS:
            plan = await asyncio.to_thread(plan_fanout, post, sync_max=sync_max)
        else:
            plan = plan_fanout(post, sync_max=sync_max)
        if not plan.background:
            # The sender rides with the first chunk: a usual post is one store write.
            chunks = list(slices(plan.recipients, self._settings.fanout_chunk)) or [[]]
            for i, chunk in enumerate(chunks):
                sender = [plan.sender] if i == 0 else []
                await self._store.deliver(
                    post.thread_id, post.message_id, unread=chunk, read=sender
                )
                self.trimmer.on_delivered([*sender, *chunk])
            return PostResult(True, "", 1 + len(plan.recipients))
        return await self._post_in_background(post, plan)

    async def _deliver_sender(self, post: Post) -> None:
        await self._store.deliver(
            post.thread_id, post.message_id, unread=(), read=[post.sender_inbox_id]
        )
        self.trimmer.on_delivered([post.sender_inbox_id])

    async def _find_delivery(
        self, post: Post, plan: FanoutPlan
    ) -> tuple[str, DeliveryRecord | None]:
        """The delivery this post is a retry of (its id and stored record), else its own id.

        The request's own id first. Then the id earlier releases gave every post of
        (thread, message): that delivery is this post's only when it was the same request,
        i.e. the same sender and recipient count, and the same recipients while their list
        is stored (running or failed). A done one kept no list, so a matching retry runs it
        again for this request's recipients under its id (inboxes already holding the
        message change nothing): the retry finds its delivery and nobody is left out. (Of
        the same sender and count, a post reusing the key for other inboxes cannot be told
        from that retry: it reaches them under that id too.)
        """
        stored = await self._store.get_delivery(plan.delivery_id)
        if stored is not None:
            return plan.delivery_id, stored
        legacy_id = legacy_delivery_id_for(post.thread_id, post.message_id)
        legacy = await self._store.get_delivery(legacy_id)
        if (
            legacy is None
            or legacy.sender_inbox_id != plan.sender
            or legacy.total != len(plan.recipients)
        ):
            return plan.delivery_id, None
        if legacy.state == "done":
            return legacy_id, replace(legacy, done=0, state="running", error="")
        listed = await self._store.load_recipients(legacy_id)
        if listed is not None and not await _same_set(listed, plan.recipients):
            return plan.delivery_id, None
        return legacy_id, legacy

    async def _post_in_background(self, post: Post, plan: FanoutPlan) -> PostResult:
        recipients = plan.recipients
        delivery_id, stored = await self._find_delivery(post, plan)
        live = self.fanout.live(delivery_id)
        if live is not None:
            return PostResult(False, delivery_id, 1 + live.done)
        if stored is not None and stored.state == "done":
            return PostResult(True, delivery_id, 1 + stored.total)
        if not self.fanout.has_room():
            # Refuse before touching any inbox: the caller retries the whole post later.
            raise ResourceExhausted("inbox fan-out queue is full; retry PostMessage later")
        await self._deliver_sender(post)
        fresh = DeliveryRecord(
            delivery_id=delivery_id,
            thread_id=post.thread_id,
            message_id=post.message_id,
            sender_inbox_id=post.sender_inbox_id,
            total=len(recipients),
            done=0,
            state="running",
            error="",
            updated_at_ms=self.fanout.now_ms(),
        )
        record = stored or await self._store.create_delivery(fresh)
        if record.state == "done":
            return PostResult(True, delivery_id, 1 + record.total)
        # Resume from the stored prefix (0 when fresh) of the stored list: planning is
        # deterministic, but a list stored by an earlier release kept the request's order.
        if stored is not None and stored.done > 0:
            recipients = await self._store.load_recipients(delivery_id) or recipients
        record = replace(
            record,
            total=len(recipients),
            done=min(record.done, len(recipients)),
            state="running",
            error="",
            updated_at_ms=self.fanout.now_ms(),
        )
        live = self.fanout.live(delivery_id)
        if live is not None:  # a concurrent retry got there first
            return PostResult(False, delivery_id, 1 + live.done)
        # The recipients are stored before the post is acknowledged, so whichever server
        # survives can finish the delivery (server.inbox.adoption).
        await self._store.save_recipients(delivery_id, recipients)
        await self._store.save_delivery(record)
        live = self.fanout.live(delivery_id)
        if live is not None:
            return PostResult(False, delivery_id, 1 + live.done)
        accepted = self.fanout.submit(FanoutJob(record, recipients))
        return PostResult(False, delivery_id, 1 + accepted.done)

    async def get_delivery(self, delivery_id: str) -> DeliveryRecord:
        """The delivery's progress (a stalled one says it is waiting to be adopted)."""
        live = self.fanout.live(delivery_id)
        if live is not None:
            return live
        stored = await self._store.get_delivery(delivery_id)
        if stored is None:
            raise NotFound(f"delivery {delivery_id!r} does not exist")
        age_s = self._clock() - stored.updated_at_ms / 1000
        if stored.state == "running" and not stored.error and age_s > self._settings.stall_after_s:
            return replace(stored, error=f"no progress for {int(age_s)} s; a server will resume it")
        return stored

    async def list_inbox(
        self, inbox_id: str, flt: InboxFilter, page_size: int, after: Cursor | None
    ) -> Page:
        """One page, newest activity first, continuing strictly after `after`, with the
        token of a change-log position taken before it was read."""
        sync_token = await self.watching.sync_token(inbox_id)
        entries, pending = await concurrently(
            self._store.scan_inbox(inbox_id, self._settings.scan_limit),
            self._store.pending_deletions(),
        )
        if pending:
            # Rows of deleted threads not swept yet: left out before the page is chosen
            # (so it stays full and in order), and removed in the background.
            gone = {p.thread_id for p in pending}
            phantoms = [e for e in entries if e.thread_id in gone]
            if phantoms:
                entries = [e for e in entries if e.thread_id not in gone]
                self.phantoms.clean(inbox_id, phantoms)
        if len(entries) > self._settings.max_entries:
            self.trimmer.request(inbox_id)
        page = select_page(
            entries,
            inbox_id=inbox_id,
            flt=flt,
            after=after,
            page_size=page_size or self._settings.default_page_size,
        )
        return replace(page, sync_token=sync_token)

    async def unread_count(self, inbox_id: str) -> int:
        """Unread threads, from the materialized unread rows."""
        return await self._store.unread_count(inbox_id)

    async def mark(
        self, inbox_id: str, thread_ids: Sequence[str] | None, *, read: bool
    ) -> MarkResult:
        """Marks threads (every thread when None) read or unread; the count follows."""
        changed = await self._store.set_read(inbox_id, thread_ids, read=read)
        return MarkResult(changed, await self._store.unread_count(inbox_id))

    async def delete_threads(self, thread_ids: Sequence[str]) -> InboxOperation:
        """Deletes threads everywhere (`server.inbox.deletion`); answers their operation."""
        operation_id = operation_id_for(thread_ids)
        op = await self._store.get_operation(operation_id)
        if op is not None and op.state == "done":
            return op
        if op is None:
            op = InboxOperation(
                operation_id=operation_id,
                kind=KIND,
                state="running",
                done=0,
                total=0,
                error="",
                updated_at_ms=self.sweeper.now_ms(),
            )
            await self._store.save_operation(op)
        await self._store.mark_deleted(thread_ids, operation_id, self.sweeper.now_ms())
        self.counts.threads_deleted += len(set(thread_ids))
        self.sweeper.wake()
        return op

    async def get_operation(self, operation_id: str) -> InboxOperation:
        """A deletion operation's progress."""
        op = await self._store.get_operation(operation_id)
        if op is None:
            raise NotFound(f"operation {operation_id!r} does not exist")
        return op

    async def wait_operation(self, operation_id: str, timeout_s: float = 600.0) -> InboxOperation:
        """Waits until the operation is done (its rows physically gone); for tests and
        tools. TimeoutError after `timeout_s`."""
        async with asyncio.timeout(timeout_s):
            while True:
                op = await self.get_operation(operation_id)
                if op.state != "running":
                    return op
                self.sweeper.wake()
                await asyncio.sleep(0.05)

    async def remove_threads(self, inbox_id: str, thread_ids: Sequence[str]) -> MarkResult:
        """Drops threads from one inbox; a newer message brings a thread back."""
        removed = await self._store.remove_threads(inbox_id, thread_ids)
        self.counts.threads_removed += removed
        return MarkResult(removed, await self._store.unread_count(inbox_id))

    async def delete_inbox(self, inbox_id: str) -> int:
        """Erases an inbox: its rows, its unread count, the deliveries it sent. Returns when
        they are gone (and scrubbed from the files of an embedded engine); idempotent."""
        removed = await self._store.delete_inbox(inbox_id)
        self.counts.inboxes_deleted += 1
        self.watching.tail.erased(inbox_id)
        return removed


async def _same_set(listed: list[str], planned: list[str]) -> bool:
    """Whether a stored recipient list (in request order when 1.0.0 stored it) names the
    planned recipients; off the event loop when long."""
    if len(listed) != len(planned):
        return False
    if len(listed) > OFF_LOOP_RECIPIENTS:
        return await asyncio.to_thread(lambda: set(listed) == set(planned))
    return set(listed) == set(planned)
