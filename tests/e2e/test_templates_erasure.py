"""TemplateInduction's EraseRecipients and GetOperation over gRPC, on every template engine:
the recipient's cells go, and a template keeps only what k distinct recipients gave it."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from loom.v1 import common_pb2, templates_pb2, templates_pb2_grpc

from server.config import AuthSettings
from server.runtime.auth import mint_token
from storage.engines import TEMPLATE_STORES
from tests.conftest import selected_engines
from tests.engines import settings_for
from tests.operation_waits import wait_done
from tests.serving import Running, eventually, running_server, violations
from tests.templates_corpus import NAMES, receipt

K = 5


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "templates_erase_engine" in metafunc.fixturenames:
        engines = selected_engines(metafunc.config, TEMPLATE_STORES.names)
        metafunc.parametrize("templates_erase_engine", engines, ids=engines, scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(
    templates_erase_engine: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Running]:
    data = Path(tmp_path_factory.mktemp(f"templates-erase-{templates_erase_engine}"))
    base = settings_for(templates_erase_engine, data, templates_store=templates_erase_engine)
    settings = replace(
        base,
        templates=replace(base.templates, k_anonymity=K, cpu_workers=1, max_batch=100),
    )
    async with running_server(settings) as running:
        yield running


def stub(running: Running) -> templates_pb2_grpc.TemplateInductionStub:
    return templates_pb2_grpc.TemplateInductionStub(running.channel)


def email(eid: str, recipient: str, sender: str, rng: random.Random) -> templates_pb2.Email:
    subject, html = receipt(rng, NAMES[hash(eid) % len(NAMES)])
    return templates_pb2.Email(
        email_id=eid, sender=sender, recipient_id=recipient, subject=subject, html_body=html
    )


async def formed(
    s: templates_pb2_grpc.TemplateInductionStub, sender: str, recipients: list[str]
) -> templates_pb2.Template:
    """Submits one receipt per recipient from `sender`; returns the template they form."""
    rng = random.Random(sender)
    emails = [email(f"{sender}-{r}", r, sender, rng) for r in recipients]
    await s.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=emails))
    page = await eventually(
        lambda: s.ListTemplates(templates_pb2.ListTemplatesRequest(sender=sender)),
        lambda p: len(p.templates) > 0,
        timeout_s=60,
        what="the template forms",
    )
    return page.templates[0]


async def erase(s: templates_pb2_grpc.TemplateInductionStub, *ids: str) -> common_pb2.Operation:
    request = templates_pb2.TemplateInductionEraseRecipientsRequest(recipient_ids=list(ids))
    op = await s.EraseRecipients(request)
    assert op.operation_id
    assert op.kind == "erase_recipients"
    return await wait_done(s.GetOperation, op.operation_id)


async def test_a_template_below_k_after_the_erasure_is_dropped(server: Running) -> None:
    """Exactly k recipients formed it: erasing one unforms it (NOT_FOUND, no listing)."""
    s, sender = stub(server), "drop@shop.example"
    template = await formed(s, sender, [f"d-user-{i}" for i in range(K)])
    assert template.distinct_recipients == K
    done = await erase(s, "d-user-0", "d-unknown")
    assert done.progress.total >= 1
    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await s.GetTemplate(templates_pb2.GetTemplateRequest(template_id=template.template_id))
    assert gone.value.code() is grpc.StatusCode.NOT_FOUND
    page = await s.ListTemplates(templates_pb2.ListTemplatesRequest(sender=sender))
    assert list(page.templates) == []
    await erase(s, "d-user-0")  # idempotent


async def test_a_template_still_at_k_is_formed_again_from_the_rest(server: Running) -> None:
    """k + 1 recipients formed it: erasing one keeps it, formed from the k that remain."""
    s, sender = stub(server), "keep@shop.example"
    await formed(s, sender, [f"k-user-{i}" for i in range(K + 1)])
    before = await eventually(
        lambda: s.ListTemplates(templates_pb2.ListTemplatesRequest(sender=sender)),
        lambda p: p.templates[0].distinct_recipients == K + 1,
        timeout_s=60,
        what="the template holds every recipient",
    )
    await erase(s, "k-user-3")
    after = await s.ListTemplates(templates_pb2.ListTemplatesRequest(sender=sender))
    assert [t.template_id for t in after.templates] == [before.templates[0].template_id]
    assert after.templates[0].distinct_recipients == K


async def test_malformed_ids_name_each_bad_field(server: Running) -> None:
    """Empty list, empty, too long or NUL ids: INVALID_ARGUMENT naming each; unknown op."""
    s = stub(server)
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await s.EraseRecipients(
            templates_pb2.TemplateInductionEraseRecipientsRequest(
                recipient_ids=["ok", "", "r" * 513, "a\0"]
            )
        )
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert set(violations(bad.value)) == {
        "recipient_ids[1]",
        "recipient_ids[2]",
        "recipient_ids[3]",
    }
    with pytest.raises(grpc.aio.AioRpcError) as none:
        await s.EraseRecipients(templates_pb2.TemplateInductionEraseRecipientsRequest())
    assert set(violations(none.value)) == {"recipient_ids"}
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await s.GetOperation(common_pb2.GetOperationRequest(operation_id="nope"))
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND


async def test_erasure_needs_the_admin_scope(tmp_path: Path) -> None:
    """templates:write may submit but not erase; templates:admin may."""
    secret = tmp_path / "jwt.secret"
    secret.write_bytes(b"t" * 48)
    settings = replace(
        settings_for("sqlite", tmp_path), auth=AuthSettings(jwt_secret_file=str(secret))
    )

    def bearer(*scopes: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {mint_token(settings.auth, scopes, 60)}"),)

    async with running_server(settings) as running:
        s = stub(running)
        request = templates_pb2.TemplateInductionEraseRecipientsRequest(recipient_ids=["r"])
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await s.EraseRecipients(request, metadata=bearer("templates:write"))
        assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
        admin = bearer("templates:admin")
        op = await s.EraseRecipients(request, metadata=admin)
        read = await s.GetOperation(
            common_pb2.GetOperationRequest(operation_id=op.operation_id), metadata=admin
        )
        assert read.operation_id == op.operation_id
