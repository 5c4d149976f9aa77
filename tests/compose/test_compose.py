"""docker-compose.yml as an operator runs it: two Loom replicas on the distributed engines, every
engine in a container built here (scripts/image/engines.sh), secrets mounted with the modes the
compose file documents. Checked from outside through both replicas' published ports.

Run by ``make compose-test`` (Docker and docker-compose; it builds the images first), never by
``make test``. One stack per module; the test that crashes containers runs last.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import (
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

from server.config import AuthSettings
from server.runtime.auth import mint_token
from tests.pki import Authority
from tests.serving import eventually, free_port
from tests.templates_corpus import NAMES, receipt

ROOT = Path(__file__).resolve().parents[2]
UID = 10001
POSTGRES_UID = 999
SCOPES = [f"{s}:*" for s in ("threadweaver", "inbox", "summary", "templates", "iterator")]
T = TypeVar("T")

pytestmark = pytest.mark.timeout(1500)


def until(probe: Callable[[], T], ok: Callable[[T], bool], timeout_s: float, what: str) -> T:
    """The suite's `eventually` over this module's blocking calls, once a second: the probe
    runs in a thread, and an RPC error counts as not yet (the stack may be restarting)."""

    async def attempt() -> T | grpc.RpcError:
        try:
            return await asyncio.to_thread(probe)
        except grpc.RpcError as exc:
            return exc

    def done(result: T | grpc.RpcError) -> bool:
        return not isinstance(result, grpc.RpcError) and ok(result)

    result = asyncio.run(eventually(attempt, done, timeout_s=timeout_s, interval_s=1.0, what=what))
    assert not isinstance(result, grpc.RpcError)
    return result


@dataclass
class Stack:
    """One compose project: its directory, name, the replicas' ports and a token."""

    directory: Path
    project: str
    ports: dict[str, int]
    token: str
    ca: bytes
    channels: dict[str, grpc.Channel] = field(default_factory=dict)

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker-compose", "-p", self.project, *args],
            cwd=self.directory,
            capture_output=True,
            text=True,
            check=check,
            timeout=900,
            env={
                **os.environ,
                "LOOM_A_PORT": str(self.ports["loom-a"]),
                "LOOM_B_PORT": str(self.ports["loom-b"]),
                "LOOM_A_METRICS": str(free_port()),
                "LOOM_B_METRICS": str(free_port()),
            },
        )

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def health(self, service: str) -> str:
        done = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Health.Status}}", self.container(service)],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip()

    def wait_healthy(self, *services: str, timeout_s: float = 600) -> None:
        for service in services:
            until(
                lambda s=service: self.health(s),  # type: ignore[misc]
                lambda h: h == "healthy",
                timeout_s,
                f"{service} healthy",
            )

    def crash(self, service: str) -> None:
        """SIGKILLs the container's main process from the host: a crash, not a stop, so the
        restart policy brings it back."""
        pid = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Pid}}", self.container(service)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        os.kill(int(pid), signal.SIGKILL)

    def restarts(self, service: str) -> int:
        done = subprocess.run(
            ["docker", "inspect", "-f", "{{.RestartCount}}", self.container(service)],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(done.stdout.strip())

    def channel(self, replica: str) -> grpc.Channel:
        if replica not in self.channels:
            self.channels[replica] = grpc.secure_channel(
                f"127.0.0.1:{self.ports[replica]}",
                grpc.ssl_channel_credentials(self.ca),
                options=(("grpc.ssl_target_name_override", "localhost"),),
            )
        return self.channels[replica]

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)


def write_secrets(directory: Path) -> tuple[bytes, Path]:
    """secrets/ as docker-compose.yml's header documents it: owners and modes included."""
    ca = Authority(directory / "pki")
    server = ca.issue("server", server=True)
    secrets = directory / "secrets"
    secrets.mkdir(mode=0o750)
    password = uuid.uuid4().hex
    files = {
        "tls.crt": (server.cert, 0, 0, 0o644),
        "ca.pem": (ca.cert, 0, 0, 0o644),
        "tls.key": (server.key, 0, UID, 0o640),
        "jwt.secret": ((uuid.uuid4().hex * 2).encode(), 0, UID, 0o640),
        "pgpass": (f"postgres:5432:loom:loom:{password}\n".encode(), UID, UID, 0o600),
        "postgres.password": (f"{password}\n".encode(), 0, POSTGRES_UID, 0o640),
    }
    for name, (content, owner, group, mode) in files.items():
        (secrets / name).write_bytes(content)
        os.chown(secrets / name, owner, group)
        os.chmod(secrets / name, mode)
    os.chown(secrets, 0, UID)
    os.chmod(secrets, 0o750)
    return ca.cert, secrets / "jwt.secret"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    for tool in ("docker", "docker-compose"):
        if shutil.which(tool) is None:
            pytest.fail(f"`{tool}` is not on PATH: run `make compose-test`, which installs it")
    directory = tmp_path_factory.mktemp("compose")
    shutil.copy(ROOT / "docker-compose.yml", directory / "docker-compose.yml")
    (directory / "deploy" / "compose").mkdir(parents=True)
    shutil.copy(ROOT / "deploy/compose/iterator-schema.sql", directory / "deploy/compose")
    ca, secret = write_secrets(directory)
    token = mint_token(AuthSettings(jwt_secret_file=str(secret)), SCOPES, 3600)
    up = Stack(
        directory,
        f"loomct{uuid.uuid4().hex[:8]}",
        {"loom-a": free_port(), "loom-b": free_port()},
        token,
        ca,
    )
    try:
        started = up.compose("up", "-d", "--no-build", check=False)
        assert started.returncode == 0, started.stdout + started.stderr
        up.wait_healthy("loom-a", "loom-b")
        yield up
    finally:
        for channel in up.channels.values():
            channel.close()
        logs = up.compose("logs", "--no-color", "--timestamps", check=False)
        (directory / "compose.log").write_text(logs.stdout + logs.stderr)
        print(f"the stack's logs: {directory / 'compose.log'}")
        up.compose("down", "-v", "-t", "30", check=False)


SENT = Timestamp(seconds=1_700_000_000)


def weave(stack: Stack, replica: str, gid: str, thread: str, rfc: str) -> str:
    reply = threadweaver_pb2_grpc.ThreadWeaverStub(stack.channel(replica)).WeaveMessage(
        threadweaver_pb2.WeaveMessageRequest(
            message=threadweaver_pb2.WovenMessage(
                gid=gid, thread_id=thread, rfc_message_id=rfc, sent_at=SENT
            )
        ),
        metadata=stack.metadata,
        timeout=15,
    )
    return str(reply.unified_thread_id)


def unified(stack: Stack, replica: str, gid: str, thread: str) -> set[str]:
    reply = threadweaver_pb2_grpc.ThreadWeaverStub(stack.channel(replica)).GetUnifiedThread(
        threadweaver_pb2.GetUnifiedThreadRequest(gid=gid, thread_id=thread),
        metadata=stack.metadata,
        timeout=15,
    )
    return {f"{t.gid}/{t.thread_id}" for t in reply.threads}


def post(stack: Stack, replica: str, thread: str, message_id: int, recipient: str) -> None:
    inbox_pb2_grpc.InboxStub(stack.channel(replica)).PostMessage(
        inbox_pb2.PostMessageRequest(
            thread_id=thread,
            message_id=message_id,
            sender_inbox_id="sender",
            recipient_inbox_ids=[recipient],
        ),
        metadata=stack.metadata,
        timeout=15,
    )


def inbox_threads(stack: Stack, replica: str, inbox: str) -> set[str]:
    reply = inbox_pb2_grpc.InboxStub(stack.channel(replica)).ListInbox(
        inbox_pb2.ListInboxRequest(inbox_id=inbox, page_size=500),
        metadata=stack.metadata,
        timeout=15,
    )
    return {entry.thread_id for entry in reply.entries}


def test_every_service_answers_through_both_replicas(stack: Stack) -> None:
    """A write through one replica is read through the other, for every service: both serve
    from the same engines."""
    run = uuid.uuid4().hex[:6]
    # ThreadWeaver: alice's copy through A, bob's through B; one unified thread on both.
    weave(stack, "loom-a", "alice", f"a-{run}", f"<{run}@x>")
    weave(stack, "loom-b", "bob", f"b-{run}", f"<{run}@x>")
    for replica in ("loom-a", "loom-b"):
        assert unified(stack, replica, "alice", f"a-{run}") == {f"alice/a-{run}", f"bob/b-{run}"}
    # Inbox: posted through A, listed and counted through B.
    post(stack, "loom-a", f"t-{run}", 1, f"carol-{run}")
    assert inbox_threads(stack, "loom-b", f"carol-{run}") == {f"t-{run}"}
    unread = inbox_pb2_grpc.InboxStub(stack.channel("loom-b")).GetUnreadCount(
        inbox_pb2.GetUnreadCountRequest(inbox_id=f"carol-{run}"), metadata=stack.metadata
    )
    assert unread.unread_count == 1
    # Summary: events through A, the summary through B.
    summary_pb2_grpc.SummaryStub(stack.channel("loom-a")).RecordDeliveryEvents(
        summary_pb2.RecordDeliveryEventsRequest(
            message_id=f"m-{run}",
            events=[
                summary_pb2.DeliveryEvent(
                    recipient_id=f"r{i}", status=summary_pb2.DELIVERY_STATUS_DELIVERED
                )
                for i in range(10)
            ],
        ),
        metadata=stack.metadata,
    )
    got = summary_pb2_grpc.SummaryStub(stack.channel("loom-b")).GetMessageSummary(
        summary_pb2.GetMessageSummaryRequest(message_id=f"m-{run}"), metadata=stack.metadata
    )
    delivered = [s for s in got.statuses if s.status == summary_pb2.DELIVERY_STATUS_DELIVERED]
    assert [s.count for s in delivered] == [10]
    # TemplateInduction: k = 5 recipients of one receipt template through A; B annotates with
    # the template formed (stored in the shared Bigtable).
    rng = random.Random(run)
    sender = f"orders-{run}@acme.example"
    emails = [
        templates_pb2.Email(
            email_id=f"{run}-{i}",
            sender=sender,
            recipient_id=f"user-{i}",
            subject=subject,
            html_body=html,
            received_at=SENT,
        )
        for i, (subject, html) in enumerate(receipt(rng, NAMES[i]) for i in range(5))
    ]
    accepted = templates_pb2_grpc.TemplateInductionStub(stack.channel("loom-a")).SubmitEmails(
        templates_pb2.SubmitEmailsRequest(emails=emails), metadata=stack.metadata
    )
    assert accepted.accepted == 5
    probe_subject, probe_html = receipt(rng, "Zoe Quinn")
    probe = templates_pb2.AnnotateEmailRequest(
        email=templates_pb2.Email(
            email_id="probe", sender=sender, recipient_id="x", subject=probe_subject,
            html_body=probe_html,
        )
    )  # fmt: skip
    annotated = until(
        lambda: templates_pb2_grpc.TemplateInductionStub(stack.channel("loom-b")).AnnotateEmail(
            probe, metadata=stack.metadata
        ),
        lambda r: r.template_id != "",
        120,
        "a template formed through A, seen through B",
    )
    assert annotated.vertical == "receipt"
    # Iterator: a hierarchy in PostgreSQL, a job started through A, its files streamed
    # through B (job state in DynamoDB, work in ElasticMQ, both shared).
    enterprise = random.Random(run).randrange(1, 2**40)
    users = [enterprise * 10 + i for i in range(3)]
    files = {u * 100 + i for u in users for i in range(7)}
    sql = (
        f"INSERT INTO enterprise (id) VALUES ({enterprise});"
        + "".join(
            f"INSERT INTO users (id, enterprise_id) VALUES ({u}, {enterprise});" for u in users
        )
        + "".join(f"INSERT INTO file (id, user_id) VALUES ({f}, {f // 100});" for f in files)
    )
    subprocess.run(
        ["docker", "exec", stack.container("postgres"), "psql", "-v", "ON_ERROR_STOP=1",
         "-q", "-U", "loom", "-d", "loom", "-c", sql],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    job = iterator_pb2_grpc.IteratorStub(stack.channel("loom-a")).StartIteration(
        iterator_pb2.StartIterationRequest(enterprise_id=enterprise, level="file"),
        metadata=stack.metadata,
    )
    streamed: set[int] = set()
    for batch in iterator_pb2_grpc.IteratorStub(stack.channel("loom-b")).StreamObjects(
        iterator_pb2.StreamObjectsRequest(job_id=job.job_id), metadata=stack.metadata, timeout=120
    ):
        for chunk in batch.chunks:
            streamed.update(chunk.object_keys)
    assert streamed == files


def test_nothing_acknowledged_is_lost_when_a_replica_and_an_engine_crash(stack: Stack) -> None:
    """Writes go through both replicas while loom-a's process and then Cassandra's are
    SIGKILLed; the restart policy brings both back; every write either replica acknowledged
    is then read back through both."""
    run = uuid.uuid4().hex[:6]
    acked_threads: list[tuple[str, str]] = []  # (gid, thread) woven
    acked_posts: list[str] = []  # inbox thread ids posted to inbox f"x-{run}"
    failures: list[str] = []
    replicas = ("loom-a", "loom-b")
    step = 0

    def write_some(count: int) -> None:
        nonlocal step
        for _ in range(count):
            step += 1
            replica = replicas[step % 2]
            gid, thread = f"g{step % 3}", f"{run}-{step}"
            try:
                weave(stack, replica, gid, thread, f"<{run}-{step}@x>")
                acked_threads.append((gid, thread))
            except grpc.RpcError as exc:
                failures.append(f"weave via {replica}: {exc.code().name}")
            try:
                post(stack, replica, f"{run}-{step}", step, f"x-{run}")
                acked_posts.append(f"{run}-{step}")
            except grpc.RpcError as exc:
                failures.append(f"post via {replica}: {exc.code().name}")

    write_some(20)
    restarts_a = stack.restarts("loom-a")
    stack.crash("loom-a")
    write_some(20)  # B keeps acknowledging; A's calls fail until it is back
    stack.wait_healthy("loom-a")
    assert stack.restarts("loom-a") == restarts_a + 1
    restarts_c = stack.restarts("cassandra")
    stack.crash("cassandra")
    write_some(20)  # both replicas refuse (UNAVAILABLE) until Cassandra is back
    stack.wait_healthy("cassandra")
    assert stack.restarts("cassandra") == restarts_c + 1
    # Loom recovers by itself: a write through each replica is acknowledged again.
    for replica in replicas:
        until(
            lambda r=replica: weave(stack, r, "g0", f"{run}-after-{r}", f"<{run}-after-{r}@x>"),  # type: ignore[misc]
            lambda _: True,
            300,
            f"{replica} acknowledging writes after Cassandra's restart",
        )
    write_some(10)
    assert acked_threads, failures
    # Every acknowledged write is there, read through both replicas.
    for replica in replicas:
        for gid, thread in acked_threads:
            assert unified(stack, replica, gid, thread) == {f"{gid}/{thread}"}, (replica, thread)
        listed = inbox_threads(stack, replica, f"x-{run}")
        missing = set(acked_posts) - listed
        assert not missing, f"{replica}: acknowledged posts missing: {sorted(missing)}"
    print(
        f"acknowledged {len(acked_threads)} weaves and {len(acked_posts)} posts; "
        f"{len(failures)} refused during the crashes: {sorted(set(failures))}"
    )
