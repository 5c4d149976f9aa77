"""Rerunnable codec comparison on real summary bodies: ``python -m loadtest.benches.summary_codec``.

For each n it builds a realistic summary (n DELIVERED, n/2 of them READ, n/10 other recipients
FAILED), takes the exact uncompressed body that ``MessageSummary.encode`` compresses (tier bytes,
bitmaps, HLL registers, or exact ids), and times compress + decompress for every codec
available. Codecs whose module is missing are skipped, so the script runs on a bare install.
Output: a Markdown table of compressed bytes, ratio (raw / compressed) and µs per
encode+decode (median of ``--repeat`` runs). The figures in ``codec.py`` come from this script.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import importlib
import lzma
import statistics
import time
import zlib
from collections.abc import Callable
from typing import Any

from server.summary.model import STATUS_ORDER, DeliveryStatus, MessageSummary
from server.summary.recipients import RecipientSet, SketchParams
from server.summary.sketch import hash_recipient

__all__ = ["Codec", "build_body", "codecs", "main", "measure"]

Codec = tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]


def _optional(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def codecs() -> dict[str, Codec]:
    """Every codec worth comparing; gzip is what Remind used."""
    out: dict[str, Codec] = {
        "none": (lambda b: b, lambda b: b),
        "gzip-9": (lambda b: gzip.compress(b, 9, mtime=0), gzip.decompress),
        "zlib-6": (lambda b: zlib.compress(b, 6), zlib.decompress),
        "zlib-9": (lambda b: zlib.compress(b, 9), zlib.decompress),
        "bz2-9": (lambda b: bz2.compress(b, 9), bz2.decompress),
        "lzma-6": (lambda b: lzma.compress(b, preset=6), lzma.decompress),
        "lzma-raw": (
            lambda b: lzma.compress(b, format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS),
            lambda b: lzma.decompress(b, format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS),
        ),
    }
    zstd = _optional("zstandard")
    if zstd is not None:
        for level in (3, 9, 19):
            cctx = zstd.ZstdCompressor(level=level, write_content_size=True, write_checksum=False)
            out[f"zstd-{level}"] = (cctx.compress, zstd.ZstdDecompressor().decompress)
    brotli = _optional("brotli")
    if brotli is not None:
        for quality in (5, 11):
            out[f"brotli-{quality}"] = (_brotli(brotli, quality), brotli.decompress)
    return out


def _brotli(module: Any, quality: int) -> Callable[[bytes], bytes]:
    def enc(body: bytes) -> bytes:
        return bytes(module.compress(body, quality=quality))

    return enc


_LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 6}]


def build_body(n: int, seed: int = 1) -> bytes:
    """Uncompressed body of a summary with n delivered, n/2 read, n/10 failed recipients."""
    params = SketchParams()
    sets = {s: RecipientSet(params) for s in STATUS_ORDER}
    chunk = 10_000
    for start in range(0, n, chunk):
        ids = [f"{seed}-{i}" for i in range(start, min(n, start + chunk))]
        hashes = [hash_recipient(i) for i in ids]
        sets[DeliveryStatus.DELIVERED].add(ids, hashes)
        half = len(ids) // 2
        sets[DeliveryStatus.READ].add(ids[:half], hashes[:half])
    failed = [f"{seed}-failed-{i}" for i in range(max(1, n // 10))]
    sets[DeliveryStatus.FAILED].add(failed)
    return b"".join(sets[s].encode() for s in STATUS_ORDER)


def measure(body: bytes, codec: Codec, repeat: int) -> tuple[int, float]:
    """(compressed size, median µs of one compress + decompress)."""
    enc, dec = codec
    times = []
    size = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        packed = enc(body)
        assert dec(packed) == body
        times.append(time.perf_counter() - t0)
        size = len(packed)
    return size, statistics.median(times) * 1e6


def main(argv: list[str] | None = None) -> None:
    """Print the comparison table (and a whole-summary check with the production codec)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="251,1000,10000,50000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    bodies = {n: build_body(n) for n in sizes}
    table = codecs()
    print("| codec | " + " | ".join(f"n={n:,} B (ratio, µs)" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name, codec in table.items():
        cells = []
        for n in sizes:
            size, micros = measure(bodies[n], codec, args.repeat)
            cells.append(f"{size:,} ({len(bodies[n]) / size:.1f}x, {micros:,.0f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    print("raw body bytes: " + ", ".join(f"n={n:,}: {len(b):,}" for n, b in bodies.items()))
    full = MessageSummary.decode(MessageSummary().encode())
    print(f"empty summary encodes to {len(full.encode())} bytes with the production codec")


if __name__ == "__main__":
    main()
