"""ThreadWeaver's domain values, free of protobuf and of any engine."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from storage.ports import ThreadKey

__all__ = [
    "MAX_ID_BYTES",
    "MAX_UT_BYTES",
    "Message",
    "UnifiedThread",
    "WeaveResult",
    "default_ut",
    "normalize_message_id",
    "rfc_key",
]


@dataclass(frozen=True, slots=True)
class Message:
    """One message as seen in one mailbox."""

    thread: ThreadKey
    rfc_message_id: str
    """The Message-ID header value; empty when the sending system set none."""
    sent_at_ms: int


@dataclass(frozen=True, slots=True)
class WeaveResult:
    """What weaving one message did."""

    unified_thread_id: str
    """Canonical id (smallest UT id of the merge closure) of the message's thread."""
    merged: bool
    """True when this message recorded a merge of two unified threads."""


@dataclass(frozen=True, slots=True)
class UnifiedThread:
    """A read of one unified thread, as a team sees it."""

    unified_thread_ids: list[str]
    threads: list[ThreadKey]
    thread_count: int
    oversized: bool
    message_count: int
    last_message_at_ms: int | None


_ESCAPED = str.maketrans({"%": "%25", "/": "%2F", ":": "%3A"})

MAX_ID_BYTES = 512
"""Longest gid or thread id, in UTF-8 bytes (a gid or a Gmail thread id is ~20)."""
MAX_UT_BYTES = 3 * MAX_ID_BYTES + 1 + 3 * MAX_ID_BYTES
"""Longest id `default_ut` makes (3,073 bytes: every byte of both ids escaped to three);
each engine's key limit holds it (Bigtable's 4 KiB row key is the tightest)."""


def default_ut(thread: ThreadKey) -> str:
    """A new UT's id, ``gid/thread_id`` with ``%``, ``/`` and ``:`` percent-encoded in each.

    Deterministic, so retries and racing writers propose the same id. The seed's
    ``"$gid:$threadId"`` is not injective: ("a:b", "c") and ("a", "b:c") both gave
    ``a:b:c``, so two unrelated threads shared one UT and read as one conversation (provider
    prefixed ids hold ``:``). Here the one unescaped ``/`` splits the id and
    `urllib.parse.unquote` restores each part, so distinct threads get distinct ids; and no
    id holds a ``:``, while every id of the old form does, so a new id never equals one
    already stored (those are kept as they are: a UT id is opaque to everything else).
    Ordinary ids (digits, hex, e-mail addresses) read unchanged, e.g. ``alice/a1``.
    """
    return f"{thread.gid.translate(_ESCAPED)}/{thread.thread_id.translate(_ESCAPED)}"


def normalize_message_id(value: str) -> str:
    """The Message-ID as it is keyed: trimmed, without one pair of surrounding angle brackets.

    Mail APIs hand out the same header differently: the raw ``<a@b.example>``, the bare
    ``a@b.example`` (some strip the brackets), either with stray whitespace from header
    folding. Copies fetched through different APIs must meet, so all three key alike. Only
    whitespace and one bracket pair are dropped (after which the inside is trimmed again);
    case and everything else are kept, since the local part is case-sensitive. A value
    that normalizes to nothing (``""``, ``"  "``, ``"<>"``) means "no Message-ID".
    """
    text = value.strip()
    if len(text) >= 2 and text[0] == "<" and text[-1] == ">":
        text = text[1:-1].strip()
    return text


def rfc_key(message: Message) -> bytes:
    """The 16-byte MD5 of the normalized Message-ID: the seed's md5_rfc_message_id.

    A message without a Message-ID gets a key private to its mailbox thread and send time:
    it cannot (and must not) unify anything across mailboxes, yet retries stay idempotent
    and it still counts once in its unified thread's statistics.
    """
    normalized = normalize_message_id(message.rfc_message_id)
    if normalized:
        material = b"rfc\x00" + normalized.encode("utf-8")
    else:
        t = message.thread
        material = f"none\x00{t.gid}\x00{t.thread_id}\x00{message.sent_at_ms}".encode()
    return hashlib.md5(material, usedforsecurity=False).digest()
