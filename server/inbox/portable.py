"""Inbox's store as portable records (`server.portable`): inbox rows and deliveries; a load
keeps each row's newest message, as a later delivery would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from google.protobuf.message import Message
from loom.v1 import dump_pb2

from server.inbox.settings import InboxSettings
from server.portable.records import PAGE, Kind, ServiceData, as_record, same_service
from storage.ports import (
    DeliveryRecord,
    InboxStore,
    PortableInboxStore,
)

__all__ = ["InboxData"]


class InboxData:
    """Inbox's opened store, as `ServiceData`."""

    kinds: tuple[Kind, ...] = (
        Kind("deleted_threads", dump_pb2.InboxDeletedThreadRecord),
        Kind("inbox_entries", dump_pb2.InboxEntryRecord),
        Kind("deliveries", dump_pb2.DeliveryDumpRecord),
    )

    def __init__(self, store: PortableInboxStore, settings: InboxSettings) -> None:
        self.store = store
        self._listing_limit = max(settings.max_entries * 4, 10_000)

    async def scan(self) -> AsyncIterator[tuple[str, list[Message]]]:
        # The markers first, so a load refuses posts to those threads before any row lands.
        async for marks in self.store.scan_deleted_threads(PAGE):
            yield (
                "deleted_threads",
                [
                    dump_pb2.InboxDeletedThreadRecord(
                        thread_id=m.thread_id,
                        operation_id=m.operation_id,
                        deleted_at_ms=m.deleted_at_ms,
                    )
                    for m in marks
                ],
            )
        # Nothing of a deleted thread is exported (its rows may still await the sweep):
        # a load must not bring it back.
        async for rows in self.store.scan_entries(PAGE):
            deleted = await self.store.deleted_threads(list({e.thread_id for _, e in rows}))
            kept: list[Message] = [
                dump_pb2.InboxEntryRecord(
                    inbox_id=inbox,
                    thread_id=e.thread_id,
                    last_message_id=e.last_message_id,
                    is_read=e.is_read,
                )
                for inbox, e in rows
                if e.thread_id not in deleted
            ]
            if kept:
                yield ("inbox_entries", kept)
        async for page in self.store.scan_deliveries(PAGE):
            deleted = await self.store.deleted_threads(list({d.thread_id for d in page}))
            deliveries = [d for d in page if d.thread_id not in deleted]
            if not deliveries:
                continue
            yield (
                "deliveries",
                [
                    dump_pb2.DeliveryDumpRecord(
                        delivery_id=d.delivery_id,
                        thread_id=d.thread_id,
                        message_id=d.message_id,
                        sender_inbox_id=d.sender_inbox_id,
                        total=d.total,
                        done=d.done,
                        state=d.state,
                        error=d.error,
                        updated_at_ms=d.updated_at_ms,
                    )
                    for d in deliveries
                ],
            )

    async def subjects(self) -> AsyncIterator[str]:
        """Inbox ids: of every row, and of every fan-out's sender."""
        async for rows in self.store.scan_entries(PAGE):
            for inbox, _ in rows:
                yield inbox
        async for deliveries in self.store.scan_deliveries(PAGE):
            for d in deliveries:
                yield d.sender_inbox_id

    async def erase(self, subjects: Sequence[str]) -> None:
        """`DeleteInbox` of each: rows, unread count, the deliveries it sent."""
        for inbox_id in subjects:
            await self.store.delete_inbox(inbox_id)

    async def load(self, kind: str, records: Sequence[Message]) -> None:
        if kind == "deleted_threads":
            # Deleted on the target too: reads net them out at once, posts are refused, and
            # the target's sweep removes any row of them it already held.
            marks: dict[tuple[str, int], list[str]] = {}
            for m in (as_record(r, dump_pb2.InboxDeletedThreadRecord) for r in records):
                marks.setdefault((m.operation_id, m.deleted_at_ms), []).append(m.thread_id)
            for (operation_id, at_ms), threads in marks.items():
                await self.store.mark_deleted(threads, operation_id, at_ms)
            return
        if kind == "deliveries":
            for d in (as_record(r, dump_pb2.DeliveryDumpRecord) for r in records):
                await self.store.create_delivery(_delivery(d))
            return
        # One delivery per (thread, message, read flag): the newest message of a row wins,
        # and a row the target holds at that message or newer is left as it is.
        groups: dict[tuple[str, int, bool], list[str]] = {}
        for e in (as_record(r, dump_pb2.InboxEntryRecord) for r in records):
            groups.setdefault((e.thread_id, e.last_message_id, e.is_read), []).append(e.inbox_id)
        await asyncio.gather(
            *(
                self.store.deliver(thread, message, unread=[] if read else inboxes,
                                   read=inboxes if read else [])
                for (thread, message, read), inboxes in groups.items()
            )
        )  # fmt: skip

    async def differences(self, other: ServiceData, limit: int) -> list[str]:
        target = same_service(self, other)
        found: list[str] = []
        seen: set[str] = set()
        async for rows in self.store.scan_entries(PAGE):
            for inbox in {inbox for inbox, _ in rows} - seen:
                seen.add(inbox)
                mine = await self._listing(self.store, inbox)
                theirs = await self._listing(target.store, inbox)
                if mine != theirs:
                    found.append(f"inbox {inbox}: listing or unread count differs")
                    if len(found) >= limit:
                        return found
            if len(seen) > 1_000_000:
                seen.clear()  # bounded memory; an inbox seen twice is compared twice
        async for deliveries in self.store.scan_deliveries(PAGE):
            for d in deliveries:
                if await target.store.get_delivery(d.delivery_id) != d:
                    found.append(f"delivery {d.delivery_id} differs")
        return found[:limit]

    async def _listing(self, store: InboxStore, inbox: str) -> tuple[object, ...]:
        rows = await store.scan_inbox(inbox, self._listing_limit)
        # As ListInbox shows it: rows of deleted threads awaiting the sweep are not there.
        pending = {p.thread_id for p in await store.pending_deletions()}
        rows = [r for r in rows if r.thread_id not in pending]
        return (sorted(rows, key=lambda e: e.thread_id), await store.unread_count(inbox))

    async def close(self) -> None:
        await self.store.close()


def _delivery(d: dump_pb2.DeliveryDumpRecord) -> DeliveryRecord:
    if d.state not in ("running", "done", "failed"):
        raise ValueError(f"delivery {d.delivery_id}: unknown state {d.state!r}")
    return DeliveryRecord(
        delivery_id=d.delivery_id,
        thread_id=d.thread_id,
        message_id=d.message_id,
        sender_inbox_id=d.sender_inbox_id,
        total=d.total,
        done=d.done,
        state=d.state,  # type: ignore[arg-type]  # checked just above
        error=d.error,
        updated_at_ms=d.updated_at_ms,
    )
