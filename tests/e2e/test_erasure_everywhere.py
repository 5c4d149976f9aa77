"""One subject erased from all five services, proved by looking at the bytes.

A subject (one id used as a mailbox gid, an inbox id, a recipient id and in an Iterator job)
and a control subject are written through the gRPC API on every engine set; the subject is
then erased with each service's own call (UnweaveMailbox, DeleteInbox, the two
EraseRecipients, DeleteJob), each waited to DONE. Then:

- `loom dump` of every service holds nothing of the subject: not its id, nor the keyed hash
  TemplateInduction knows it by (also looked for inside the compressed stored emails), while
  the control subject is there, so the search can fail;
- on SQLite, no file of the data directory (stores and WALs) holds either; the erasure log
  holds neither in clear;
- a backup and a dump taken *before* the erasure, restored or loaded afterwards (`loom
  restore`, `loom load`, and a load into the distributed engines), bring nothing back: the
  erasure log is re-applied, and they say so.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from dataclasses import replace
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import (
    dump_pb2,
    inbox_pb2,
    inbox_pb2_grpc,
    iterator_pb2,
    iterator_pb2_grpc,
    summary_pb2,
    summary_pb2_grpc,
    templates_pb2,
    templates_pb2_grpc,
    threadweaver_pb2,
    threadweaver_pb2_grpc,
)

from server import registry
from server.config import Settings
from server.portable import erasures, transfer
from server.portable.backup import backup
from server.portable.format import read_records
from server.portable.records import as_record
from server.templates.model import decode_cluster_email, recipient_hash
from storage import factory
from storage.ports import JobRecord, TaskRecord
from tests.engines import settings_for
from tests.operation_waits import wait_done
from tests.serving import Running, eventually, run_loom, running_server
from tests.templates_corpus import NAMES, receipt

pytestmark = pytest.mark.timeout(900)

SUBJECT = "erasure-subject-5e1f"
CONTROL = "erasure-control-9a2b"

ENGINE_SETS = {
    "sqlite": {},
    "distributed": {
        "threadweaver_store": "cassandra",
        "inbox_store": "cassandra",
        "summary_store": "dynamodb",
        "templates_store": "bigtable",
        "iterator_state": "dynamodb",
    },
    "threads-on-bigtable": {"threadweaver_store": "bigtable"},
}
"""Every distributed engine of every store that holds a subject, and the embedded default."""


def _settings(tmp: Path, stores: dict[str, str]) -> Settings:
    engines = set(stores.values()) or {"sqlite"}
    settings = settings_for(next(iter(sorted(engines))), tmp, **stores)
    # An unweaving is DONE once concurrent weaves had time to see its marks; short here.
    return replace(settings, threadweaver=replace(settings.threadweaver, retire_grace_s=0.5))


def _template_hash(settings: Settings, subject: str) -> str:
    return recipient_hash(subject, settings.templates.recipient_hash_key.encode())


async def _write(running: Running, subject: str, *, unified_with: str) -> None:
    """`subject` in every service; its thread unified with `unified_with`'s."""
    channel = running.channel
    sent = Timestamp()
    sent.FromMilliseconds(1_700_000_000_000)
    weaver = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    for gid in (subject, unified_with):
        await weaver.WeaveMessage(
            threadweaver_pb2.WeaveMessageRequest(
                message=threadweaver_pb2.WovenMessage(
                    gid=gid, thread_id=f"t-{gid}", rfc_message_id="<shared@x.example>",
                    sent_at=sent,
                )
            )
        )  # fmt: skip
    inbox = inbox_pb2_grpc.InboxStub(channel)
    await inbox.PostMessage(
        inbox_pb2.PostMessageRequest(
            thread_id="it-shared", message_id=7, sender_inbox_id="erasure-sender",
            recipient_inbox_ids=[subject, unified_with],
        )
    )  # fmt: skip
    summary = summary_pb2_grpc.SummaryStub(channel)
    await summary.RecordDeliveryEvents(
        summary_pb2.RecordDeliveryEventsRequest(
            message_id="m-shared",
            events=[
                summary_pb2.DeliveryEvent(recipient_id=r, status=summary_pb2.DELIVERY_STATUS_READ)
                for r in (subject, unified_with, "erasure-third")
            ],
        )
    )
    await _submit(running, [subject, unified_with])


async def _submit(running: Running, recipients: list[str]) -> None:
    stub = templates_pb2_grpc.TemplateInductionStub(running.channel)
    rng = random.Random(3)
    now = Timestamp()
    now.FromMilliseconds(int(time.time() * 1000))
    emails = []
    for k in range(6):
        subject_line, html = receipt(rng, rng.choice(NAMES))
        emails.append(
            templates_pb2.Email(
                email_id=f"e-{recipients[k % len(recipients)]}-{k}",
                sender="orders@erasure.example", recipient_id=recipients[k % len(recipients)],
                subject=subject_line, html_body=html, received_at=now,
            )
        )  # fmt: skip
    await stub.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=emails))

    async def idle() -> bool:
        s = await stub.GetInductionStats(templates_pb2.GetInductionStatsRequest())
        busy = s.cpu_queue_depth or s.io_queue_depth or s.formation_queue_depth
        return s.processed + s.failed + s.skipped_full >= s.accepted and not busy

    await eventually(idle, bool, timeout_s=120, what="every email stored")


def _job_id(subject: str) -> str:
    """The id of `subject`'s job (job ids are 32 hex characters: the scope is in its spec)."""
    return hashlib.md5(subject.encode()).hexdigest()


async def _job(settings: Settings, subject: str) -> str:
    """A finished Iterator job scoped to `subject` (a job's life is the Iterator tests')."""
    store = await factory.open_job_store(settings)
    job_id = _job_id(subject)
    try:
        job = JobRecord(
            job_id=job_id, created_ms=1_700_000_000_000, spec=json.dumps({"user_id": subject}),
            state="completed", rate=0, paused_by="", error="", finished_ms=1_700_000_100_000,
            version=3,
        )  # fmt: skip
        root = TaskRecord(
            task_id="root", level=0, parents=(), first=(), last=(), after=(), upto=(),
            seq=0, done=True, rows=0, started_ms=job.created_ms, spawned=(),
        )  # fmt: skip
        await store.create_job(job, root, {"emitted": 3, "acked": 3})
    finally:
        await store.close()
    return job_id


async def _erase(running: Running, subject: str) -> None:
    """The subject out of every service, each call waited until DONE."""
    channel = running.channel
    weaver = threadweaver_pb2_grpc.ThreadWeaverStub(channel)
    reply = await weaver.UnweaveMailbox(threadweaver_pb2.UnweaveMailboxRequest(gid=subject))
    await wait_done(weaver.GetOperation, reply.operation.operation_id, timeout_s=300)
    inbox = inbox_pb2_grpc.InboxStub(channel)
    await inbox.DeleteInbox(inbox_pb2.DeleteInboxRequest(inbox_id=subject))
    summary = summary_pb2_grpc.SummaryStub(channel)
    op = await summary.EraseRecipients(
        summary_pb2.SummaryEraseRecipientsRequest(recipient_ids=[subject])
    )
    await wait_done(summary.GetOperation, op.operation_id, timeout_s=300)
    templates = templates_pb2_grpc.TemplateInductionStub(channel)
    op = await templates.EraseRecipients(
        templates_pb2.TemplateInductionEraseRecipientsRequest(recipient_ids=[subject])
    )
    await wait_done(templates.GetOperation, op.operation_id, timeout_s=300)
    iterator = iterator_pb2_grpc.IteratorStub(channel)
    await iterator.DeleteJob(iterator_pb2.DeleteJobRequest(job_id=_job_id(subject)))


async def _dump_all(settings: Settings, out: Path) -> None:
    for service in registry.portable():
        await transfer.dump(service, settings, out / service)


def _traces(directory: Path, needles: list[bytes], skip: tuple[str, ...] = ()) -> list[str]:
    """Files under `directory` holding any of `needles`, as "file: needle"."""
    found = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        if path.name in skip:
            continue
        data = path.read_bytes()
        found += [f"{path.relative_to(directory)}: {n.decode()}" for n in needles if n in data]
    return found


def _stored_email_users(dump: Path) -> set[str]:
    """The recipient hash inside every stored email of a TemplateInduction dump (they are
    compressed: a byte search would not see them)."""
    opened = transfer.check(dump / "templates", "templates")
    users: set[str] = set()
    for entry in opened.manifest.files:
        if entry.kind != "template_emails":
            continue
        for batch in read_records(opened.directory, entry, dump_pb2.TemplateEmailRecord, 500):
            users.update(
                decode_cluster_email(as_record(r, dump_pb2.TemplateEmailRecord).payload).user
                for r in batch
            )
    return users


def _assert_gone(settings: Settings, dump: Path, subject: str = SUBJECT) -> None:
    needles = [subject.encode(), _template_hash(settings, subject).encode()]
    assert _traces(dump, needles) == []
    assert _template_hash(settings, subject) not in _stored_email_users(dump)
    # The control subject was written the same way and is still there: the search can fail.
    controls = _traces(dump, [CONTROL.encode(), _template_hash(settings, CONTROL).encode()])
    assert {c.split("/")[0] for c in controls} >= {"threadweaver", "inbox", "summary", "templates"}
    assert _template_hash(settings, CONTROL) in _stored_email_users(dump)


@pytest.fixture(params=sorted(ENGINE_SETS))
def engine_set(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_an_erased_subject_leaves_no_byte_in_any_dump_or_file(
    engine_set: str, tmp_path: Path
) -> None:
    settings = _settings(tmp_path, ENGINE_SETS[engine_set])
    async with running_server(settings) as running:
        await _write(running, SUBJECT, unified_with=CONTROL)
        await _job(settings, SUBJECT)
        await _job(settings, CONTROL)
        before = tmp_path / "before"
        await _dump_all(settings, before)
        assert _traces(before, [SUBJECT.encode()]), "the subject was written everywhere"
        data_dir = Path(settings.sqlite.data_dir)
        if engine_set != "distributed":  # some store is on SQLite: the search can fail
            assert _traces(data_dir, [SUBJECT.encode()])
        await _erase(running, SUBJECT)
        after = tmp_path / "after"
        await _dump_all(settings, after)
    _assert_gone(settings, after)
    needles = [SUBJECT.encode(), _template_hash(settings, SUBJECT).encode()]
    assert _traces(data_dir, needles, skip=("erasure.key",)) == []
    assert (data_dir / "erasures.sqlite3").exists()


async def _erased_server(tmp_path: Path) -> tuple[Settings, Path, Path]:
    """A SQLite deployment where the subject was erased, with a backup and a dump of every
    service taken before the erasure."""
    settings = _settings(tmp_path, {})
    data_dir = Path(settings.sqlite.data_dir)
    async with running_server(settings) as running:
        await _write(running, SUBJECT, unified_with=CONTROL)
        await _job(settings, SUBJECT)
        await _job(settings, CONTROL)
        backed_up, dumped = tmp_path / "backup", tmp_path / "dump"
        await asyncio.to_thread(backup, data_dir, backed_up)
        await _dump_all(settings, dumped)
        await _erase(running, SUBJECT)
    return settings, backed_up, dumped


async def test_restore_and_load_of_copies_taken_before_bring_nothing_back(
    tmp_path: Path,
) -> None:
    settings, backed_up, dumped = await _erased_server(tmp_path)
    log = Path(settings.sqlite.data_dir) / "erasures.sqlite3"
    restored = tmp_path / "restored"
    done = run_loom(
        "restore", "--in", str(backed_up), "--data-dir", str(restored), "--erasure-log", str(log)
    )
    assert done.returncode == 0, done.stderr
    for service in ("threadweaver", "inbox", "summary", "templates", "iterator"):
        assert f"erasure log: {service}: 1 of the" in done.stdout, done.stdout
    assert (restored / "erasures.sqlite3").exists()  # carried, with its key
    assert (restored / "erasure.key").read_bytes() == log.with_name("erasure.key").read_bytes()
    again = tmp_path / "restored-dump"
    dumped_again = run_loom(
        "dump", "--service", "all", "--out", str(again), "--data-dir", str(restored)
    )
    assert dumped_again.returncode == 0, dumped_again.stderr
    _assert_gone(settings, again)

    loaded = tmp_path / "loaded"
    done = run_loom(
        "load", "--in", str(dumped), "--data-dir", str(loaded), "--erasure-log", str(log),
        env={"LOOM_THREADWEAVER__RETIRE_GRACE_S": "0.5"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "erasure log: inbox: 1 of the" in done.stdout, done.stdout
    out = tmp_path / "loaded-dump"
    assert (
        run_loom(
            "dump", "--service", "all", "--out", str(out), "--data-dir", str(loaded)
        ).returncode
        == 0
    )
    _assert_gone(settings, out)


async def test_a_load_into_the_distributed_engines_re_applies_the_log(tmp_path: Path) -> None:
    """The same pre-erasure dump, loaded into every distributed engine: the log (the SQLite
    deployment's) is re-applied there too."""
    source, _, dumped = await _erased_server(tmp_path)
    target = _settings(tmp_path / "target", ENGINE_SETS["distributed"])
    log = Path(source.sqlite.data_dir) / "erasures.sqlite3"
    recorder = await erasures.open_log(log, log.with_name("erasure.key"), target)
    try:
        for service in registry.portable():
            await transfer.load(transfer.check(dumped / service, service), target)
            result = await erasures.reapply(service, target, recorder)
            assert result.erased == 1, result
    finally:
        await recorder.close()
    out = tmp_path / "target-dump"
    await _dump_all(target, out)
    _assert_gone(target, out)


async def test_a_named_erasure_log_that_does_not_exist_stops_before_any_copy(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path, {})
    async with running_server(settings) as running:
        await _write(running, SUBJECT, unified_with=CONTROL)
    backed_up = tmp_path / "backup"
    await asyncio.to_thread(backup, Path(settings.sqlite.data_dir), backed_up)
    target = tmp_path / "restored"
    missing = tmp_path / "missing.sqlite3"
    done = run_loom(
        "restore", "--in", str(backed_up), "--data-dir", str(target), "--erasure-log", str(missing)
    )
    assert done.returncode == 2
    assert "no such erasure log" in done.stderr
    assert not list(target.glob("*.sqlite3"))
    quiet = run_loom("restore", "--in", str(backed_up), "--data-dir", str(target))
    assert quiet.returncode == 0, quiet.stderr
    assert "nothing re-applied" in quiet.stderr
