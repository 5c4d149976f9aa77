"""Summary's store as portable records (`server.portable`): one sketch per message; a load
merges a sketch with the stored one, as if both event sets had been recorded.

A deleted message's row is its deletion marker (`model.DELETED`), dumped like any summary,
and a marker wins every merge: a load never brings a deleted summary back, whichever side
deleted it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from google.protobuf.message import Message
from loom.v1 import dump_pb2

from server.portable.records import PAGE, Kind, ServiceData, as_record, same_service
from server.summary.model import MessageSummary, is_deleted
from server.summary.service import SummaryService
from server.summary.settings import SummarySettings
from storage.ports import (
    PortableSummaryStore,
)

__all__ = ["SummaryData"]


class SummaryData:
    """Summary's opened store, as `ServiceData`."""

    kinds: tuple[Kind, ...] = (Kind("summaries", dump_pb2.SummaryRecord),)

    def __init__(self, store: PortableSummaryStore, settings: SummarySettings) -> None:
        self.store = store
        self._settings = settings

    async def subjects(self) -> AsyncIterator[str]:
        """Recipient ids of every exact set (sketches hold no id)."""
        async for rows in self.store.scan(PAGE):
            for _, stored in rows:
                if is_deleted(stored.data):
                    continue
                for status in MessageSummary.decode(stored.data).view().statuses.values():
                    for recipient in status.recipient_ids:
                        yield recipient

    async def erase(self, subjects: Sequence[str]) -> None:
        """`EraseRecipients`, run to its end."""
        service = SummaryService.from_settings(self.store, self._settings)
        try:
            op = await service.operations.wait(
                (await service.erase_recipients(subjects)).operation_id
            )
            if op.error:
                raise RuntimeError(f"erasing recipients from summaries failed: {op.error}")
        finally:
            await service.operations.stop()

    async def scan(self) -> AsyncIterator[tuple[str, list[Message]]]:
        async for rows in self.store.scan(PAGE):
            yield (
                "summaries",
                [
                    dump_pb2.SummaryRecord(message_id=m, data=s.data, version=s.version)
                    for m, s in rows
                ],
            )

    async def load(self, kind: str, records: Sequence[Message]) -> None:
        await asyncio.gather(*(self._merge(as_record(r, dump_pb2.SummaryRecord)) for r in records))

    async def _merge(self, record: dump_pb2.SummaryRecord) -> None:
        """Stores the summary, or the union of it and the stored one (a sketch merge, as if
        both event sets were recorded), by compare-and-set."""
        while True:
            stored = await self.store.get(record.message_id)
            if stored is None:
                data = record.data
            elif stored.data == record.data or is_deleted(stored.data):
                return  # a deletion on the target wins over any summary of the dump
            elif is_deleted(record.data):
                data = record.data  # a deletion in the dump wins over the target's summary
            else:
                try:
                    merged = MessageSummary.decode(stored.data).merge(
                        MessageSummary.decode(record.data)
                    )
                except ValueError as exc:
                    raise ValueError(f"summary of {record.message_id!r}: {exc}") from exc
                data = merged.encode()
                if data == stored.data:
                    return
            expected = None if stored is None else stored.version
            if await self.store.put_if_version(record.message_id, data, expected):
                return

    async def differences(self, other: ServiceData, limit: int) -> list[str]:
        target = same_service(self, other)
        found: list[str] = []
        async for rows in self.store.scan(PAGE):
            for message_id, summary in rows:
                theirs = await target.store.get(message_id)
                if theirs is None or theirs.data != summary.data:
                    found.append(f"summary of {message_id}: bytes differ")
                    if len(found) >= limit:
                        return found
        return found

    async def close(self) -> None:
        await self.store.close()
