"""What the CPU stage's worker processes run: fingerprinting batches and forming templates.

Top-level functions of plain, picklable arguments, so they run in a process pool started
with ``forkserver`` (never forked from a process that holds gRPC threads). A bad email
never raises out of a batch: its slot comes back None and the caller counts it, without
the exception text (which could quote the body) ever leaving the worker.

Two fingerprinting entry points share one per-email core (parse, the paper's three
MinHash values, the scheme's keys): `fingerprint_batch` (annotation, and the load test's
floor) takes and returns whole values; `fingerprint_for_store` (SubmitEmails' CPU stage)
crosses the process boundary as plain tuples both ways and returns only what the I/O stage
stores and checks, since thousands of emails a second cross it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from server.templates.fingerprint import Structure, minhash, parse_structure
from server.templates.model import (
    ClusterEmail,
    EmailIn,
    Parsed,
    TemplateValue,
    decode_cluster_email,
    encode_cluster_email,
    encode_templates,
    recipient_hash,
)
from server.templates.schemes import SchemeParams, form_templates, keys_for

__all__ = [
    "Formed",
    "ToStore",
    "fingerprint_batch",
    "fingerprint_for_store",
    "form_row",
    "warm_up",
]


def warm_up() -> int:
    """Imports everything a worker needs before the first real batch arrives."""
    parse_structure("<html><body><p>warm</p></body></html>")
    return 0


def _core(
    sender: str, html: str, params: SchemeParams
) -> tuple[Structure, tuple[int, ...], tuple[bytes, ...]]:
    """One email's parse, the paper's fingerprints and the scheme's row keys."""
    structure = parse_structure(html)
    fingerprints = minhash(structure.xpaths)
    return structure, fingerprints, keys_for(sender, structure, fingerprints, params)


def fingerprint_batch(
    items: Sequence[EmailIn], params: SchemeParams, hash_key: bytes = b""
) -> list[Parsed | None]:
    """Emails -> the paper's fingerprints, the scheme's keys, the text nodes and, for an
    email with a recipient, its keyed recipient hash and stored form (so the event loop
    neither hashes nor compresses)."""
    out: list[Parsed | None] = []
    for e in items:
        try:
            structure, fingerprints, keys = _core(e.sender, e.html_body, params)
            user = payload = None
            if e.recipient_id:
                user = recipient_hash(e.recipient_id, hash_key)
                stored = ClusterEmail(user, e.sender, e.subject, structure.texts, e.received_at_ms)
                payload = encode_cluster_email(stored)
            out.append(Parsed(fingerprints, keys, structure.texts, user or "", payload or b""))
        except Exception:
            out.append(None)
    return out


class ToStore(NamedTuple):
    """What the I/O stage needs of one submitted email (its recipient only hashed)."""

    keys: tuple[bytes, ...]
    """Cluster row keys of the configured scheme."""
    user: bytes
    """Keyed hash of the recipient, as the store keeps it."""
    payload: bytes
    """The stored form of the email (`encode_cluster_email`)."""
    texts: str
    """Its text nodes' texts, one a line (a text never holds a line break: whitespace is
    collapsed); whether a formed row's templates explain the email is decided from these
    (`tokens.text_hashes`). One string, not ~20 (path, text) pairs: it crosses the
    process boundary as one object."""

    def text_list(self) -> list[str]:
        """The text nodes' texts."""
        return self.texts.split("\n") if self.texts else []


Submitted = tuple[str, str, str, str, int]
"""(sender, recipient id, subject, html body, received at ms) of one submitted email."""


def fingerprint_for_store(
    items: Sequence[Submitted], params: SchemeParams, hash_key: bytes
) -> list[ToStore | None]:
    """Submitted emails -> their row keys, recipient hash, stored form and text nodes."""
    out: list[ToStore | None] = []
    for sender, recipient, subject, html, received_at_ms in items:
        try:
            structure, _, keys = _core(sender, html, params)
            user = recipient_hash(recipient, hash_key)
            stored = ClusterEmail(user, sender, subject, structure.texts, received_at_ms)
            texts = "\n".join(text for _, text in structure.texts)
            out.append(ToStore(keys, user.encode(), encode_cluster_email(stored), texts))
        except Exception:
            out.append(None)
    return out


class Formed(NamedTuple):
    """What FormTemplate(h) hands back to the event loop."""

    templates: list[TemplateValue]
    encoded: bytes
    """`templates` in their stored form (empty when none formed): encoded here, not on the loop."""
    left_out: int
    """Emails in no template."""
    emails: int
    """s: emails the row held."""
    users: int
    """n: their distinct recipients."""
    read: dict[str, int]
    """Per formed template, the emails its field rules were read from (`form_templates`)."""


def form_row(  # noqa: PLR0917 - FormTemplate(h)'s inputs
    key: bytes,
    payloads: Sequence[bytes],
    k: int,
    now_ms: int,
    params: SchemeParams,
    previous: Sequence[TemplateValue] = (),
    settled: Mapping[str, int] | None = None,
    defer_rules: bool = False,
) -> Formed:
    """FormTemplate(h) over the row's fetched emails (k re-checked inside); `previous` are
    the row's templates so far, whose ids the templates they continue keep (and, for the
    ids in `settled`, their field rules: `form_templates`, which `defer_rules` asks to keep
    whatever their sample)."""
    emails = [decode_cluster_email(p) for p in payloads]
    left_out: list[int] = []
    read: dict[str, int] = {}
    formed = form_templates(
        key, emails, k, now_ms, params, left_out, previous, settled or {}, read,
        defer_rules=defer_rules,
    )  # fmt: skip
    encoded = encode_templates(formed) if formed else b""
    users = len({e.user for e in emails})
    return Formed(formed, encoded, len(left_out), len(emails), users, read)
