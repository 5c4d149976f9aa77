"""Opaque ListInbox page tokens: a keyset cursor, versioned and checksummed.

A token is urlsafe base64 (no padding) of::

    version:u8  filter:u8  last_message_id:i64  thread_id:utf-8   checksum:8 bytes

The cursor is the last entry returned, in the listing order (last_message_id descending,
thread_id ascending); the next page starts strictly after it. A thread that gets new
activity moves above the cursor, so paging on while messages arrive never repeats an
entry nor skips one that did not change. The checksum (BLAKE2b keyed with a constant and
the inbox id) is integrity, not secrecy: it rejects a corrupted or hand-edited token, or one
issued for another inbox, with INVALID_ARGUMENT instead of a silently wrong page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass

from server.inbox.model import InboxFilter

__all__ = ["Cursor", "decode", "encode"]

_VERSION = 1
_HEAD = struct.Struct(">BBq")
_SUM_BYTES = 8
_KEY = b"loom.v1.Inbox/page-token"
_MAX_TOKEN_CHARS = 1024


@dataclass(frozen=True, slots=True)
class Cursor:
    """The position after which the next page starts."""

    last_message_id: int
    thread_id: str
    filter: InboxFilter

    def sort_key(self) -> tuple[int, str]:
        """The cursor's place in the listing order."""
        return (-self.last_message_id, self.thread_id)


def _checksum(inbox_id: str, body: bytes) -> bytes:
    h = hashlib.blake2b(key=_KEY, digest_size=_SUM_BYTES)
    h.update(inbox_id.encode("utf-8") + b"\x00" + body)
    return h.digest()


def encode(cursor: Cursor, inbox_id: str) -> str:
    """The token of `cursor` for `inbox_id`."""
    body = _HEAD.pack(_VERSION, int(cursor.filter), cursor.last_message_id)
    body += cursor.thread_id.encode("utf-8")
    raw = body + _checksum(inbox_id, body)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode(token: str, inbox_id: str) -> Cursor:
    """The cursor in `token`; ValueError (with a caller-safe reason) when it is not one of ours."""
    if len(token) > _MAX_TOKEN_CHARS:
        raise ValueError("is too long to be a page token")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("is not a page token from this service") from None
    if len(raw) < _HEAD.size + _SUM_BYTES:
        raise ValueError("is not a page token from this service")
    body, check = raw[:-_SUM_BYTES], raw[-_SUM_BYTES:]
    if check != _checksum(inbox_id, body):
        raise ValueError("is corrupted or belongs to another inbox")
    version, flt, last_message_id = _HEAD.unpack_from(body)
    if version != _VERSION:
        raise ValueError(f"has unsupported version {version}")
    try:
        return Cursor(last_message_id, body[_HEAD.size :].decode("utf-8"), InboxFilter(flt))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("is not a page token from this service") from None
