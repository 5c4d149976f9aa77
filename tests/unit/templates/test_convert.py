"""SubmitEmails' input checks: every bad field named, good emails passed on unchanged."""

from __future__ import annotations

import pytest
from google.protobuf import timestamp_pb2
from loom.v1 import templates_pb2 as pb

from server.runtime.errors import InvalidArgument
from server.templates import convert
from server.templates.model import EmailIn
from server.templates.settings import TemplatesSettings

LIMITS = TemplatesSettings(max_body_bytes=1000, max_batch=10)


def _email(**fields: object) -> pb.Email:
    base: dict[str, object] = {
        "email_id": "e1",
        "sender": "shop@x.example",
        "recipient_id": "r1",
        "subject": "Your order",
        "html_body": "<p>hi</p>",
    }
    base.update(fields)
    return pb.Email(**base)  # type: ignore[arg-type]


def _fields(*emails: pb.Email) -> set[str]:
    with pytest.raises(InvalidArgument) as caught:
        convert.emails_from_proto(pb.SubmitEmailsRequest(emails=emails), LIMITS)
    return {v.field for v in caught.value.violations}


class TestEmailsFromProto:
    def test_valid_emails_pass_unchanged(self) -> None:
        """Every field as given; received_at in ms; non-ASCII ids and bodies within limits."""
        at = timestamp_pb2.Timestamp(seconds=1_700_000_000, nanos=123_456_789)
        emails = [
            _email(received_at=at),
            _email(email_id="\u00e9" * 128, subject="\u00e9" * 499, html_body="\u00e9" * 500),
        ]
        got = convert.emails_from_proto(pb.SubmitEmailsRequest(emails=emails), LIMITS)
        assert got == [
            EmailIn("e1", "shop@x.example", "r1", "Your order", "<p>hi</p>", 1_700_000_000_123),
            EmailIn("\u00e9" * 128, "shop@x.example", "r1", "\u00e9" * 499, "\u00e9" * 500, 0),
        ]

    def test_each_bad_field_is_named(self) -> None:
        """Empty, oversized (in UTF-8 bytes) or NUL-holding ids, an oversized subject or body
        and an out-of-range time are each named, with the email's index."""
        assert _fields(_email(), _email(recipient_id="")) == {"emails[1].recipient_id"}
        assert _fields(_email(email_id="\u00e9" * 257)) == {"emails[0].email_id"}
        assert _fields(_email(sender="a\x00b")) == {"emails[0].sender"}
        assert _fields(_email(subject="\u00e9" * 500)) == {"emails[0].subject"}
        assert _fields(_email(html_body="\u00e9" * 501)) == {"emails[0].html_body"}
        late = timestamp_pb2.Timestamp(seconds=300_000_000_000)
        assert _fields(_email(received_at=late)) == {"emails[0].received_at"}
        assert _fields(_email(email_id="", html_body="x" * 1001), _email(sender="")) == {
            "emails[0].email_id",
            "emails[0].html_body",
            "emails[1].sender",
        }
        assert _fields() == {"emails"}
