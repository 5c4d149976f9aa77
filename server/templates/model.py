"""TemplateInduction's domain values and their stored encodings, free of protobuf and engines.

What is stored for an email is not its HTML but what one parse yields and formation needs
(subject, text nodes with their XPaths, a keyed hash of the recipient): formation then never
parses again, and the stored form is a fraction of the body. It is still email content, so
it lives only in the `email` family under the TTL, and never leaves the server.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

import zstandard
from opentelemetry.trace import SpanContext

from server.runtime.errors import CorruptData

__all__ = [
    "TEMPLATES_VERSION",
    "ClusterEmail",
    "EmailIn",
    "Extracted",
    "ExtractedBlock",
    "FieldRuleValue",
    "Parsed",
    "TemplateValue",
    "decode_cluster_email",
    "decode_templates",
    "encode_cluster_email",
    "encode_templates",
    "recipient_hash",
]

_Z = threading.local()
"""Each thread's zstd contexts: python-zstandard's compressor and decompressor are not
thread safe. The service's CPU stage runs in processes, but a formation stage on a thread
pool (offline erasure's, the tests') shared one context between threads: rows failed to
decode (`CorruptData`) and the process could crash."""


def _zc() -> zstandard.ZstdCompressor:
    z: zstandard.ZstdCompressor | None = getattr(_Z, "c", None)
    if z is None:
        z = _Z.c = zstandard.ZstdCompressor(level=3)
    return z


def _zd() -> zstandard.ZstdDecompressor:
    z: zstandard.ZstdDecompressor | None = getattr(_Z, "d", None)
    if z is None:
        z = _Z.d = zstandard.ZstdDecompressor()
    return z


_JSON = json.JSONEncoder(separators=(",", ":"), check_circular=False)
"""One encoder for every stored value (``json.dumps`` with options builds one per call);
the values are plain nested lists, never cyclic, so the cycle check is skipped."""


@dataclass(frozen=True, slots=True)
class EmailIn:
    """One email as a caller gave it (validated)."""

    email_id: str
    sender: str
    recipient_id: str
    subject: str
    html_body: str
    received_at_ms: int
    trace: SpanContext | None = field(default=None, kw_only=True, compare=False)
    """The span of the request that submitted it (tracing on): its CPU batch links to it."""


class Parsed(NamedTuple):
    """What the CPU stage returns for one email (no recipient in clear).

    A NamedTuple, not a dataclass: thousands cross the process boundary per second, and a
    tuple unpickles several times faster than a frozen dataclass.
    """

    fingerprints: tuple[int, ...]
    """The paper's three MinHash values over the indexed XPath set."""
    keys: tuple[bytes, ...]
    """Cluster row keys of the configured scheme, in annotation priority order."""
    texts: tuple[tuple[str, str], ...]
    """(indexed XPath, text) of the email's text nodes."""
    user: str = ""
    """Keyed hash of the recipient (empty when annotating)."""
    payload: bytes = b""
    """The stored form of the email (`encode_cluster_email`), built in the worker."""


@dataclass(frozen=True, slots=True)
class ClusterEmail:
    """One email as stored in a cluster row and handed to the UDCAs."""

    user: str
    """Keyed hash of the recipient (hex): counts distinct recipients, reveals none."""
    sender: str
    subject: str
    texts: tuple[tuple[str, str], ...]
    received_at_ms: int


@dataclass(frozen=True, slots=True)
class FieldRuleValue:
    """An extraction rule: where one field of a template lies, its label and its type.

    A field is a *hole* of a text slot's token pattern (``Invoice: {}``); the slot is the
    `ordinal`-th text item with index-free `path` in the stretch of text after the fixed
    `anchor` (before the next anchor, `until`), so a field is found whatever the count of
    repetitions of a block before it. Only positions, fixed tokens and labels (text >= k
    recipients hold) are recorded, never a value.

    A version-1 rule (stored before spans) holds only `xpath` and `type` (`rank` -1): its
    field is the whole text at that indexed XPath.
    """

    xpath: str
    """The indexed XPath of the slot's node in most of the cluster's emails (an example:
    annotation locates the node by `anchor`, `path` and `ordinal`)."""
    type: str
    label: str = ""
    """The fixed text introducing the field (``Order #``, ``Total``), "" when none."""
    anchor: str = ""
    """The fixed text the slot follows ("" = the start of the body)."""
    rank: int = -1
    """The anchor's place in the template's anchor order (0 = the start); -1: a version-1 rule."""
    until: str = ""
    """The next anchor of that order ("" = none): the stretch after `anchor` ends there."""
    path: str = ""
    """Index-free path of the slot's node; in a row, relative to the row element."""
    ordinal: int = 0
    """Which item of that path in its segment (0 = the first)."""
    segment: int = 0
    """0: the stretch (before the repeated block, if any); 1: every row of the block; 2:
    after the block. A stretch of several blocks one after another: 2j + 1 every row of
    block j, 2j + 2 after block j (and before the next)."""
    row_path: str = ""
    """Index-free path of the repeated block's row element ("" = the stretch has none);
    several blocks' paths in order, joined by `stretches.BLOCK_SEP`. A reader before
    several blocks were read finds no block on a joined path and reads the stretch as
    plain items (no rows), without error."""
    block: str = ""
    """The repeated block's label (its rows' segment)."""
    pattern: tuple[str | None, ...] = ()
    """The slot's fixed tokens in order, None for each hole."""
    hole: int = 0
    """Which hole of `pattern` is this field."""
    parts: tuple[str, ...] = ()
    """Kinds of the typed values the hole holds (``("date", "text")``), () when one value."""
    part: int = 0
    """Which of `parts` is this field."""

    @property
    def legacy(self) -> bool:
        """A version-1 rule: the whole text at `xpath`."""
        return self.rank < 0


@dataclass(frozen=True, slots=True)
class TemplateValue:
    """One template of a cluster row: only what UDCAs derived from >= k recipients."""

    template_id: str
    sender: str
    fingerprints: tuple[int, ...]
    distinct_recipients: int
    email_count: int
    vertical: str
    fixed_text: tuple[str, ...]
    date_format: str
    field_rules: tuple[FieldRuleValue, ...]
    created_at_ms: int
    scheme: str
    signature: tuple[str, ...] = ()
    """Loom's scheme: the k-anonymous tokens (word shingles of text and subject) nearly all
    of its emails have; annotation matches an email by how much of it the email contains."""


@dataclass(frozen=True, slots=True)
class Extracted:
    """One field value of one email (annotation only, never stored)."""

    xpath: str
    value: str
    type: str
    normalized: str
    label: str = ""


@dataclass(frozen=True, slots=True)
class ExtractedBlock:
    """One repeated block of one email: a row per repetition, each its fields in order."""

    label: str
    rows: tuple[tuple[Extracted, ...], ...]


def recipient_hash(recipient_id: str, key: bytes) -> str:
    """Keyed BLAKE2b of a recipient id (hex, 128 bits): distinct-count without the id."""
    return hashlib.blake2b(recipient_id.encode(), key=key[:64], digest_size=16).hexdigest()


def encode_cluster_email(email: ClusterEmail) -> bytes:
    """The stored form of a cluster email."""
    doc = [1, email.user, email.sender, email.subject, email.received_at_ms, email.texts]
    return _zc().compress(_JSON.encode(doc).encode())


def decode_cluster_email(data: bytes) -> ClusterEmail:
    """Inverse of `encode_cluster_email`; undecodable bytes are CorruptData."""
    try:
        version, user, sender, subject, at, texts = json.loads(_zd().decompress(data))
        if version != 1:
            raise ValueError(f"version {version}")
        return ClusterEmail(user, sender, subject, tuple((p, t) for p, t in texts), int(at))
    except (ValueError, TypeError, zstandard.ZstdError) as exc:
        raise CorruptData(f"bad stored email: {type(exc).__name__}") from exc


TEMPLATES_VERSION = 2
"""Stored templates' encoding: 1 = field rules as [xpath, type]; 2 = spans with their place
(`FieldRuleValue`). Version 1 still decodes, its rules annotating as they did."""


def _rule_doc(r: FieldRuleValue) -> list[object]:
    if r.legacy:
        return [r.xpath, r.type]
    return [
        r.xpath,
        r.type,
        r.label,
        r.anchor,
        r.rank,
        r.until,
        r.path,
        r.ordinal,
        r.segment,
        r.row_path,
        r.block,
        list(r.pattern),
        r.hole,
        list(r.parts),
        r.part,
    ]


def _rule(d: list[object]) -> FieldRuleValue:
    if len(d) == 2:
        return FieldRuleValue(str(d[0]), str(d[1]))
    (xpath, kind, label, anchor, rank, until, path, ordinal, segment, row_path, block) = d[:11]
    pattern, hole, parts, part = d[11:15]
    if not isinstance(pattern, list) or not isinstance(parts, list):
        raise ValueError("rule")
    return FieldRuleValue(
        xpath=str(xpath),
        type=str(kind),
        label=str(label),
        anchor=str(anchor),
        rank=int(str(rank)),
        until=str(until),
        path=str(path),
        ordinal=int(str(ordinal)),
        segment=int(str(segment)),
        row_path=str(row_path),
        block=str(block),
        pattern=tuple(None if t is None else str(t) for t in pattern),
        hole=int(str(hole)),
        parts=tuple(str(x) for x in parts),
        part=int(str(part)),
    )


def encode_templates(templates: list[TemplateValue]) -> bytes:
    """The stored form of a cluster row's templates."""
    doc = [
        [
            t.template_id,
            t.sender,
            list(t.fingerprints),
            t.distinct_recipients,
            t.email_count,
            t.vertical,
            list(t.fixed_text),
            t.date_format,
            [_rule_doc(r) for r in t.field_rules],
            t.created_at_ms,
            t.scheme,
            list(t.signature),
        ]
        for t in templates
    ]
    return _zc().compress(_JSON.encode([TEMPLATES_VERSION, doc]).encode())


def decode_templates(data: bytes) -> list[TemplateValue]:
    """Inverse of `encode_templates`."""
    try:
        version, doc = json.loads(_zd().decompress(data))
        if version not in (1, TEMPLATES_VERSION):
            raise ValueError(f"version {version}")
        return [
            TemplateValue(
                template_id=str(d[0]),
                sender=str(d[1]),
                fingerprints=tuple(int(x) for x in d[2]),
                distinct_recipients=int(d[3]),
                email_count=int(d[4]),
                vertical=str(d[5]),
                fixed_text=tuple(str(x) for x in d[6]),
                date_format=str(d[7]),
                field_rules=tuple(_rule(r) for r in d[8]),
                created_at_ms=int(d[9]),
                scheme=str(d[10]),
                signature=tuple(str(x) for x in d[11]),
            )
            for d in doc
        ]
    except (ValueError, TypeError, IndexError, zstandard.ZstdError) as exc:
        raise CorruptData(f"bad stored templates: {type(exc).__name__}") from exc
