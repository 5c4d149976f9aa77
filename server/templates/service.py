"""TemplateInduction's use cases: submit, annotate, read templates, count.

Annotation costs one CPU-stage parse and, at most, one store read for the row keys whose
templates are not cached (`Pipeline.templates_of`); the field values are pulled from the
email's own text nodes by the template's rules (`extraction.extract`: spans located after
the template's fixed anchors, repeated blocks as rows), so nothing else is fetched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from server.runtime.errors import NotFound, ResourceExhausted, Unavailable
from server.summary.operations import OperationRecord, Operations
from server.templates.erasure import Erasure
from server.templates.fingerprint import PIECE_SEP
from server.templates.model import (
    EmailIn,
    Extracted,
    ExtractedBlock,
    FieldRuleValue,
    TemplateValue,
    decode_templates,
)
from server.templates.pipeline import Counters, Pipeline
from server.templates.reading import extract
from server.templates.schemes import match_template
from server.templates.tokens import email_hashes
from server.templates.values import normalize
from storage.ports import TemplatePortability, TemplateStore

__all__ = ["Annotation", "Submitted", "TemplateInductionService", "fields_of", "split_template_id"]


@dataclass(frozen=True, slots=True)
class Submitted:
    """What SubmitEmails reports."""

    accepted: int
    dropped: int
    duplicates: int


@dataclass(frozen=True, slots=True)
class Annotation:
    """AnnotateEmail's answer (template None when no template matched)."""

    fingerprints: tuple[int, ...]
    template: TemplateValue | None
    fields: tuple[Extracted, ...]
    """Fields outside repeated blocks, in the email's order."""
    blocks: tuple[ExtractedBlock, ...] = ()
    """Repeated blocks: one row per repetition, each its fields in order."""


def _order(date_format: str) -> str:
    if date_format.startswith("DD"):
        return "DMY"
    if date_format.startswith("MM"):
        return "MDY"
    return ""


def _legacy(
    rules: tuple[FieldRuleValue, ...], texts: tuple[tuple[str, str], ...], order: str
) -> tuple[Extracted, ...]:
    """Version-1 rules: the whole text at each rule's XPath."""
    by_path = dict(texts)
    out: list[Extracted] = []
    for r in rules:
        text = by_path.get(r.xpath)
        if text is not None:
            text = text.replace(PIECE_SEP, " ")
            out.append(Extracted(r.xpath, text, r.type, normalize(text, r.type, order)))
    return tuple(out)


def fields_of(
    rules: tuple[FieldRuleValue, ...], texts: tuple[tuple[str, str], ...], date_format: str
) -> tuple[tuple[Extracted, ...], tuple[ExtractedBlock, ...]]:
    """An email's fields and repeated blocks by a template's rules (of either version)."""
    order = _order(date_format)
    if rules and rules[0].legacy:
        return _legacy(rules, texts, order), ()
    return extract(rules, texts, order)


def split_template_id(template_id: str) -> bytes | None:
    """The row key a template id names (ids are ``<row key hex>[-<signature hash>]``)."""
    head = template_id.split("-", 1)[0]
    try:
        key = bytes.fromhex(head)
    except ValueError:
        return None
    return key or None


class TemplateInductionService:
    """The service behind the gRPC handler."""

    def __init__(
        self, store: TemplateStore, pipeline: Pipeline, scans: TemplatePortability | None = None
    ) -> None:
        self._store = store
        self._pipeline = pipeline
        self._erasure = None if scans is None else Erasure(store, scans, pipeline)
        self.operations = Operations()
        """This server's background erasures (GetOperation reads them)."""

    async def erase_recipients(self, recipient_ids: Sequence[str]) -> OperationRecord:
        """Erases recipients' emails and user cells from every row, in the background
        (`server.templates.erasure`); returns the operation at once. From then on, their
        emails still queued are not stored. Idempotent: erasing twice is erasing once."""
        if self._erasure is None:
            raise Unavailable("this server cannot walk its template store (no scans given)")
        erasure = self._erasure
        users = erasure.hashes(recipient_ids)
        erasure.hold(users)

        async def work(op: OperationRecord) -> None:
            try:
                await erasure.run(users, op)
            finally:
                erasure.release(users)

        return self.operations.start("erase_recipients", work)

    @property
    def counters(self) -> Counters:
        """Counts of the pipeline (no content)."""
        return self._pipeline.counters

    def queue_depths(self) -> tuple[int, int, int]:
        """(CPU, I/O, formation) queue depths now."""
        p = self._pipeline
        return p.cpu_queue.qsize(), p.io_queue.qsize(), p.formations_waiting()

    def submit(self, emails: list[EmailIn]) -> Submitted:
        """Fire and forget: admits each distinct email id once; a full stage drops.

        Once one email is dropped every later one of the request is too, so the dropped
        emails are always the request's tail: a producer may resend exactly those.
        """
        seen: set[str] = set()
        distinct: list[EmailIn] = []
        for email in emails:
            if email.email_id not in seen:
                seen.add(email.email_id)
                distinct.append(email)
        accepted = self._pipeline.admit(distinct)
        return Submitted(accepted, len(distinct) - accepted, len(emails) - len(distinct))

    async def annotate(self, email: EmailIn) -> Annotation:
        """The email's fingerprints, its template (if formed) and its field values."""
        try:
            (parsed,) = await self._pipeline.fingerprint([email])
        except RuntimeError as exc:  # the pool is shutting down or broken
            raise Unavailable("template CPU stage unavailable") from exc
        if parsed is None:
            raise ResourceExhausted("the email could not be fingerprinted")
        tokens = email_hashes(email.subject, parsed.texts)
        rows = await self._pipeline.templates_of(parsed.keys)
        for key in parsed.keys:
            template, _ = match_template(rows.get(key, []), tokens, self._pipeline.params)
            if template is None:
                continue
            fields, blocks = fields_of(template.field_rules, parsed.texts, template.date_format)
            return Annotation(parsed.fingerprints, template, fields, blocks)
        return Annotation(parsed.fingerprints, None, ())

    async def get_template(self, template_id: str) -> TemplateValue:
        """One template by id; NotFound when no row holds it."""
        key = split_template_id(template_id)
        if key is not None:
            rows = await self._pipeline.templates_of((key,))
            for t in rows.get(key, []):
                if t.template_id == template_id:
                    return t
            stored = await self._store.get_templates([key])  # formed by another replica since
            for t in decode_templates(stored[key]) if key in stored else []:
                if t.template_id == template_id:
                    return t
        raise NotFound(f"template {template_id!r} not found")

    async def list_templates(
        self, sender: str | None, page_size: int, after: bytes | None
    ) -> tuple[list[TemplateValue], bytes | None]:
        """A page of templates in row key order, and the key to continue after (or None).

        Rows are not split across pages, so a page ends early rather than cut a row.
        """
        rows = await self._store.list_templates(after, page_size + 1, sender)
        page: list[TemplateValue] = []
        last: bytes | None = None
        for index, (key, data) in enumerate(rows):
            templates = [t for t in decode_templates(data) if sender is None or t.sender == sender]
            if page and len(page) + len(templates) > page_size:
                return page, last
            page.extend(templates)
            last = key
            if index == page_size - 1 and len(rows) > page_size:
                return page, last
        return page, None
