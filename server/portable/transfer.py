"""`loom dump`, `loom load` and `loom migrate`: streaming a service's store out of one
deployment and into another, through a dump directory or directly.

- A dump of an embedded (SQLite) store is a consistent snapshot: the store is first copied
  with SQLite's online backup API (`server.portable.backup.snapshot`), then scanned. A dump
  of a distributed store is a scan of the live store: rows written while it runs may or may
  not be in it (the manifest says ``"consistency": "scan"``). Dump a quiesced store, or dump
  again after the writers moved, and load both: loading is idempotent.
- A load checks the whole dump first (version, service, sizes, hashes), then writes batch by
  batch, recording after each batch how far it got in a state file beside the dump, so a
  load killed at any point and run again resumes there (the batch in flight is written
  again, which changes nothing). Loading into a store that already holds data merges, the
  way each service's data model does (``server/<service>/portable.py``).
- A migration streams from one store into the other with no file between them, then
  compares the two semantically and fails unless they agree.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from server import registry
from server.config import Settings
from server.portable.backup import snapshot
from server.portable.format import DumpWriter, OpenedDump, open_dump, read_records
from server.portable.progress import Progress
from server.portable.records import PAGE, ServiceData

__all__ = ["MigrationDiffers", "Moved", "dump", "load", "migrate"]


class MigrationDiffers(RuntimeError):
    """The target of a migration does not answer as its source does."""


@dataclass(frozen=True, slots=True)
class Moved:
    """One service moved: records and seconds."""

    service: str
    records: int
    seconds: float


@asynccontextmanager
async def _source(service: str, settings: Settings) -> AsyncIterator[tuple[ServiceData, str]]:
    """The store to read, and whether it is a snapshot or a scan: an embedded store is read
    from an online copy (one consistent point in time, the live store keeps serving)."""
    if registry.by_name(service).data.engine(settings) != "sqlite":
        data = await registry.by_name(service).data.open(settings)
        try:
            yield data, "scan"
        finally:
            await data.close()
        return
    live = Path(settings.sqlite.data_dir) / registry.by_name(service).data.sqlite_file
    if not live.exists():
        raise FileNotFoundError(f"{live}: no {service} store (is --data-dir the server's?)")
    with tempfile.TemporaryDirectory(prefix="loom-snapshot-", dir=live.parent) as tmp:
        snapshot(live, Path(tmp) / live.name)
        copy = replace(settings, sqlite=replace(settings.sqlite, data_dir=tmp))
        data = await registry.by_name(service).data.open(copy)
        try:
            yield data, "snapshot"
        finally:
            await data.close()


async def _count(data: ServiceData) -> int:
    total = 0
    async for _, page in data.scan():
        total += len(page)
    return total


async def dump(service: str, settings: Settings, out: Path) -> OpenedDump:
    """Writes `service`'s store into the dump directory `out`."""
    async with _source(service, settings) as (data, consistency):
        writer = DumpWriter(
            out,
            service=service,
            source_engine=registry.by_name(service).data.engine(settings),
            consistency=consistency,
        )
        for kind in data.kinds:
            writer.declare(kind.name, kind.message.DESCRIPTOR.full_name)
        with Progress(f"dump {service}", None) as progress:
            async for kind_name, page in data.scan():
                writer.write(kind_name, list(page))
                progress.add(len(page))
        opened = writer.finish()
    return opened


def check(directory: Path, service: str | None = None) -> OpenedDump:
    """The dump in `directory`, checked whole (see `open_dump`), of `service` when given."""
    kinds = {
        name: {k.name: k.message.DESCRIPTOR.full_name for k in entry.kinds}
        for name, entry in registry.portable().items()
    }
    return open_dump(directory, service=service, kinds=kinds)


def _state_file(opened: OpenedDump, service: str, settings: Settings) -> Path:
    """Where a load into this target records its progress: beside the dump, one file per
    target (its engine and where it is), so two targets never share one."""
    engine = registry.by_name(service).data.engine(settings)
    where = {
        "sqlite": str(Path(settings.sqlite.data_dir).resolve()),
        "cassandra": f"{','.join(settings.cassandra.contact_points)}/{settings.cassandra.keyspace}",
        "bigtable": f"{settings.bigtable.project}/{settings.bigtable.instance}/"
        f"{settings.bigtable.table_prefix}",
        "dynamodb": f"{settings.dynamodb.endpoint_url}/{settings.dynamodb.table_prefix}",
    }.get(engine, engine)
    digest = hashlib.sha256(
        f"{engine}|{where}|{[f.sha256 for f in opened.manifest.files]}".encode()
    ).hexdigest()[:16]
    return opened.directory / f".load-{service}-{engine}-{digest}.json"


async def load(opened: OpenedDump, settings: Settings) -> Moved:
    """Loads a dump `check` accepted into the store `settings` configure for its service."""
    directory = opened.directory
    service = opened.manifest.service
    state_path = _state_file(opened, service, settings)
    try:
        done: dict[str, int] = json.loads(state_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        done = {}
    messages = {k.name: k.message for k in registry.by_name(service).data.kinds}
    data = await registry.by_name(service).data.open(settings)
    started = time.monotonic()
    try:
        with Progress(f"load {service}", opened.total) as progress:
            progress.add(sum(done.values()))
            for entry in opened.manifest.files:
                skip = done.get(entry.kind, 0)
                for batch in read_records(directory, entry, messages[entry.kind], PAGE, skip=skip):
                    await data.load(entry.kind, batch)
                    done[entry.kind] = done.get(entry.kind, 0) + len(batch)
                    _save(state_path, done)
                    progress.add(len(batch))
    finally:
        await data.close()
    state_path.unlink(missing_ok=True)
    return Moved(service, opened.total, time.monotonic() - started)


def _save(path: Path, done: dict[str, int]) -> None:
    partial = path.with_suffix(".partial")
    with partial.open("w", encoding="utf-8") as out:
        json.dump(done, out)
        out.flush()
        os.fsync(out.fileno())
    partial.replace(path)


async def migrate(
    service: str, source: Settings, target: Settings, *, verify: bool = True
) -> Moved:
    """Streams `service`'s store from `source`'s deployment into `target`'s, then compares
    them; `MigrationDiffers` when the target does not answer as the source does."""
    async with _source(service, source) as (data, _):
        into = await registry.by_name(service).data.open(target)
        started = time.monotonic()
        try:
            total = await _count(data)
            records = 0
            with Progress(f"migrate {service}", total) as progress:
                async for kind, page in data.scan():
                    await into.load(kind, page)
                    records += len(page)
                    progress.add(len(page))
            if verify:
                differs = await data.differences(into, limit=10)
                if differs:
                    raise MigrationDiffers(
                        f"{service}: the target differs from the source: " + "; ".join(differs)
                    )
        finally:
            await into.close()
    return Moved(service, records, time.monotonic() - started)
