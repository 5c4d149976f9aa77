"""Each service's store as portable records: how it is scanned, loaded and compared.

A `ServiceData` wraps one opened store of one service. `scan` streams its records as dump
messages (`loom.v1.dump`), page by page; `load` writes a batch of them into the store,
idempotently, merging with what the store already holds the way the service's data model
does (ThreadWeaver unions conversations, Summary merges sketches, an inbox row keeps its
newest message, a template keeps its newest formation, a job present is left alone);
`differences` compares the store with another one semantically, as the service's callers
would see it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf.message import Message
from loom.v1 import dump_pb2

from server.config import Settings
from server.summary.model import MessageSummary
from server.threadweaver.weaver import ThreadWeaver
from storage import factory
from storage.engines import (
    INBOX_STORES,
    JOB_STORES,
    SUMMARY_STORES,
    TEMPLATE_STORES,
    THREAD_STORES,
    Port,
)
from storage.ports import (
    DeliveryRecord,
    InboxStore,
    JobRecord,
    JobStore,
    MessageMapping,
    StoredEmail,
    StoredTemplates,
    StoredUser,
    SummaryStore,
    TaskRecord,
    TemplateStore,
    ThreadKey,
    ThreadStore,
)

__all__ = ["SERVICES", "ActiveJobs", "Kind", "ServiceData", "open_service"]

PAGE = 1000
"""Records per scan page and per load batch: memory stays bounded by it."""


@dataclass(frozen=True, slots=True)
class Kind:
    """One record kind of a service: its file and its message type."""

    name: str
    message: type[Message]


class ServiceData(Protocol):
    """One service's opened store, as portable records."""

    kinds: tuple[Kind, ...]

    def scan(self) -> AsyncIterator[tuple[str, list[Message]]]:
        """Every record, as (kind, page of messages), kinds in `kinds` order."""
        ...

    async def load(self, kind: str, records: Sequence[Message]) -> None:
        """Writes `records` of `kind` (idempotent; merged with what is there)."""
        ...

    async def differences(self, other: ServiceData, limit: int) -> list[str]:
        """Up to `limit` ways `other`'s store differs from this one, as callers see it."""
        ...

    async def close(self) -> None:
        """Closes the store."""
        ...


class ActiveJobs(ValueError):
    """An Iterator store with running or paused jobs: a dump of it would be a copy of work in
    flight that no store can resume, so it is refused."""


class _Threads:
    kinds: tuple[Kind, ...] = (
        Kind("thread_uts", dump_pb2.ThreadUtRecord),
        Kind("message_uts", dump_pb2.MessageUtRecord),
        Kind("links", dump_pb2.LinkRecord),
    )

    def __init__(self, store: ThreadStore, settings: Settings) -> None:
        self.store = store
        self._weaver = ThreadWeaver(store, max_closure=settings.threadweaver.max_closure)

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

    async def load(self, kind: str, records: Sequence[Message]) -> None:
        # A key the target already maps elsewhere joins the two conversations: a union.
        if kind == "thread_uts":
            rows = [_as(r, dump_pb2.ThreadUtRecord) for r in records]
            items = [(ThreadKey(r.gid, r.thread_id), r.ut) for r in rows]
            winners = await self.store.put_thread_uts_if_absent(items)
            pairs = [(ut, won) for (_, ut), won in zip(items, winners, strict=True)]
        elif kind == "message_uts":
            msgs = [_as(r, dump_pb2.MessageUtRecord) for r in records]
            mappings = [
                MessageMapping(rfc_key=m.rfc_key, ut=m.ut, sent_at_ms=m.sent_at_ms) for m in msgs
            ]
            winners = await self.store.put_message_uts_if_absent(mappings)
            pairs = [(m.ut, won) for m, won in zip(mappings, winners, strict=True)]
        else:
            pairs = [(link.a, link.b) for link in (_as(r, dump_pb2.LinkRecord) for r in records)]
        await self._weaver.join([(min(a, b), max(a, b)) for a, b in pairs if a != b])

    async def differences(self, other: ServiceData, limit: int) -> list[str]:
        target = _same(self, other)
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


class _Inbox:
    kinds: tuple[Kind, ...] = (
        Kind("inbox_entries", dump_pb2.InboxEntryRecord),
        Kind("deliveries", dump_pb2.DeliveryDumpRecord),
    )

    def __init__(self, store: InboxStore, settings: Settings) -> None:
        self.store = store
        self._listing_limit = max(settings.inbox.max_entries * 4, 10_000)

    async def scan(self) -> AsyncIterator[tuple[str, list[Message]]]:
        async for rows in self.store.scan_entries(PAGE):
            yield (
                "inbox_entries",
                [
                    dump_pb2.InboxEntryRecord(
                        inbox_id=inbox,
                        thread_id=e.thread_id,
                        last_message_id=e.last_message_id,
                        is_read=e.is_read,
                    )
                    for inbox, e in rows
                ],
            )
        async for deliveries in self.store.scan_deliveries(PAGE):
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

    async def load(self, kind: str, records: Sequence[Message]) -> None:
        if kind == "deliveries":
            for d in (_as(r, dump_pb2.DeliveryDumpRecord) for r in records):
                await self.store.create_delivery(_delivery(d))
            return
        # One delivery per (thread, message, read flag): the newest message of a row wins,
        # and a row the target holds at that message or newer is left as it is.
        groups: dict[tuple[str, int, bool], list[str]] = {}
        for e in (_as(r, dump_pb2.InboxEntryRecord) for r in records):
            groups.setdefault((e.thread_id, e.last_message_id, e.is_read), []).append(e.inbox_id)
        await asyncio.gather(
            *(
                self.store.deliver(thread, message, unread=[] if read else inboxes,
                                   read=inboxes if read else [])
                for (thread, message, read), inboxes in groups.items()
            )
        )  # fmt: skip

    async def differences(self, other: ServiceData, limit: int) -> list[str]:
        target = _same(self, other)
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


class _Summaries:
    kinds: tuple[Kind, ...] = (Kind("summaries", dump_pb2.SummaryRecord),)

    def __init__(self, store: SummaryStore, settings: Settings) -> None:
        self.store = store

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
        await asyncio.gather(*(self._merge(_as(r, dump_pb2.SummaryRecord)) for r in records))

    async def _merge(self, record: dump_pb2.SummaryRecord) -> None:
        """Stores the summary, or the union of it and the stored one (a sketch merge, as if
        both event sets were recorded), by compare-and-set."""
        while True:
            stored = await self.store.get(record.message_id)
            if stored is None:
                data = record.data
            elif stored.data == record.data:
                return
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
        target = _same(self, other)
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


class _Templates:
    kinds: tuple[Kind, ...] = (
        Kind("template_emails", dump_pb2.TemplateEmailRecord),
        Kind("template_users", dump_pb2.TemplateUserRecord),
        Kind("templates", dump_pb2.TemplatesRecord),
    )

    def __init__(self, store: TemplateStore, settings: Settings) -> None:
        self.store = store

    async def scan(self) -> AsyncIterator[tuple[str, list[Message]]]:
        async for emails in self.store.scan_emails(PAGE):
            yield (
                "template_emails",
                [
                    dump_pb2.TemplateEmailRecord(
                        key=e.key,
                        email_id=e.email_id,
                        payload=e.payload,
                        expires_at_ms=e.expires_at_ms,
                    )
                    for e in emails
                ],
            )
        async for users in self.store.scan_users(PAGE):
            yield (
                "template_users",
                [
                    dump_pb2.TemplateUserRecord(
                        key=u.key, user=u.user, expires_at_ms=u.expires_at_ms
                    )
                    for u in users
                ],
            )
        async for rows in self.store.scan_templates(PAGE):
            yield (
                "templates",
                [
                    dump_pb2.TemplatesRecord(
                        key=t.key, data=t.data, sender=t.sender, formed_at_ms=t.formed_at_ms
                    )
                    for t in rows
                ],
            )

    async def load(self, kind: str, records: Sequence[Message]) -> None:
        if kind == "template_emails":
            emails = [_as(r, dump_pb2.TemplateEmailRecord) for r in records]
            await self.store.restore(
                [
                    StoredEmail(
                        key=e.key, email_id=e.email_id, payload=e.payload,
                        expires_at_ms=e.expires_at_ms,
                    )
                    for e in emails
                ],
                [],
                [],
            )  # fmt: skip
        elif kind == "template_users":
            users = [_as(r, dump_pb2.TemplateUserRecord) for r in records]
            await self.store.restore(
                [],
                [StoredUser(key=u.key, user=u.user, expires_at_ms=u.expires_at_ms) for u in users],
                [],
            )
        else:
            rows = [_as(r, dump_pb2.TemplatesRecord) for r in records]
            await self.store.restore(
                [],
                [],
                [
                    StoredTemplates(
                        key=t.key, data=t.data, sender=t.sender, formed_at_ms=t.formed_at_ms
                    )
                    for t in rows
                ],
            )

    async def differences(self, other: ServiceData, limit: int) -> list[str]:
        target = _same(self, other)
        found: list[str] = []
        async for rows in self.store.scan_templates(PAGE):
            theirs = await target.store.get_templates([t.key for t in rows])
            for t in rows:
                if theirs.get(t.key) != t.data:
                    found.append(f"templates of row {t.key.hex()} differ")
                    if len(found) >= limit:
                        return found
        return found

    async def close(self) -> None:
        await self.store.close()


FINISHED = ("completed", "cancelled", "failed")


class _Jobs:
    kinds: tuple[Kind, ...] = (Kind("jobs", dump_pb2.JobDumpRecord),)

    def __init__(self, store: JobStore, settings: Settings) -> None:
        self.store = store

    async def scan(self) -> AsyncIterator[tuple[str, list[Message]]]:
        active = await self.store.active_jobs()
        if active:
            names = ", ".join(f"{j.job_id} ({j.state})" for j in active[:10])
            raise ActiveJobs(
                f"the iterator has {len(active)} job(s) running or paused: {names}; "
                "wait for them to finish, or cancel them (CancelJob), then dump again"
            )
        before: tuple[int, str] | None = None
        while jobs := await self.store.list_jobs(PAGE, before):
            page: list[Message] = []
            for job in jobs:
                counters = await self.store.counters(job.job_id)
                page.append(_job_message(job, counters))
            yield "jobs", page
            before = (jobs[-1].created_ms, jobs[-1].job_id)

    async def load(self, kind: str, records: Sequence[Message]) -> None:
        for record in (_as(r, dump_pb2.JobDumpRecord) for r in records):
            if record.state not in FINISHED:
                raise ValueError(f"job {record.job_id}: only finished jobs load ({record.state})")
            if await self.store.get_job(record.job_id) is not None:
                continue  # a job id is unique: present means loaded already
            job = JobRecord(
                job_id=record.job_id,
                created_ms=record.created_ms,
                spec=record.spec,
                state=record.state,  # checked above
                rate=record.rate,
                paused_by=record.paused_by,
                error=record.error,
                finished_ms=record.finished_ms,
                version=record.version,
            )
            # A finished job's one task is done: nothing will read it again.
            root = TaskRecord(
                task_id="root", level=0, parents=(), first=(), last=(), after=(), upto=(),
                seq=0, done=True, rows=0, started_ms=record.created_ms, spawned=(),
            )  # fmt: skip
            await self.store.create_job(job, root, dict(record.counters))

    async def differences(self, other: ServiceData, limit: int) -> list[str]:
        target = _same(self, other)
        found: list[str] = []
        before: tuple[int, str] | None = None
        while jobs := await self.store.list_jobs(PAGE, before):
            for job in jobs:
                theirs = await target.store.get_job(job.job_id)
                mine_counters = await self.store.counters(job.job_id)
                their_counters = await target.store.counters(job.job_id)
                if theirs != job or mine_counters != their_counters:
                    found.append(f"job {job.job_id} differs")
                    if len(found) >= limit:
                        return found
            before = (jobs[-1].created_ms, jobs[-1].job_id)
        return found

    async def close(self) -> None:
        await self.store.close()


def _job_message(job: JobRecord, counters: dict[str, int]) -> dump_pb2.JobDumpRecord:
    return dump_pb2.JobDumpRecord(
        job_id=job.job_id,
        created_ms=job.created_ms,
        spec=job.spec,
        state=job.state,
        rate=job.rate,
        paused_by=job.paused_by,
        error=job.error,
        finished_ms=job.finished_ms,
        version=job.version,
        counters=counters,
    )


def _as(record: Message, kind: type[Any]) -> Any:
    if not isinstance(record, kind):
        raise TypeError(f"expected {kind.DESCRIPTOR.full_name}, got {type(record).__name__}")
    return record


def _same(mine: Any, other: ServiceData) -> Any:
    if type(other) is not type(mine):
        raise TypeError("stores of different services cannot be compared")
    return other


@dataclass(frozen=True, slots=True)
class _Service:
    port: Port[Any]
    sqlite_file: str
    kinds: tuple[Kind, ...]
    open: Callable[[Settings], Any]


async def _open_threads(settings: Settings) -> ServiceData:
    return _Threads(await factory.open_thread_store(settings), settings)


async def _open_inbox(settings: Settings) -> ServiceData:
    return _Inbox(await factory.open_inbox_store(settings), settings)


async def _open_summaries(settings: Settings) -> ServiceData:
    return _Summaries(await factory.open_summary_store(settings), settings)


async def _open_templates(settings: Settings) -> ServiceData:
    store = await factory.open_template_store(settings, email_ttl_s=settings.templates.email_ttl_s)
    return _Templates(store, settings)


async def _open_jobs(settings: Settings) -> ServiceData:
    return _Jobs(await factory.open_job_store(settings), settings)


SERVICES: dict[str, _Service] = {
    "threadweaver": _Service(THREAD_STORES, "threadweaver.sqlite3", _Threads.kinds, _open_threads),
    "inbox": _Service(INBOX_STORES, "inbox.sqlite3", _Inbox.kinds, _open_inbox),
    "summary": _Service(SUMMARY_STORES, "summary.sqlite3", _Summaries.kinds, _open_summaries),
    "templates": _Service(TEMPLATE_STORES, "templates.sqlite3", _Templates.kinds, _open_templates),
    "iterator": _Service(JOB_STORES, "iterator-state.sqlite3", _Jobs.kinds, _open_jobs),
}
"""Every service with a store to move, by the name `--service` takes: its port (which says
which engine the settings chose), its embedded file, and how to open it."""


def engine_of(service: str, settings: Settings) -> str:
    """The engine `settings` give `service`'s store."""
    return str(SERVICES[service].port.chosen(settings.storage).name)


async def open_service(service: str, settings: Settings) -> ServiceData:
    """`service`'s store as `settings` configure it."""
    opened: ServiceData = await SERVICES[service].open(settings)
    return opened
