"""Loading a dump into a store that already holds data merges, the way each service's data
model does: ThreadWeaverService unions conversations, Summary merges sketches, an inbox row keeps
its newest message, a row's templates keep their newest formation, a job present stays."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from loom.v1 import dump_pb2

from server import registry
from server.summary.model import DeliveryEvent, DeliveryStatus, MessageSummary
from server.threadweaver.service import ThreadWeaverService
from storage import factory
from storage.ports import JobRecord, TaskRecord, ThreadKey
from tests.engines import settings_for
from tests.portable_data import finished_jobs
from tests.serving import run_loom


async def test_threadweaver_unions_a_thread_mapped_elsewhere(tmp_path: Path) -> None:
    """The target maps thread x to one conversation, the dump maps x and y to another: after
    the load x and y read as one unified thread holding both conversations' threads."""
    settings = settings_for("sqlite", tmp_path)
    data = await registry.by_name("threadweaver").data.open(settings)
    try:
        store = data.store  # type: ignore[attr-defined]
        await store.put_thread_uts_if_absent(
            [(ThreadKey("g", "x"), "ut-a"), (ThreadKey("g", "w"), "ut-a")]
        )
        await data.load("thread_uts", [
            dump_pb2.ThreadUtRecord(gid="g", thread_id="x", ut="ut-b"),
            dump_pb2.ThreadUtRecord(gid="h", thread_id="y", ut="ut-b"),
        ])  # fmt: skip
        weaver = ThreadWeaverService(store)
        read = await weaver.unified_thread(ThreadKey("h", "y"), team_gids=None, max_threads=100)
        assert set(read.threads) == {ThreadKey("g", "x"), ThreadKey("g", "w"), ThreadKey("h", "y")}
    finally:
        await data.close()


async def test_summary_merges_sketches_as_if_both_event_sets_were_recorded(tmp_path: Path) -> None:
    """The target counted a and b delivered, the dump a and c: after the load, 3 delivered,
    and loading the same dump again changes nothing."""
    settings = settings_for("sqlite", tmp_path)
    data = await registry.by_name("summary").data.open(settings)

    def summary(ids: list[str]) -> bytes:
        s = MessageSummary()
        s.record([DeliveryEvent(i, DeliveryStatus.DELIVERED) for i in ids])
        return s.encode()

    try:
        store = data.store  # type: ignore[attr-defined]
        await store.put_if_version("m", summary(["a", "b"]), None)
        record = dump_pb2.SummaryRecord(message_id="m", data=summary(["a", "c"]), version=1)
        await data.load("summaries", [record])
        merged = await store.get("m")
        view = MessageSummary.decode(merged.data).view()
        assert sorted(view.statuses[DeliveryStatus.DELIVERED].recipient_ids) == ["a", "b", "c"]
        await data.load("summaries", [record])
        assert (await store.get("m")).data == merged.data
    finally:
        await data.close()


async def test_an_inbox_row_keeps_its_newest_message(tmp_path: Path) -> None:
    """A dumped row older than the target's leaves it (and its unread state) alone; a newer
    one replaces it, read flag and unread count included."""
    settings = settings_for("sqlite", tmp_path)
    data = await registry.by_name("inbox").data.open(settings)
    try:
        store = data.store  # type: ignore[attr-defined]
        await store.deliver("t1", 5, unread=["i"])
        await store.deliver("t2", 4, unread=["i"])
        await data.load("inbox_entries", [
            dump_pb2.InboxEntryRecord(inbox_id="i", thread_id="t1", last_message_id=3, is_read=True),
            dump_pb2.InboxEntryRecord(inbox_id="i", thread_id="t2", last_message_id=9, is_read=True),
        ])  # fmt: skip
        rows = {
            e.thread_id: (e.last_message_id, e.is_read) for e in await store.scan_inbox("i", 10)
        }
        assert rows == {"t1": (5, False), "t2": (9, True)}
        assert await store.unread_count("i") == 1
    finally:
        await data.close()


async def test_templates_keep_the_newest_formation_and_emails_their_remaining_life(
    tmp_path: Path,
) -> None:
    """A row's dumped templates older than the target's are ignored, newer ones replace them;
    an email whose expiry has passed is not resurrected."""
    settings = settings_for("sqlite", tmp_path)
    data = await registry.by_name("templates").data.open(settings)
    now = int(time.time() * 1000)
    try:
        store = data.store  # type: ignore[attr-defined]
        await store.put_templates(b"r1", b"target", "s", 200)
        await store.put_templates(b"r2", b"target", "s", 200)
        await data.load("templates", [
            dump_pb2.TemplatesRecord(key=b"r1", data=b"older", sender="s", formed_at_ms=100),
            dump_pb2.TemplatesRecord(key=b"r2", data=b"newer", sender="s", formed_at_ms=300),
        ])  # fmt: skip
        assert await store.get_templates([b"r1", b"r2"]) == {b"r1": b"target", b"r2": b"newer"}
        await data.load("template_emails", [
            dump_pb2.TemplateEmailRecord(key=b"r3", email_id="old", payload=b"p", expires_at_ms=now - 1),
            dump_pb2.TemplateEmailRecord(key=b"r3", email_id="live", payload=b"q", expires_at_ms=now + 60_000),
        ])  # fmt: skip
        assert await store.get_emails(b"r3", 10) == [b"q"]
    finally:
        await data.close()


async def test_a_job_already_present_is_left_alone(tmp_path: Path) -> None:
    """A finished job whose id the target already has keeps the target's record."""
    settings = settings_for("sqlite", tmp_path)
    await finished_jobs(settings, count=1)
    data = await registry.by_name("iterator").data.open(settings)
    try:
        store = data.store  # type: ignore[attr-defined]
        before = await store.get_job("job-0")
        await data.load("jobs", [
            dump_pb2.JobDumpRecord(job_id="job-0", created_ms=1, state="failed", version=9),
            dump_pb2.JobDumpRecord(job_id="job-new", created_ms=2, state="completed", version=2),
        ])  # fmt: skip
        assert await store.get_job("job-0") == before
        assert (await store.get_job("job-new")).state == "completed"
    finally:
        await data.close()


async def test_a_dump_of_a_running_iterator_job_is_refused_naming_it(tmp_path: Path) -> None:
    """`loom dump --service iterator` while a job is running: exit 2, the job named, what to
    do said, and no dump written (a copy of work in flight no store can resume)."""
    settings = settings_for("sqlite", tmp_path)
    await finished_jobs(settings, count=1)
    store = await factory.open_job_store(settings)
    try:
        job = JobRecord(
            job_id="job-live", created_ms=5, spec="{}", state="running", rate=0, paused_by="",
            error="", finished_ms=0, version=1,
        )  # fmt: skip
        root = TaskRecord(
            task_id="root", level=0, parents=(), first=(), last=(), after=(), upto=(), seq=0,
            done=False, rows=0, started_ms=5, spawned=(),
        )  # fmt: skip
        await store.create_job(job, root, {})
    finally:
        await store.close()
    out = tmp_path / "dump"
    done = await asyncio.to_thread(
        run_loom, "dump", "--service", "iterator", "--out", str(out),
        env={"LOOM_SQLITE__DATA_DIR": settings.sqlite.data_dir},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "job-live (running)" in done.stderr, done.stderr
    assert "cancel" in done.stderr
    assert not (out / "manifest.json").exists()
