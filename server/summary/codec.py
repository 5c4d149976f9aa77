"""Compression of the summary body: Zstandard level 3 (the seed used gzip).

Since format v2 the sketched sets are CPC sketches, already entropy-coded, so zstd earns its
keep on exact id sets and a body that holds only sketches is stored raw (``NONE``, chosen
whenever compression would not shrink the body). The tables below measured the v1 body
(bitmaps + HLL registers), which is why a codec was chosen at all.

Measured with ``python -m loadtest.benches.summary_codec`` (2-core VM, Python 3.11, zstandard 0.25,
brotli 1.2.1) on the real uncompressed summary body (n DELIVERED, n/2 READ, n/10 FAILED:
bitmaps + HLL registers, or exact ids at n <= 250). Compressed bytes (ratio raw/compressed)::

    codec          n=251         n=1K         n=10K        n=50K        n=100K       n=1M
    none        21,567 (1)   42,255 (1)   61,443 (1)   61,443 (1)   61,443 (1)   53,251 (1)
    gzip-9       1,290 (17)   4,203 (10)  19,125 (3.2) 30,516 (2.0) 30,588 (2.0) 23,597 (2.3)
    zlib-6       1,468 (15)   4,689 (9.0) 19,774 (3.1) 30,667 (2.0) 30,658 (2.0) 23,606 (2.3)
    zlib-9       1,278 (17)   4,191 (10)  19,113 (3.2) 30,504 (2.0) 30,576 (2.0) 23,585 (2.3)
    bz2-9        1,262 (17)   3,927 (11)  19,651 (3.1) 29,354 (2.1) 29,041 (2.1) 22,146 (2.4)
    lzma-6       1,240 (17)   3,660 (12)  15,024 (4.1) 25,244 (2.4) 24,508 (2.5) 18,280 (2.9)
    zstd-3  <-   1,457 (15)   4,734 (8.9) 19,688 (3.1) 31,055 (2.0) 30,649 (2.0) 23,485 (2.3)
    zstd-9       1,372 (16)   4,392 (9.6) 18,817 (3.3) 30,343 (2.0) 29,768 (2.1) 23,254 (2.3)
    zstd-19      1,267 (17)   3,752 (11)  17,406 (3.5) 28,765 (2.1) 28,438 (2.2) 21,723 (2.5)
    brotli-5     1,380 (16)   4,382 (9.6) 18,561 (3.3) 28,208 (2.2) 28,367 (2.2) 22,900 (2.3)
    brotli-11    1,107 (19)   3,277 (13)  14,502 (4.2) 24,432 (2.5) 22,706 (2.7) 17,682 (3.0)

Compress + decompress time, µs (median of 15)::

    codec        n=251    n=1K    n=10K    n=50K   n=100K     n=1M
    gzip-9       2,061  11,443   34,339   15,884    8,687    5,060
    zlib-6         145     981    3,558    4,272    4,375    3,649
    zlib-9       2,086  11,460   33,173   15,913    8,876    5,157
    bz2-9          514   1,372    4,420    5,686    5,735    4,415
    lzma-6       4,014  11,969   19,025   14,579   13,230   10,254
    zstd-3  <-      25      62      163      235      274      252
    zstd-9         150     564    1,441    1,466    1,543    1,375
    zstd-19      7,843  17,241   19,459   12,546   11,181    9,162
    brotli-5       118     543    1,486    1,700    1,824    1,598
    brotli-11   35,165  63,708   86,544   74,529   85,707   60,280

Why zstd-3: every RecordDeliveryEvents re-encodes the row on a 2-core server, so CPU per
encode matters more than the last few KB. zstd-3 lands within ±3 % of gzip-9's size (which is
also ~all that deflate can do: Huffman-only deflate gets 20,989 B at 1M) at 1/20-1/200 of its
time (25-275 µs vs 2-34 ms). lzma and brotli-11 are 20-25 % smaller but cost 4-86 ms per row;
brotli-5 is 3-8 % smaller at 7x zstd's time. Every size here is < 8 % of DynamoDB's 400 KB item
limit (the worst, ~31 KB, is the mid range where the 4 KiB bitmaps are half full and random).

HLL registers are near their entropy floor (~3.5 bits per register at this size), so the
remaining headroom would need a sketch-specific packing (HLL_4 / CPC), not a better codec.

The codec id is stored in every row, so a later codec can be added without a migration;
``NONE`` is used when compression would not shrink the body (tiny exact summaries).
"""

from __future__ import annotations

import zlib
from enum import IntEnum

import zstandard

__all__ = ["MAX_BODY_BYTES", "ZSTD_LEVEL", "CodecId", "compress", "decompress"]

ZSTD_LEVEL = 3
MAX_BODY_BYTES = 1 << 20
"""Decompression-bomb guard: the largest legal body (default params) is ~61.5 KB."""


class CodecId(IntEnum):
    """Codec byte stored in the summary header."""

    NONE = 0
    ZLIB = 1  # decode-only: accepted for rows written by a gzip/zlib-era writer
    ZSTD = 2


def compress(body: bytes) -> tuple[int, bytes]:
    """Return (codec id, payload): zstd level 3, or the raw body when that is smaller."""
    packed = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=False).compress(body)
    if len(packed) >= len(body):
        return CodecId.NONE, body
    return CodecId.ZSTD, packed


def decompress(codec_id: int, payload: bytes) -> bytes:
    """Inverse of :func:`compress`; ValueError on an unknown codec or an oversized body."""
    try:
        codec = CodecId(codec_id)
    except ValueError:
        raise ValueError(f"unknown summary codec {codec_id}") from None
    if codec is CodecId.NONE:
        return payload
    try:
        if codec is CodecId.ZLIB:
            inflater = zlib.decompressobj()
            body = inflater.decompress(payload, MAX_BODY_BYTES)
            if inflater.unconsumed_tail:
                raise ValueError("summary body too large")
            return body
        return zstandard.ZstdDecompressor().decompress(payload, max_output_size=MAX_BODY_BYTES)
    except (zlib.error, zstandard.ZstdError) as exc:
        raise ValueError(f"corrupt summary payload: {exc}") from exc
