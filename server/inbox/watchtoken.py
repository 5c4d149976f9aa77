"""Opaque resume tokens of WatchInbox and GetInboxChanges: a position in one inbox's change
log, versioned and checksummed.

A token is urlsafe base64 (no padding) of::

    version:u8  changed_at_ms:i64  position:utf-8   checksum:8 bytes

The position is the store's (`storage.ports.inbox_changes`); `changed_at_ms` is when the
change at it was applied (or when the stream started), which is how a token older than the
change log's retention is told apart (RESYNC_REQUIRED) without a read. The checksum (BLAKE2b
keyed with a constant and the inbox id) rejects a corrupted or hand-edited token, or one
issued for another inbox, with INVALID_ARGUMENT.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass

__all__ = ["Resume", "decode", "encode"]

_VERSION = 1
_HEAD = struct.Struct(">Bq")
_SUM_BYTES = 8
_KEY = b"loom.v1.Inbox/resume-token"
_MAX_TOKEN_CHARS = 512


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a stream resumes: strictly after `position`, applied at `changed_at_ms`."""

    position: str
    changed_at_ms: int


def _checksum(inbox_id: str, body: bytes) -> bytes:
    h = hashlib.blake2b(key=_KEY, digest_size=_SUM_BYTES)
    h.update(inbox_id.encode("utf-8") + b"\x00" + body)
    return h.digest()


def encode(resume: Resume, inbox_id: str) -> str:
    """The token of `resume` for `inbox_id`."""
    body = _HEAD.pack(_VERSION, resume.changed_at_ms) + resume.position.encode("utf-8")
    raw = body + _checksum(inbox_id, body)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode(token: str, inbox_id: str) -> Resume:
    """The position in `token`; ValueError (a caller-safe reason) when it is not one of ours."""
    if len(token) > _MAX_TOKEN_CHARS:
        raise ValueError("is too long to be a resume token")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("is not a resume token from this service") from None
    if len(raw) < _HEAD.size + _SUM_BYTES:
        raise ValueError("is not a resume token from this service")
    body, check = raw[:-_SUM_BYTES], raw[-_SUM_BYTES:]
    if check != _checksum(inbox_id, body):
        raise ValueError("is corrupted or belongs to another inbox")
    version, at_ms = _HEAD.unpack_from(body)
    if version != _VERSION:
        raise ValueError(f"has unsupported version {version}")
    try:
        return Resume(body[_HEAD.size :].decode("utf-8"), at_ms)
    except UnicodeDecodeError:
        raise ValueError("is not a resume token from this service") from None
