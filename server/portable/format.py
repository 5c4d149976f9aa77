"""The portable dump format on disk: a manifest and varint-length-delimited record files.

`loom.v1.DumpManifest` (protos/loom/v1/dump.proto) documents the format for other languages.
A `DumpWriter` streams records into one file per kind, hashing as it goes, and writes the
manifest last (atomically), so a dump without a manifest is an unfinished one. `open_dump`
checks a dump whole (format version, service, every file's size and sha256 against the
manifest) before a loader writes anything; `read_records` then streams a file's records in
batches, memory bounded by the batch.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from loom.v1 import dump_pb2

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST",
    "READABLE_VERSIONS",
    "DumpError",
    "DumpWriter",
    "OpenedDump",
    "open_dump",
    "read_records",
]

FORMAT_VERSION = 1
"""The version this Loom writes."""

READABLE_VERSIONS = frozenset({1})
"""The versions this Loom reads."""

MANIFEST = "manifest.json"

_MAX_RECORD = 64 << 20
"""No record of any kind comes near this (a summary is < 400 KB, an email < 1 MB)."""


class DumpError(ValueError):
    """A dump that cannot be read or written as asked; the message names the file."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class _RecordFile:
    """One record file being written: framing, hashing and counting as records go in."""

    def __init__(self, path: Path, kind: str, record_type: str) -> None:
        self.path = path
        self.kind = kind
        self.record_type = record_type
        self.records = 0
        self.bytes = 0
        self._sha = hashlib.sha256()
        self._out: BinaryIO = path.open("wb")

    def write(self, messages: list[Message]) -> None:
        chunk = bytearray()
        for message in messages:
            body = message.SerializeToString()
            chunk += _varint(len(body))
            chunk += body
        self._out.write(chunk)
        self._sha.update(chunk)
        self.records += len(messages)
        self.bytes += len(chunk)

    def close(self) -> dump_pb2.DumpFile:
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        return dump_pb2.DumpFile(
            name=self.path.name,
            kind=self.kind,
            record_type=self.record_type,
            records=self.records,
            bytes=self.bytes,
            sha256=self._sha.hexdigest(),
        )


class DumpWriter:
    """Writes one service's dump into `directory` (created; must hold no dump yet)."""

    def __init__(
        self, directory: Path, *, service: str, source_engine: str, consistency: str
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        if (directory / MANIFEST).exists():
            raise DumpError(
                f"{directory / MANIFEST}: a dump is already there; choose another --out"
            )
        self.directory = directory
        self._manifest = dump_pb2.DumpManifest(
            format_version=FORMAT_VERSION,
            service=service,
            source_engine=source_engine,
            consistency=consistency,
            loom_version=_loom_version(),
        )
        self._manifest.dumped_at.FromDatetime(datetime.now(UTC))
        self._files: dict[str, _RecordFile] = {}

    def write(self, kind: str, messages: list[Message]) -> None:
        """Appends `messages` (all of one type) to the file of `kind`."""
        if not messages:
            return
        out = self._files.get(kind)
        if out is None:
            out = self._open(kind, messages[0].DESCRIPTOR.full_name)
        out.write(messages)

    def declare(self, kind: str, record_type: str) -> None:
        """Creates the file of `kind` even if no record of it comes (an empty relation)."""
        if kind not in self._files:
            self._open(kind, record_type)

    def _open(self, kind: str, record_type: str) -> _RecordFile:
        out = _RecordFile(self.directory / f"{kind}.pb", kind, record_type)
        self._files[kind] = out
        return out

    def finish(self) -> OpenedDump:
        """Closes every file and writes the manifest (atomically, last); the dump as written
        (its hashes were taken while writing, so nothing is read back)."""
        self._manifest.files.extend(f.close() for f in self._files.values())
        text = json_format.MessageToJson(self._manifest, always_print_fields_with_no_presence=True)
        partial = self.directory / (MANIFEST + ".partial")
        with partial.open("w", encoding="utf-8") as out:
            out.write(text + "\n")
            out.flush()
            os.fsync(out.fileno())
        partial.replace(self.directory / MANIFEST)
        return OpenedDump(self.directory, self._manifest)


@dataclass(frozen=True, slots=True)
class OpenedDump:
    """A dump whose manifest and files were all checked."""

    directory: Path
    manifest: dump_pb2.DumpManifest

    def file(self, kind: str) -> dump_pb2.DumpFile | None:
        """The file of `kind`, when the dump has one."""
        for entry in self.manifest.files:
            if entry.kind == kind:
                return entry
        return None

    @property
    def total(self) -> int:
        """Records in every file."""
        return sum(f.records for f in self.manifest.files)


def open_dump(
    directory: Path,
    *,
    service: str | None = None,
    kinds: Mapping[str, Mapping[str, str]] | None = None,
) -> OpenedDump:
    """Reads and checks the dump in `directory`: a readable format version, the expected
    `service`, a service `kinds` knows with only its kinds (service -> kind -> record type),
    and every file present with the size, sha256 and record count the manifest gives. Raises
    `DumpError` naming the file otherwise."""
    path = directory / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DumpError(f"{path}: no manifest (not a dump, or an unfinished one)") from None
    manifest = dump_pb2.DumpManifest()
    try:
        json_format.Parse(text, manifest)
    except json_format.ParseError as exc:
        raise DumpError(f"{path}: not a dump manifest: {exc}") from None
    if manifest.format_version not in READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in sorted(READABLE_VERSIONS))
        raise DumpError(
            f"{path}: format version {manifest.format_version} is not readable "
            f"by this Loom (it reads version {readable})"
        )
    if service is not None and manifest.service != service:
        raise DumpError(f"{path}: a dump of {manifest.service!r}, not of {service!r}")
    known: Mapping[str, str] | None = None
    if kinds is not None:
        if manifest.service not in kinds:
            raise DumpError(f"{path}: a dump of unknown service {manifest.service!r}")
        known = kinds[manifest.service]
    for entry in manifest.files:
        _check_file(directory, entry, known)
    return OpenedDump(directory, manifest)


def _check_file(directory: Path, entry: dump_pb2.DumpFile, kinds: Mapping[str, str] | None) -> None:
    if Path(entry.name).name != entry.name or not entry.name:
        raise DumpError(f"{directory / MANIFEST}: file name {entry.name!r} is not a plain name")
    path = directory / entry.name
    if kinds is not None and kinds.get(entry.kind) != entry.record_type:
        raise DumpError(
            f"{path}: kind {entry.kind!r} of {entry.record_type!r} is not one this service has"
        )
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise DumpError(f"{path}: missing (the manifest lists it)") from None
    if size != entry.bytes:
        raise DumpError(f"{path}: {size} bytes, the manifest says {entry.bytes} (truncated?)")
    with path.open("rb") as src:
        digest = hashlib.file_digest(src, "sha256").hexdigest()
    if digest != entry.sha256:
        raise DumpError(f"{path}: sha256 differs from the manifest's (changed since the dump)")
    records = _count_records(path)
    if records != entry.records:
        raise DumpError(f"{path}: {records} records, the manifest says {entry.records}")


def _count_records(path: Path) -> int:
    """Records in a file, by their lengths alone (nothing decoded)."""
    seen = 0
    with path.open("rb") as src:
        while (length := _read_varint(src, path)) is not None:
            if length > _MAX_RECORD:
                raise DumpError(f"{path}: record {seen + 1} claims {length} bytes")
            src.seek(length, os.SEEK_CUR)
            seen += 1
        if src.tell() > path.stat().st_size:
            raise DumpError(f"{path}: the last record is cut short")
    return seen


def read_records(
    directory: Path, entry: dump_pb2.DumpFile, message_type: type[Message], batch: int,
    skip: int = 0,
) -> Iterator[list[Message]]:  # fmt: skip
    """The records of `entry`, `batch` at a time, after the first `skip` (a resumed load).

    Also checks the count against the manifest's (the sizes and hashes were checked by
    `open_dump`)."""
    path = directory / entry.name
    seen = 0
    out: list[Message] = []
    with path.open("rb") as src:
        while True:
            length = _read_varint(src, path)
            if length is None:
                break
            if length > _MAX_RECORD:
                raise DumpError(f"{path}: record {seen + 1} claims {length} bytes")
            body = src.read(length)
            if len(body) != length:
                raise DumpError(f"{path}: record {seen + 1} is cut short")
            seen += 1
            if seen <= skip:
                continue
            message = message_type()
            try:
                message.ParseFromString(body)
            except DecodeError as exc:
                raise DumpError(f"{path}: record {seen} does not decode: {exc}") from None
            out.append(message)
            if len(out) >= batch:
                yield out
                out = []
    if out:
        yield out
    if seen != entry.records:
        raise DumpError(f"{path}: {seen} records, the manifest says {entry.records}")


def _read_varint(src: BinaryIO, path: Path) -> int | None:
    shift = result = 0
    while True:
        byte = src.read(1)
        if not byte:
            if shift:
                raise DumpError(f"{path}: ends inside a record's length")
            return None
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return result
        shift += 7
        if shift > 63:
            raise DumpError(f"{path}: a record length is not a varint")


def _loom_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loom")
    except PackageNotFoundError:
        return "unknown"
