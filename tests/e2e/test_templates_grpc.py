"""TemplateInduction end to end: a real server, its real store, over gRPC, on every engine."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from loom.v1 import templates_pb2, templates_pb2_grpc

from storage.engines import TEMPLATE_STORES
from tests.conftest import selected_engines
from tests.engines import settings_for
from tests.serving import Running, eventually, running_server, violations
from tests.templates_corpus import NAMES, human, receipt, reset

ENGINES = TEMPLATE_STORES.names
K = 5
SENDER = "orders@acme.example"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "templates_engine" in metafunc.fixturenames:
        engines = selected_engines(metafunc.config, ENGINES)
        metafunc.parametrize("templates_engine", engines, ids=engines, scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(
    templates_engine: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Running]:
    """One server per engine, k = 5, one CPU worker process, small body limit."""
    data = Path(tmp_path_factory.mktemp(f"templates-{templates_engine}"))
    base = settings_for(templates_engine, data, templates_store=templates_engine)
    settings = replace(
        base,
        templates=replace(
            base.templates, k_anonymity=K, cpu_workers=1, max_body_bytes=256 * 1024, max_batch=100
        ),
    )
    async with running_server(settings) as running:
        yield running


def stub(running: Running) -> templates_pb2_grpc.TemplateInductionStub:
    return templates_pb2_grpc.TemplateInductionStub(running.channel)


def email(
    eid: str, recipient: str, subject: str, html: str, sender: str = SENDER
) -> templates_pb2.Email:
    return templates_pb2.Email(
        email_id=eid, sender=sender, recipient_id=recipient, subject=subject, html_body=html
    )


async def stats(s: templates_pb2_grpc.TemplateInductionStub) -> templates_pb2.InductionStats:
    return await s.GetInductionStats(templates_pb2.GetInductionStatsRequest())


async def settle(s: templates_pb2_grpc.TemplateInductionStub) -> None:
    """Waits until every accepted email went through the pipeline and formations ran."""

    def idle(st: templates_pb2.InductionStats) -> bool:
        done = st.processed + st.failed + st.dropped_io == st.accepted
        return done and st.cpu_queue_depth == st.io_queue_depth == st.formation_queue_depth == 0

    await eventually(lambda: stats(s), idle, timeout_s=60)


async def test_template_forms_at_the_kth_recipient_and_annotates(server: Running) -> None:
    """k-1 recipients: no template; the k-th recipient's email forms it; fields extract."""
    s, rng = stub(server), random.Random(1)
    probe_subject, probe_html = receipt(rng, "Zoe Quinn")
    sent = [email(f"r{i}", f"user-{i}", *receipt(rng, NAMES[i])) for i in range(K - 1)]
    await s.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=sent))
    await settle(s)
    before = await s.AnnotateEmail(
        templates_pb2.AnnotateEmailRequest(email=email("p", "x", probe_subject, probe_html))
    )
    assert before.template_id == ""
    assert len(before.fingerprints) == 3
    # The same recipient again does not count: still k-1 distinct.
    await s.SubmitEmails(
        templates_pb2.SubmitEmailsRequest(
            emails=[email("r-again", "user-0", *receipt(rng, NAMES[0]))]
        )
    )
    await settle(s)
    again = await s.AnnotateEmail(
        templates_pb2.AnnotateEmailRequest(email=email("p", "x", probe_subject, probe_html))
    )
    assert again.template_id == ""
    await s.SubmitEmails(
        templates_pb2.SubmitEmailsRequest(emails=[email("r-k", "user-k", *receipt(rng, NAMES[5]))])
    )
    got = await eventually(
        lambda: s.AnnotateEmail(
            templates_pb2.AnnotateEmailRequest(email=email("p", "x", probe_subject, probe_html))
        ),
        lambda r: r.template_id != "",
    )
    assert got.vertical == "receipt"
    assert "Thanks for your order" in got.fixed_text
    assert "Zoe Quinn" not in " ".join(got.fixed_text)
    assert got.date_format == "DD/MM/YYYY"
    values = {f.value: f for f in got.fields}
    order = probe_subject.rsplit(" ", 1)[1]
    assert order in values
    assert values[order].type == "id"
    dates = [f for f in got.fields if f.type == "date"]
    assert dates
    assert dates[0].normalized.startswith("2025-")
    template = await s.GetTemplate(templates_pb2.GetTemplateRequest(template_id=got.template_id))
    assert template.distinct_recipients >= K
    assert template.sender == SENDER
    assert template.scheme == "loom"
    assert any(r.type == "date" for r in template.field_rules)


async def test_two_templates_sharing_a_layout_stay_apart(server: Running) -> None:
    """A receipt and a password reset of one vendor's layout become two templates."""
    s, rng = stub(server), random.Random(2)
    batch = []
    for i in range(8):
        batch.append(email(f"a{i}", f"ua-{i}", *receipt(rng, NAMES[i % 12])))
        batch.append(email(f"b{i}", f"ub-{i}", *reset(rng, NAMES[(i + 3) % 12])))
    await s.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=batch))
    await settle(s)

    async def ids() -> tuple[str, str]:
        a = await s.AnnotateEmail(
            templates_pb2.AnnotateEmailRequest(email=email("qa", "x", *receipt(rng, "Al Bo")))
        )
        b = await s.AnnotateEmail(
            templates_pb2.AnnotateEmailRequest(email=email("qb", "x", *reset(rng, "Cy Do")))
        )
        return a.template_id, b.template_id

    a, b = await eventually(ids, all)
    assert a != b
    reset_template = await s.GetTemplate(templates_pb2.GetTemplateRequest(template_id=b))
    assert reset_template.vertical == "account"


async def test_one_off_human_mail_never_forms_a_template(server: Running) -> None:
    """Many people each writing to a few others: no sender reaches k, nothing forms."""
    s, rng = stub(server), random.Random(3)
    batch = [
        email(f"h{p}-{n}", f"friend-{p}-{n}", *human(rng), sender=f"person{p}@mail.example")
        for p in range(20)
        for n in range(2)
    ]
    await s.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=batch))
    await settle(s)
    got = await s.AnnotateEmail(
        templates_pb2.AnnotateEmailRequest(
            email=email("q", "x", *human(rng), sender="person0@mail.example")
        )
    )
    assert got.template_id == ""
    listed = await s.ListTemplates(
        templates_pb2.ListTemplatesRequest(sender="person0@mail.example")
    )
    assert list(listed.templates) == []


async def test_no_response_or_stat_carries_a_body_or_recipient(server: Running) -> None:
    """Templates expose only k-anonymous text; nothing returned names a recipient or a value."""
    s, rng = stub(server), random.Random(4)
    secret_name = "Quentin Secretface"
    batch = [
        email(f"s{i}", f"secret-recipient-{i}", *receipt(rng, secret_name if i == 0 else NAMES[i]))
        for i in range(K + 2)
    ]
    await s.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=batch))
    await settle(s)
    pages = await s.ListTemplates(templates_pb2.ListTemplatesRequest(page_size=1000))
    blob = b"".join(t.SerializeToString() for t in pages.templates)
    blob += (await stats(s)).SerializeToString()
    assert pages.templates
    assert b"secret-recipient" not in blob
    assert secret_name.encode() not in blob
    for t in pages.templates:
        assert t.distinct_recipients >= K


async def test_list_templates_pages_and_filters_by_sender(server: Running) -> None:
    """Pages follow tokens to the end; a sender filter returns only that sender's."""
    s = stub(server)
    seen: list[str] = []
    token = ""
    while True:
        page = await s.ListTemplates(
            templates_pb2.ListTemplatesRequest(page_size=1, page_token=token)
        )
        seen += [t.template_id for t in page.templates]
        token = page.next_page_token
        if not token:
            break
    assert len(seen) == len(set(seen))
    only = await s.ListTemplates(templates_pb2.ListTemplatesRequest(sender=SENDER, page_size=1000))
    assert {t.sender for t in only.templates} <= {SENDER}


async def test_bad_input_is_invalid_argument_naming_each_field(server: Running) -> None:
    """Empty recipient, oversized body, too many emails, bad ids: INVALID_ARGUMENT."""
    s = stub(server)
    big = "<p>" + "x" * (300 * 1024) + "</p>"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.SubmitEmails(
            templates_pb2.SubmitEmailsRequest(
                emails=[email("e1", "", "s", "<p>hi</p>"), email("e2", "u", "s", big)]
            )
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    found = violations(err.value)
    assert "emails[0].recipient_id" in found
    assert "emails[1].html_body" in found
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.SubmitEmails(
            templates_pb2.SubmitEmailsRequest(
                emails=[email(f"e{i}", "u", "s", "<p/>") for i in range(101)]
            )
        )
    assert "emails" in violations(err.value)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.SubmitEmails(templates_pb2.SubmitEmailsRequest())
    assert "emails" in violations(err.value)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.GetTemplate(templates_pb2.GetTemplateRequest(template_id="not-hex!"))
    assert "template_id" in violations(err.value)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.GetTemplate(templates_pb2.GetTemplateRequest(template_id="abcdef-0123"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.ListTemplates(templates_pb2.ListTemplatesRequest(page_size=5000, page_token="zz"))
    assert set(violations(err.value)) == {"page_size", "page_token"}


async def test_junk_duplicates_and_huge_bodies_never_stall_the_stages(server: Running) -> None:
    """Binary junk and unclosed tags are processed; duplicate ids count once; 30 MB is refused."""
    s = stub(server)
    junk = bytes(range(256)).decode("latin-1") * 200
    unclosed = "<table><tr><td><div><span>" * 3000
    got = await s.SubmitEmails(
        templates_pb2.SubmitEmailsRequest(
            emails=[
                email("j1", "u1", "s", junk),
                email("j2", "u2", "s", unclosed),
                email("j1", "u1", "s", junk),
            ]
        )
    )
    assert (got.accepted, got.dropped, got.duplicates) == (2, 0, 1)
    await settle(s)
    huge = "<p>" + "y" * (30 * 1024 * 1024) + "</p>"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await s.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=[email("h", "u", "s", huge)]))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    annotated = await s.AnnotateEmail(
        templates_pb2.AnnotateEmailRequest(email=email("j", "u", "s", junk))
    )
    assert len(annotated.fingerprints) == 3


async def test_a_full_cpu_queue_drops_the_tail_and_counts_it(tmp_path: Path) -> None:
    """Admission control: a full CPU queue refuses at once, the refused are the request's
    tail, and the counters say so; resending the tail later gets it in."""
    base = settings_for("sqlite", tmp_path, templates_store="sqlite")
    settings = replace(
        base, templates=replace(base.templates, cpu_workers=1, cpu_queue=3, cpu_batch=1)
    )
    rng = random.Random(10)
    emails = [email(f"q{i}", f"uq-{i}", *receipt(rng, NAMES[i % 12])) for i in range(40)]
    async with running_server(settings) as running:
        s = stub(running)
        got = await s.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=emails))
        assert got.dropped > 0
        assert got.accepted + got.dropped == 40
        assert (await stats(s)).dropped_cpu == got.dropped
        await settle(s)
        tail = emails[40 - got.dropped :]
        again = await s.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=tail[:3]))
        assert again.accepted == 3
        await settle(s)
        assert (await stats(s)).processed == got.accepted + 3
