"""TemplateInduction's store as portable records (`server.portable`): emails, users and
template rows; a load keeps each row's newest formation."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from google.protobuf.message import Message
from loom.v1 import dump_pb2

from server.portable.records import PAGE, Kind, ServiceData, as_record, same_service
from server.templates.erasure import erase_offline_users
from server.templates.settings import TemplatesSettings
from storage.ports import (
    PortableTemplateStore,
    StoredEmail,
    StoredTemplates,
    StoredUser,
)

__all__ = ["TemplateData"]


class TemplateData:
    """TemplateInduction's opened store, as `ServiceData`."""

    kinds: tuple[Kind, ...] = (
        Kind("template_emails", dump_pb2.TemplateEmailRecord),
        Kind("template_users", dump_pb2.TemplateUserRecord),
        Kind("templates", dump_pb2.TemplatesRecord),
    )

    def __init__(self, store: PortableTemplateStore, settings: TemplatesSettings) -> None:
        self.store = store
        self._settings = settings

    async def subjects(self) -> AsyncIterator[str]:
        """Recipients as the store knows them: their keyed hashes (the user cells)."""
        async for users in self.store.scan_users(PAGE):
            for cell in users:
                yield cell.user.decode()

    async def erase(self, subjects: Sequence[str]) -> None:
        """`EraseRecipients` of the recipients with these hashes, run to its end."""
        await erase_offline_users(
            self.store, self._settings, frozenset(s.encode() for s in subjects)
        )

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
            emails = [as_record(r, dump_pb2.TemplateEmailRecord) for r in records]
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
            users = [as_record(r, dump_pb2.TemplateUserRecord) for r in records]
            await self.store.restore(
                [],
                [StoredUser(key=u.key, user=u.user, expires_at_ms=u.expires_at_ms) for u in users],
                [],
            )
        else:
            rows = [as_record(r, dump_pb2.TemplatesRecord) for r in records]
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
        target = same_service(self, other)
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
