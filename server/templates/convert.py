"""TemplateInduction's protobuf <-> domain translation, with every input check.

Bounds: email_id, sender and recipient_id 1..512 bytes (an empty recipient cannot count
towards k), subject at most 998 bytes, html_body at most `max_body_bytes` (larger bodies
are INVALID_ARGUMENT; bodies beyond the server's 16 MiB message limit never get here:
gRPC refuses them with RESOURCE_EXHAUSTED), 1..`max_batch` emails per SubmitEmails.
Malformed HTML and binary junk are valid input: they are parsed as well as they can be.
Repeated email ids within one SubmitEmails are queued once and counted as duplicates.
"""

from __future__ import annotations

from google.protobuf import timestamp_pb2
from loom.v1 import templates_pb2

from server.runtime.validation import Violations
from server.templates.model import EmailIn, Extracted, FieldRuleValue, TemplateValue
from server.templates.service import Annotation, split_template_id
from server.templates.settings import TemplatesSettings
from server.templates.spans import display
from server.templates.stretches import block_of, block_paths

__all__ = [
    "MAX_ID_BYTES",
    "MAX_PAGE_SIZE",
    "annotation_to_proto",
    "email_from_proto",
    "emails_from_proto",
    "list_request_from_proto",
    "template_to_proto",
]

MAX_ID_BYTES = 512
MAX_SUBJECT_BYTES = 998
MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 100
_MAX_MS = 253_402_300_799_999


def _body_size(v: Violations, field: str, body: str, limit: int) -> None:
    """UTF-8 size check that encodes only bodies that might be too large (4 bytes a char)."""
    if len(body) * 4 <= limit:
        return
    size = len(body.encode())
    v.check(size <= limit, field, f"must be at most {limit} bytes (got {size})")


def _email(v: Violations, path: str, e: templates_pb2.Email, limits: TemplatesSettings) -> EmailIn:
    v.identifier(f"{path}email_id", e.email_id, max_bytes=MAX_ID_BYTES)
    v.identifier(f"{path}sender", e.sender, max_bytes=MAX_ID_BYTES)
    v.identifier(f"{path}recipient_id", e.recipient_id, max_bytes=MAX_ID_BYTES)
    v.check(
        len(e.subject.encode()) <= MAX_SUBJECT_BYTES,
        f"{path}subject",
        f"must be at most {MAX_SUBJECT_BYTES} bytes",
    )
    _body_size(v, f"{path}html_body", e.html_body, limits.max_body_bytes)
    at = 0
    if e.HasField("received_at"):
        at = e.received_at.seconds * 1000 + e.received_at.nanos // 1_000_000
        v.check(0 <= at <= _MAX_MS, f"{path}received_at", "must lie between 1970 and 9999")
    return EmailIn(e.email_id, e.sender, e.recipient_id, e.subject, e.html_body, at)


def _id_ok(value: str) -> bool:
    """`Violations.identifier`'s rule, answered without building a message."""
    return (
        bool(value)
        and (len(value) * 4 <= MAX_ID_BYTES or len(value.encode()) <= MAX_ID_BYTES)
        and "\x00" not in value
    )


def _valid_email(e: templates_pb2.Email, limits: TemplatesSettings) -> EmailIn | None:
    """The email when every field is valid, else None (then `_email` names what is not).

    The common case: each field is read once (every read of a protobuf string builds a new
    Python string, the body's ~10 KB included) and no field path or message is formatted.
    """
    email_id, sender, recipient = e.email_id, e.sender, e.recipient_id
    subject, body = e.subject, e.html_body
    if not (_id_ok(email_id) and _id_ok(sender) and _id_ok(recipient)):
        return None
    if len(subject) * 4 > MAX_SUBJECT_BYTES and len(subject.encode()) > MAX_SUBJECT_BYTES:
        return None
    if len(body) * 4 > limits.max_body_bytes:
        return None  # maybe too large: the exact check is `_body_size`'s
    at = 0
    if e.HasField("received_at"):
        at = e.received_at.seconds * 1000 + e.received_at.nanos // 1_000_000
        if not 0 <= at <= _MAX_MS:
            return None
    return EmailIn(email_id, sender, recipient, subject, body, at)


def emails_from_proto(
    request: templates_pb2.SubmitEmailsRequest, limits: TemplatesSettings
) -> list[EmailIn]:
    """The emails of a SubmitEmails call; InvalidArgument names every bad field."""
    v = Violations()
    out: list[EmailIn] = []
    if v.count("emails", request.emails, minimum=1, maximum=limits.max_batch):
        for i, e in enumerate(request.emails):
            email = _valid_email(e, limits)
            out.append(email if email is not None else _email(v, f"emails[{i}].", e, limits))
    v.raise_if_any()
    return out


def email_from_proto(
    request: templates_pb2.AnnotateEmailRequest, limits: TemplatesSettings
) -> EmailIn:
    """The email of an AnnotateEmail call (its recipient is not needed and not checked)."""
    v = Violations()
    email = None
    if v.check(request.HasField("email"), "email", "is required"):
        e = request.email
        v.identifier("email.sender", e.sender, max_bytes=MAX_ID_BYTES)
        _body_size(v, "email.html_body", e.html_body, limits.max_body_bytes)
        v.check(
            len(e.subject.encode()) <= MAX_SUBJECT_BYTES,
            "email.subject",
            f"must be at most {MAX_SUBJECT_BYTES} bytes",
        )
        email = EmailIn(e.email_id, e.sender, "", e.subject, e.html_body, 0)
    v.raise_if_any()
    assert email is not None
    return email


def template_id_from_proto(request: templates_pb2.GetTemplateRequest) -> str:
    """The id of a GetTemplate call."""
    v = Violations()
    if v.identifier("template_id", request.template_id, max_bytes=MAX_ID_BYTES):
        v.check(
            split_template_id(request.template_id) is not None,
            "template_id",
            "is not a template id (hex row key, optionally '-' and a hex signature)",
        )
    v.raise_if_any()
    return request.template_id


def list_request_from_proto(
    request: templates_pb2.ListTemplatesRequest,
) -> tuple[str | None, int, bytes | None]:
    """(sender filter, page size, key to continue after) of a ListTemplates call."""
    v = Violations()
    v.check(
        0 <= request.page_size <= MAX_PAGE_SIZE,
        "page_size",
        f"must lie in 0..{MAX_PAGE_SIZE} (0 = {DEFAULT_PAGE_SIZE})",
    )
    v.check(len(request.sender.encode()) <= MAX_ID_BYTES, "sender", "is too long")
    after = None
    if request.page_token:
        try:
            after = bytes.fromhex(request.page_token)
        except ValueError:
            v.add("page_token", "is not a token from a previous ListTemplates response")
    v.raise_if_any()
    return request.sender or None, request.page_size or DEFAULT_PAGE_SIZE, after


def _ts(ms: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def _placement(segment: int) -> templates_pb2.FieldPlacement.ValueType:
    """Segment 0: the stretch before any block; odd: a block's rows; even: after a block
    (and before the next, when the stretch holds several)."""
    if segment == 0:
        return templates_pb2.FIELD_PLACEMENT_STRETCH
    if segment % 2:
        return templates_pb2.FIELD_PLACEMENT_ROW
    return templates_pb2.FIELD_PLACEMENT_AFTER_BLOCK


def _rule(r: FieldRuleValue) -> templates_pb2.FieldRule:
    if r.legacy:
        return templates_pb2.FieldRule(xpath=r.xpath, type=r.type)
    paths = block_paths(r.row_path)
    row_path = paths[min(block_of(r.segment), len(paths) - 1)] if paths else ""
    return templates_pb2.FieldRule(
        xpath=r.xpath,
        type=r.type,
        label=r.label,
        anchor=r.anchor,
        path=r.path,
        ordinal=r.ordinal,
        placement=_placement(r.segment),
        row_path=row_path,
        block_label=r.block if row_path else "",
        pattern=display(r.pattern),
    )


def _field(f: Extracted) -> templates_pb2.ExtractedField:
    return templates_pb2.ExtractedField(
        xpath=f.xpath, value=f.value, type=f.type, normalized=f.normalized, label=f.label
    )


def template_to_proto(t: TemplateValue) -> templates_pb2.Template:
    """A template: only what UDCAs derived (no email, no recipient)."""
    return templates_pb2.Template(
        template_id=t.template_id,
        sender=t.sender,
        fingerprints=list(t.fingerprints),
        distinct_recipients=t.distinct_recipients,
        email_count=t.email_count,
        vertical=t.vertical,
        fixed_text=list(t.fixed_text),
        created_at=_ts(t.created_at_ms),
        date_format=t.date_format,
        field_rules=[_rule(r) for r in t.field_rules],
        scheme=t.scheme,
    )


def annotation_to_proto(a: Annotation) -> templates_pb2.AnnotateEmailResponse:
    """An annotation (this caller's own email's values only)."""
    out = templates_pb2.AnnotateEmailResponse(fingerprints=list(a.fingerprints))
    t = a.template
    if t is not None:
        out.template_id = t.template_id
        out.vertical = t.vertical
        out.fixed_text.extend(t.fixed_text)
        out.date_format = t.date_format
        out.fields.extend(_field(f) for f in a.fields)
        # A 1.0 client reads `fields` alone: a repeated block's fields are there too.
        out.fields.extend(_field(f) for b in a.blocks for row in b.rows for f in row)
        out.blocks.extend(
            templates_pb2.ExtractedBlock(
                label=b.label,
                rows=[templates_pb2.FieldRow(fields=[_field(f) for f in row]) for row in b.rows],
            )
            for b in a.blocks
        )
    return out
