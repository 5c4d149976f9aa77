"""ThreadWeaver's store as portable records (`server.portable`): threads, message ids and
links scanned page by page; a load unions what it brings with what the store holds, the way
two mailboxes' copies of one conversation join."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from google.protobuf.message import Message
from loom.v1 import dump_pb2

from server.portable.records import PAGE, Kind, ServiceData, as_record, same_service
from server.threadweaver.service import ThreadWeaverService
from server.threadweaver.settings import ThreadWeaverSettings
from storage.ports import (
    MessageMapping,
    PortableThreadStore,
    ThreadKey,
)

__all__ = ["ThreadData"]


class ThreadData:
    """ThreadWeaver's opened store, as `ServiceData`."""

    kinds: tuple[Kind, ...] = (
        Kind("thread_uts", dump_pb2.ThreadUtRecord),
        Kind("message_uts", dump_pb2.MessageUtRecord),
        Kind("links", dump_pb2.LinkRecord),
    )

    def __init__(self, store: PortableThreadStore, settings: ThreadWeaverSettings) -> None:
        self.store = store
        self._weaver = ThreadWeaverService(
            store,
            max_closure=settings.max_closure,
            max_threads=settings.default_max_threads,
            retire_grace_s=settings.retire_grace_s,
        )

    async def scan(self) -> AsyncIterator[tuple[str, list[Message]]]:
        async for threads in self.store.scan_thread_uts(PAGE):
            yield (
                "thread_uts",
                [
                    dump_pb2.ThreadUtRecord(gid=k.gid, thread_id=k.thread_id, ut=ut)
                    for k, ut in threads
                ],
            )
        async for messages in self.store.scan_message_uts(PAGE):
            yield (
                "message_uts",
                [
                    dump_pb2.MessageUtRecord(rfc_key=m.rfc_key, ut=m.ut, sent_at_ms=m.sent_at_ms)
                    for m in messages
                ],
            )
        async for links in self.store.scan_links(PAGE):
            yield "links", [dump_pb2.LinkRecord(a=a, b=b) for a, b in links]

    async def subjects(self) -> AsyncIterator[str]:
        """Mailbox gids: of every mapped thread."""
        async for threads in self.store.scan_thread_uts(PAGE):
            for key, _ in threads:
                yield key.gid

    async def erase(self, subjects: Sequence[str]) -> None:
        """`UnweaveMailbox` of each gid, waited until DONE (after the retire grace of the
        settings: other servers may be weaving into the same store meanwhile)."""
        for gid in subjects:
            op = await self._weaver.wait_operation(
                (await self._weaver.unweave_mailbox(gid)).operation_id
            )
            if op.state != "done":
                raise RuntimeError(f"unweaving a mailbox failed: {op.error}")

    async def load(self, kind: str, records: Sequence[Message]) -> None:
        # A key the target already maps elsewhere joins the two conversations: a union.
        if kind == "thread_uts":
            rows = [as_record(r, dump_pb2.ThreadUtRecord) for r in records]
            items = [(ThreadKey(r.gid, r.thread_id), r.ut) for r in rows]
            winners = await self.store.put_thread_uts_if_absent(items)
            pairs = [(ut, won) for (_, ut), won in zip(items, winners, strict=True)]
        elif kind == "message_uts":
            msgs = [as_record(r, dump_pb2.MessageUtRecord) for r in records]
            mappings = [
                MessageMapping(rfc_key=m.rfc_key, ut=m.ut, sent_at_ms=m.sent_at_ms) for m in msgs
            ]
            winners = await self.store.put_message_uts_if_absent(mappings)
            pairs = [(m.ut, won) for m, won in zip(mappings, winners, strict=True)]
        else:
            pairs = [
                (link.a, link.b) for link in (as_record(r, dump_pb2.LinkRecord) for r in records)
            ]
        await self._weaver.join([(min(a, b), max(a, b)) for a, b in pairs if a != b])

    async def differences(self, other: ServiceData, limit: int) -> list[str]:
        target = same_service(self, other)
        found: list[str] = []
        async for threads in self.store.scan_thread_uts(PAGE):
            for key, _ in threads:
                mine = await self._weaver.unified_thread(key, team_gids=None, max_threads=10_000)
                theirs = await target._weaver.unified_thread(
                    key, team_gids=None, max_threads=10_000
                )
                if _thread_view(mine) != _thread_view(theirs):
                    found.append(f"thread {key.gid}/{key.thread_id}: {mine} != {theirs}")
                    if len(found) >= limit:
                        return found
        return found

    async def close(self) -> None:
        await self.store.close()


def _thread_view(ut: Any) -> tuple[object, ...]:
    """What a caller of GetUnifiedThread sees, ids aside: the unified threads' ids are the
    store's own, so members, counts and the latest message are what must agree."""
    return (
        sorted(ut.threads),
        ut.thread_count,
        ut.oversized,
        ut.message_count,
        ut.last_message_at_ms,
    )
