"""Data that outlives a machine: `loom dump`, `loom load` and `loom migrate` between the
embedded stores and every distributed engine of each port, as a user runs them.

The original stores are built through the gRPC API on SQLite (`tests.portable_data`); every
comparison is semantic, as callers see the data (`ServiceData.differences`): unified threads
and their statistics, inbox listings and unread counts, summaries byte for byte, templates,
finished jobs.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from loom.v1 import dump_pb2

from server import registry
from server.config import Settings, load_settings
from server.portable import transfer
from server.portable.format import DumpWriter
from tests.engines import server_env, settings_for
from tests.portable_data import build_everything, store_files
from tests.serving import run_loom, running_server

pytestmark = pytest.mark.timeout(600)

DISTRIBUTED = [
    ("threadweaver", "bigtable"),
    ("threadweaver", "cassandra"),
    ("inbox", "cassandra"),
    ("summary", "dynamodb"),
    ("templates", "bigtable"),
    ("iterator", "dynamodb"),
]
"""Every distributed engine of every service's port."""


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Every service's store on SQLite, built through the API once for this module."""
    settings = settings_for("sqlite", tmp_path_factory.mktemp("original"))

    async def build() -> None:
        async with running_server(settings) as server:
            await build_everything(server.channel, settings)

    asyncio.run(build())
    return settings


async def _differences(service: str, a: Settings, b: Settings) -> list[str]:
    left, right = (
        await registry.by_name(service).data.open(a),
        await registry.by_name(service).data.open(b),
    )
    try:
        return await left.differences(right, limit=5)
    finally:
        await left.close()
        await right.close()


def _env(data_dir: str) -> dict[str, str]:
    return {"LOOM_SQLITE__DATA_DIR": data_dir}


async def test_dump_then_load_gives_equal_stores_and_another_process_reads_the_dump(
    original: Settings, tmp_path: Path
) -> None:
    """`loom dump --service all` then `loom load` into a fresh data directory: every
    service answers as the original does; a second process with nothing but protobuf reads
    every record the manifest counts; the dump of an embedded store is a snapshot."""
    data_dir = original.sqlite.data_dir
    dumped = await asyncio.to_thread(
        run_loom, "dump", "--service", "all", "--out", str(tmp_path / "d"), env=_env(data_dir)
    )
    assert dumped.returncode == 0, dumped.stderr
    for service in registry.portable():
        manifest = json.loads((tmp_path / "d" / service / "manifest.json").read_text())
        assert manifest["consistency"] == "snapshot"
        assert manifest["formatVersion"] == 1
        assert sum(int(f["records"]) for f in manifest["files"]) > 0, service
    read = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _READER, str(tmp_path / "d")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert "all counts match" in read.stdout, read.stdout
    fresh = tmp_path / "fresh"
    loaded = await asyncio.to_thread(
        run_loom, "load", "--in", str(tmp_path / "d"), env=_env(str(fresh))
    )
    assert loaded.returncode == 0, loaded.stderr
    target = replace(original, sqlite=replace(original.sqlite, data_dir=str(fresh)))
    for service in registry.portable():
        assert await _differences(service, original, target) == [], service


_READER = r"""
import json, sys
from pathlib import Path
from google.protobuf import symbol_database
from loom.v1 import dump_pb2  # the generated module other languages generate too

root = Path(sys.argv[1])
for manifest_path in root.glob("*/manifest.json"):
    manifest = json.loads(manifest_path.read_text())
    for f in manifest["files"]:
        kind = symbol_database.Default().GetSymbol(f["recordType"])
        data = (manifest_path.parent / f["name"]).read_bytes()
        pos = count = 0
        while pos < len(data):
            shift = size = 0
            while True:
                b = data[pos]; pos += 1
                size |= (b & 0x7F) << shift; shift += 7
                if not b & 0x80:
                    break
            kind.FromString(data[pos:pos + size]); pos += size; count += 1
        assert count == int(f["records"]), (f["name"], count, f["records"])
print("all counts match")
"""


@pytest.mark.parametrize(("service", "engine"), DISTRIBUTED, ids=str)
async def test_migrate_to_each_distributed_engine_and_back_keeps_every_answer(
    original: Settings, tmp_path: Path, service: str, engine: str
) -> None:
    """SQLite -> the engine -> a fresh SQLite with `loom migrate`'s streaming and its
    verification at each hop; what comes back answers as the original does."""
    field = registry.by_name(service).data.port.field
    remote = settings_for("sqlite", tmp_path, **{field: engine})
    back = settings_for("sqlite", tmp_path)
    there = await transfer.migrate(service, original, remote)
    assert there.records > 0
    home = await transfer.migrate(service, remote, back)
    assert home.records == there.records
    assert await _differences(service, original, back) == []


async def test_migrate_cli_shows_progress_and_verifies(original: Settings, tmp_path: Path) -> None:
    """`loom migrate --from A.toml --to B.toml --service all` between two SQLite data
    directories: progress lines (records/s) on a non-terminal, and the target verified."""
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(f'[sqlite]\ndata_dir = "{original.sqlite.data_dir}"\n')
    b.write_text(f'[sqlite]\ndata_dir = "{tmp_path / "b"}"\n')
    done = await asyncio.to_thread(
        run_loom, "migrate", "--from", str(a), "--to", str(b), "--service", "all"
    )
    assert done.returncode == 0, done.stderr
    for service in registry.portable():
        assert f"migrated {service} sqlite -> sqlite" in done.stdout, done.stdout
        assert "target verified equal" in done.stdout
    assert "records" in done.stderr, done.stderr
    assert "/s" in done.stderr, done.stderr


def _inbox_dump(directory: Path, rows: int) -> set[tuple[str, str, int, bool]]:
    """A dump of `rows` inbox rows written as another tool would write one."""
    writer = DumpWriter(directory, service="inbox", source_engine="sqlite", consistency="scan")
    made = set()
    batch = []
    for k in range(rows):
        row = (f"ki{k % 500}", f"kt{k}", 10 + k % 7, k % 3 == 0)
        made.add(row)
        batch.append(
            dump_pb2.InboxEntryRecord(
                inbox_id=row[0], thread_id=row[1], last_message_id=row[2], is_read=row[3]
            )
        )
        if len(batch) == 1000:
            writer.write("inbox_entries", list(batch))
            batch = []
    writer.write("inbox_entries", list(batch))
    writer.finish()
    return made


async def _inbox_rows(settings: Settings) -> set[tuple[str, str, int, bool]]:
    store = await registry.by_name("inbox").data.open(settings)
    rows: set[tuple[str, str, int, bool]] = set()
    try:
        async for _, page in store.scan():
            for r in page:
                if isinstance(r, dump_pb2.InboxEntryRecord):
                    rows.add((r.inbox_id, r.thread_id, r.last_message_id, r.is_read))
    finally:
        await store.close()
    return rows


@pytest.mark.parametrize("engine", ["sqlite", "cassandra"])
async def test_a_load_killed_with_sigkill_resumes_where_it_stopped(
    tmp_path: Path, engine: str
) -> None:
    """`loom load` of 20,000 inbox rows killed with SIGKILL midway, then run again: it
    resumes from its recorded progress (not from the start) and the store ends exactly as
    the dump says, unread counts included."""
    made = _inbox_dump(tmp_path / "d", 20_000)
    settings_env = _env(str(tmp_path / "data"))
    if engine != "sqlite":
        settings_env |= server_env(inbox_store=engine)
    target = load_settings(env=settings_env)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")} | settings_env
    loom = str(Path(sys.executable).with_name("loom"))
    log = tmp_path / "load.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(  # noqa: ASYNC220 - started, then watched without blocking
            [loom, "load", "--in", str(tmp_path / "d")], env=env, stdout=sink, stderr=sink
        )
    state = None
    for _ in range(1200):
        found = list((tmp_path / "d").glob(".load-inbox-*.json"))
        if found and json.loads(found[0].read_text() or "{}").get("inbox_entries", 0) >= 3000:
            state = found[0]
            break
        assert process.poll() is None, log.read_text()
        await asyncio.sleep(0.05)
    assert state is not None, "the load recorded no progress"
    process.send_signal(signal.SIGKILL)
    process.wait()
    stopped_at = json.loads(state.read_text())["inbox_entries"]
    assert 0 < stopped_at < 20_000
    # The rest of 20,000 records: ~30 s on a quiet machine, past 60 s beside a CPU burner.
    again = await asyncio.to_thread(
        run_loom, "load", "--in", str(tmp_path / "d"), env=env, timeout_s=600
    )
    assert again.returncode == 0, again.stderr
    assert not state.exists()
    assert await _inbox_rows(target) == made
    store = await registry.by_name("inbox").data.open(target)
    try:
        inbox_store = store.store  # type: ignore[attr-defined]
        unread = {inbox for inbox, _, _, read in made if not read}
        for inbox in sorted(unread)[:50]:
            expected = sum(1 for i, _, _, read in made if i == inbox and not read)
            assert await inbox_store.unread_count(inbox) == expected
    finally:
        await store.close()


async def test_a_wrong_dump_is_refused_naming_the_file_before_any_write(
    original: Settings, tmp_path: Path
) -> None:
    """Truncated, tampered, another format version, another service, a manifest that does
    not match its files, an unreachable target: each exits non-zero with a clear message and
    the target data directory holds no store afterwards."""
    dumped = await asyncio.to_thread(
        run_loom, "dump", "--service", "summary", "--out", str(tmp_path / "good"),
        env=_env(original.sqlite.data_dir),
    )  # fmt: skip
    assert dumped.returncode == 0, dumped.stderr

    def variant(name: str) -> Path:
        copy = tmp_path / name
        shutil.copytree(tmp_path / "good", copy)
        return copy

    record_file = tmp_path / "good" / "summaries.pb"
    truncated = variant("truncated")
    (truncated / "summaries.pb").write_bytes(record_file.read_bytes()[:-7])
    tampered = variant("tampered")
    data = bytearray(record_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tampered / "summaries.pb").write_bytes(bytes(data))
    future = variant("future")
    _edit(future, lambda m: m.update(formatVersion=2))
    miscounted = variant("miscounted")
    _edit(
        miscounted, lambda m: m["files"][0].update(records=str(int(m["files"][0]["records"]) + 1))
    )
    cases = {
        truncated: ("summaries.pb", "truncated"),
        tampered: ("summaries.pb", "sha256"),
        future: ("manifest.json", "format version 2 is not readable by this Loom (it reads version 1)"),
        miscounted: ("summaries.pb", "the manifest says"),
    }  # fmt: skip
    for directory, (file, why) in cases.items():
        target = tmp_path / f"target-{directory.name}"
        done = await asyncio.to_thread(
            run_loom, "load", "--in", str(directory), env=_env(str(target))
        )
        assert done.returncode == 2, done.stderr
        assert str(directory / file) in done.stderr, done.stderr
        assert why in done.stderr, done.stderr
        assert store_files(target) == []
    other = await asyncio.to_thread(
        run_loom, "load", "--in", str(tmp_path / "good"), "--service", "inbox",
        env=_env(str(tmp_path / "t-other")),
    )  # fmt: skip
    assert other.returncode == 2
    assert "a dump of 'summary', not of 'inbox'" in other.stderr, other.stderr
    unreachable = await asyncio.to_thread(
        run_loom, "load", "--in", str(tmp_path / "good"),
        env=_env(str(tmp_path / "t-down")) | {
            "LOOM_STORAGE__SUMMARY_STORE": "dynamodb",
            "LOOM_DYNAMODB__ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
        },
    )  # fmt: skip
    assert unreachable.returncode == 1, unreachable.stderr
    assert "loom load: failed:" in unreachable.stderr
    assert "127.0.0.1:9" in unreachable.stderr


def _edit(directory: Path, change: object) -> None:
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)  # type: ignore[operator]
    path.write_text(json.dumps(manifest))


async def test_an_online_backup_mid_write_load_keeps_every_write_acknowledged_before_it(
    tmp_path: Path,
) -> None:
    """`loom backup` while posts keep being acknowledged, then `loom restore` into a fresh
    data directory: every post acknowledged before the backup began is in the restored
    inboxes, the stores pass integrity_check, and writes went on during the backup."""
    from loom.v1 import inbox_pb2, inbox_pb2_grpc

    settings = settings_for("sqlite", tmp_path)
    acked: list[tuple[float, str, int]] = []
    stop = asyncio.Event()
    async with running_server(settings) as server:
        stub = inbox_pb2_grpc.InboxStub(server.channel)

        async def write() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                request = inbox_pb2.PostMessageRequest(
                    thread_id=f"bt{n % 50}", message_id=n, sender_inbox_id="bs",
                    recipient_inbox_ids=[f"bi{n % 7}", f"bj{n % 11}"],
                )  # fmt: skip
                await stub.PostMessage(request)
                acked.append((time.monotonic(), f"bt{n % 50}", n))

        writer = asyncio.ensure_future(write())
        await asyncio.sleep(2)
        began = time.monotonic()
        backed = await asyncio.to_thread(
            run_loom, "backup", "--data-dir", settings.sqlite.data_dir, "--out", str(tmp_path / "b")
        )
        ended = time.monotonic()
        await asyncio.sleep(1)
        stop.set()
        await writer
    assert backed.returncode == 0, backed.stderr
    assert any(began <= at for at, _, _ in acked), "no write was acknowledged during the backup"
    fresh = tmp_path / "restored"
    restored = await asyncio.to_thread(
        run_loom, "restore", "--in", str(tmp_path / "b"), "--data-dir", str(fresh)
    )
    assert restored.returncode == 0, restored.stderr
    again = await asyncio.to_thread(
        run_loom, "restore", "--in", str(tmp_path / "b"), "--data-dir", str(fresh)
    )
    assert again.returncode == 2
    assert "fresh data directory" in again.stderr
    for name in store_files(fresh):
        check = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", f"import sqlite3; print(sqlite3.connect({str(fresh / name)!r}).execute('PRAGMA integrity_check').fetchone()[0])"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert check.stdout.strip() == "ok", name
    back = replace(settings, sqlite=replace(settings.sqlite, data_dir=str(fresh)))
    store = await registry.by_name("inbox").data.open(back)
    try:
        inbox_store = store.store  # type: ignore[attr-defined]
        newest: dict[tuple[str, str], int] = {}
        for at, thread, n in acked:
            if at < began:
                for inbox in (f"bi{n % 7}", f"bj{n % 11}"):
                    newest[(inbox, thread)] = max(newest.get((inbox, thread), 0), n)
        for inbox in {i for i, _ in newest}:
            rows = {
                e.thread_id: e.last_message_id for e in await inbox_store.scan_inbox(inbox, 10_000)
            }
            for (i, thread), n in newest.items():
                if i == inbox:
                    assert rows.get(thread, 0) >= n, (inbox, thread, n)
    finally:
        await store.close()
    assert ended > began
