"""Long id lists as a few compressed blobs: how adapters store a fan-out's recipients.

A 300,000-recipient announcement must be resumable by any server after a crash, so its
ordered recipient list is stored beside its progress. Ids never contain NUL (every id is
validated so), which makes NUL a safe separator; each part holds up to `PART_IDS` ids,
zstd-compressed, so no single value nears an engine's cell or row limits (300,000 typical
ids are ~1.5 MB raw, ~0.5 MB stored in 8 parts).
"""

from __future__ import annotations

from collections.abc import Sequence

import zstandard

from storage.errors import StorageCorrupt

__all__ = ["PART_IDS", "decode_parts", "encode_parts"]

PART_IDS = 40_000
_VERSION = b"\x01"
_LEVEL = 3


def encode_parts(ids: Sequence[str]) -> list[bytes]:
    """The ids, in order, as blobs of at most `PART_IDS` ids each (none for no ids)."""
    compressor = zstandard.ZstdCompressor(level=_LEVEL)
    return [
        _VERSION + compressor.compress("\x00".join(ids[i : i + PART_IDS]).encode("utf-8"))
        for i in range(0, len(ids), PART_IDS)
    ]


def decode_parts(parts: Sequence[bytes]) -> list[str]:
    """The ids `encode_parts` stored, in order; StorageCorrupt for bytes it did not write."""
    decompressor = zstandard.ZstdDecompressor()
    ids: list[str] = []
    for part in parts:
        if part[:1] != _VERSION:
            raise StorageCorrupt("id list part of an unknown version")
        try:
            text = decompressor.decompress(part[1:]).decode("utf-8")
        except (zstandard.ZstdError, UnicodeDecodeError) as exc:
            raise StorageCorrupt(f"id list part does not decode: {exc}") from exc
        ids.extend(text.split("\x00"))
    return ids
