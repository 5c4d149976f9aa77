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


class TestAnnotationToProto:
    def test_labels_rows_and_rule_places(self) -> None:
        """Fields carry their label, blocks their rows; rules their place and pattern; a
        version-1 rule stays xpath and type only."""
        from server.templates.model import (
            Extracted,
            ExtractedBlock,
            FieldRuleValue,
            TemplateValue,
        )
        from server.templates.service import Annotation

        total = Extracted("/p[3]", "$12.50", "money", "12.5", "Amount Due")
        row = (Extracted("/tr[1]/td[0]", "Lamp", "text", "Lamp", "Item"),)
        span = FieldRuleValue(
            "/p[3]",
            "money",
            "Amount Due",
            "Questions?",
            4,
            "",
            "/p",
            0,
            2,
            "/tr",
            "",
            ("Amount", "Due", ":", None),
            0,
        )
        t = TemplateValue(
            "id",
            "s",
            (1,),
            5,
            6,
            "bill",
            ("Amount Due:",),
            "",
            (span, FieldRuleValue("/x", "id")),
            9,
            "loom",
        )
        got = convert.annotation_to_proto(
            Annotation((1, 2, 3), t, (total,), (ExtractedBlock("Item", (row, row)),))
        )
        first = got.fields[0]
        assert (first.label, first.value, first.normalized) == (
            "Amount Due",
            "$12.50",
            "12.5",
        )
        # A 1.0 client reading `fields` alone still sees the rows' fields, after the rest.
        assert [f.value for f in got.fields][1:] == ["Lamp", "Lamp"]
        assert [[f.value for f in r.fields] for r in got.blocks[0].rows] == [["Lamp"], ["Lamp"]]
        assert got.blocks[0].label == "Item"
        rule, old = convert.template_to_proto(t).field_rules
        assert rule.pattern == "Amount Due: {}"
        assert rule.placement == pb.FIELD_PLACEMENT_AFTER_BLOCK
        assert (rule.label, rule.anchor, rule.path, rule.row_path) == (
            "Amount Due",
            "Questions?",
            "/p",
            "/tr",
        )
        assert old == pb.FieldRule(xpath="/x", type="id")

    def test_a_stretch_of_two_blocks_names_each_rules_own_block(self) -> None:
        """With two blocks in a stretch, a rule's placement and row path are those of its
        own block: the second block's rows, the text between the blocks (after the first),
        the text after the second."""
        from dataclasses import replace

        from server.templates.model import FieldRuleValue

        base = FieldRuleValue("/x", "text", "Commit", "PR", 1, "", "/a", 0, 0, "/div\n/ul/li")
        got = [
            convert._rule(replace(base, segment=s, block="Commits" if s % 2 else ""))
            for s in range(5)
        ]
        assert [(r.placement, r.row_path) for r in got] == [
            (pb.FIELD_PLACEMENT_STRETCH, "/div"),
            (pb.FIELD_PLACEMENT_ROW, "/div"),
            (pb.FIELD_PLACEMENT_AFTER_BLOCK, "/div"),
            (pb.FIELD_PLACEMENT_ROW, "/ul/li"),
            (pb.FIELD_PLACEMENT_AFTER_BLOCK, "/ul/li"),
        ]
        assert [r.block_label for r in got] == ["", "Commits", "", "Commits", ""]
