"""No log line of a real `loom serve` ever carries an email body or a recipient id."""

from __future__ import annotations

import random
from pathlib import Path

import grpc
import pytest
from loom.v1 import templates_pb2, templates_pb2_grpc

from tests.serving import eventually, loom_process
from tests.templates_corpus import receipt

SECRET_RECIPIENT = "recipient-7f3a-never-logged"
SECRET_TEXT = "Yolanda Privatename"


def _email(eid: str, recipient: str, html: str, subject: str = "s") -> templates_pb2.Email:
    return templates_pb2.Email(
        email_id=eid,
        sender="orders@acme.example",
        recipient_id=recipient,
        subject=subject,
        html_body=html,
    )


async def test_debug_logs_hold_no_body_and_no_recipient(tmp_path: Path) -> None:
    """At debug level, through good input, bad input and junk, the log stays clean."""
    rng = random.Random(9)
    env = {
        "LOOM_TEMPLATES__K_ANONYMITY": "3",
        "LOOM_TEMPLATES__CPU_WORKERS": "1",
        "LOOM_TEMPLATES__MAX_BODY_BYTES": "65536",
    }
    async with (
        loom_process(tmp_path, "--log-level", "debug", env=env) as served,
        grpc.aio.insecure_channel(served.target) as channel,
    ):
        s = templates_pb2_grpc.TemplateInductionStub(channel)
        good = [
            _email(f"g{i}", f"{SECRET_RECIPIENT}-{i}", receipt(rng, SECRET_TEXT)[1])
            for i in range(4)
        ]
        await s.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=good))
        big = f"<p>{SECRET_TEXT}</p>" + "z" * 70_000
        with pytest.raises(grpc.aio.AioRpcError):
            await s.SubmitEmails(
                templates_pb2.SubmitEmailsRequest(emails=[_email("b", "", big, SECRET_TEXT)])
            )
        junk = SECRET_TEXT + bytes(range(256)).decode("latin-1")
        await s.SubmitEmails(
            templates_pb2.SubmitEmailsRequest(emails=[_email("j", SECRET_RECIPIENT, junk)])
        )
        probe = templates_pb2.AnnotateEmailRequest(
            email=_email("p", SECRET_RECIPIENT, good[0].html_body)
        )
        await eventually(lambda: s.AnnotateEmail(probe), lambda r: r.template_id != "")
    text = served.stderr()
    assert "TemplateInduction/SubmitEmails" in text  # the log was written at all
    assert SECRET_RECIPIENT not in text
    assert SECRET_TEXT not in text
    assert "<p>" not in text
