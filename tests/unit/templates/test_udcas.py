"""UDCAs: what a formed cluster says about itself (fixed text, date format, vertical, fields)."""

from __future__ import annotations

import random

from server.templates.udcas import Cluster, date_format, field_rules, fixed_text, vertical
from tests.templates_corpus import NAMES, cluster_emails, receipt, reset


class TestUdcas:
    def test_receiptcluster_emails(self) -> None:
        """Fixed text, DD/MM order, receipt vertical and typed varying fields."""
        rng = random.Random(5)
        emails = cluster_emails(
            [receipt(rng, NAMES[i]) for i in range(6)], [f"u{i}" for i in range(6)]
        )
        c = Cluster(emails, 5)
        fixed = fixed_text(c)
        assert "Thanks for your order" in fixed
        assert not any(name in " ".join(fixed) for name in NAMES)
        assert date_format(c) == "DD/MM/YYYY"
        assert vertical(c) == "receipt"
        types = {r.type for r in field_rules(c)}
        assert {"id", "date", "money"} <= types

    def test_reset_is_account(self) -> None:
        """A password reset cluster is labelled account/security."""
        rng = random.Random(6)
        c = Cluster(
            cluster_emails([reset(rng, NAMES[i]) for i in range(6)], [f"u{i}" for i in range(6)]), 5
        )
        assert vertical(c) == "account"


_FOOTER = (
    "<p>Manage your account settings or unsubscribe.</p>"
    "<p>You receive this because you have an account with us.</p>"
)


def _cluster_of(subject: str, html: str, n: int = 6) -> Cluster:
    """A cluster of `n` recipients' copies of one email (k = 5)."""
    from server.templates.fingerprint import parse_structure
    from server.templates.model import ClusterEmail

    texts = parse_structure(html).texts
    return Cluster([ClusterEmail(f"u{i}", "s@x", subject, texts, 0) for i in range(n)], 5)


def _made(subject: str, body: str, n: int = 6) -> Cluster:
    return _cluster_of(
        subject, f"<html><body><table><tr><td>{body}{_FOOTER}</td></tr></table></body></html>", n
    )


def _bare_vertical(subject: str, body: str) -> str:
    """The vertical of six emails of `body` alone (no layout, no footer) under `subject`."""
    return vertical(_cluster_of(subject, f"<html><body>{body}</body></html>"))


class TestVertical:
    def test_specific_verticals_over_footer_words(self) -> None:
        """Receipts, invoices, shipping notices, newsletters and account mail, all in a
        layout whose footer speaks of the account: each gets its own vertical."""
        cases = {
            "bill": ("Invoice INV-204 from Nordic", "<h1>Invoice</h1><p>Amount Due</p>"),
            "receipt": (
                "Your receipt from Nordic",
                "<h1>Thank you for your purchase</h1><p>Order summary</p><p>Subtotal</p>",
            ),
            "shipping": (
                "Your order has shipped",
                "<h1>Your order is on its way</h1><p>Tracking number</p><p>Order summary</p>",
            ),
            "newsletter": (
                "The Nordic weekly digest",
                "<h1>Top stories this week</h1><p>Read more</p><p>Read more</p>",
            ),
            "account": (
                "Welcome to Nordic",
                "<h1>Welcome aboard</h1><p>Verify your email to activate your account.</p>",
            ),
        }
        for want, (subject, body) in cases.items():
            assert vertical(_made(subject, body)) == want, want

    def test_a_bill_that_mentions_its_order_is_a_bill(self) -> None:
        """An invoice for an order: bill outweighs the order words."""
        c = _made("Invoice for your order 1234", "<p>Order number</p><p>Invoice</p><p>Due date</p>")
        assert vertical(c) == "bill"

    def test_fixed_words_around_a_value_decide_it(self) -> None:
        """A generic subject and no whole fixed piece with a keyword: the fixed tokens
        around each value (``Welcome … !``, ``to confirm your email address``) decide."""
        from server.templates.fingerprint import parse_structure
        from server.templates.model import ClusterEmail

        emails = [
            ClusterEmail(
                f"u{i}",
                "s@x",
                "News from Harbor",
                parse_structure(
                    f"<html><body><h1>Welcome {name.split()[0].lower()}@mail.example!</h1>"
                    f"<p>Use <a href='#'>this link</a> to confirm your email address, "
                    f"{name}.</p></body></html>"
                ).texts,
                0,
            )
            for i, name in enumerate(NAMES[:8])
        ]
        c = Cluster(emails, 5)
        assert not any("confirm" in t for t in fixed_text(c))
        assert vertical(c) == "account"

    def test_one_leaning_word_is_no_vertical(self) -> None:
        """A lone word that only leans (``login`` in a ticket notice) labels nothing; two
        leaning words do."""
        assert _bare_vertical("Ticket 82", "<p>Ticket changed.</p><p>Login to reply</p>") == "other"
        assert (
            _bare_vertical("Ticket 82", "<p>Ticket changed.</p><p>Login to your account</p>")
            == "account"
        )

    def test_registering_and_a_confirmation_link_are_account_mail(self) -> None:
        """``regist`` is a stem (``registering``, ``registered``), and ``confirm`` leans
        towards account mail: with another leaning word, or a naming one, it labels."""
        assert (
            _bare_vertical("Thank you for registering.", "<p>Thank you for registering.</p>")
            == "account"
        )
        assert (
            _bare_vertical("News from Harbor", "<p>Your currently registered email is old.</p>")
            == "account"
        )
        assert _bare_vertical("News from Harbor", "<p>Click to confirm the change.</p>") == "other"
        assert (
            _bare_vertical("News from Harbor", "<p>Click to confirm your login.</p>") == "account"
        )

    def test_words_footers_use_name_no_vertical_alone(self) -> None:
        """``verify`` (a ticket's resolution the submitter will verify), ``subscription``
        (a forum's "subscription settings"), ``locked`` and ``new comment`` name no vertical
        by themselves; ``verify your`` (email, account, identity) still names account mail."""
        resolved = "<p>The submitter will verify the resolution before the ticket is closed.</p>"
        assert _bare_vertical("Printer on fire (Resolved)", resolved) == "other"
        chat = "<p>This chat notification was sent due to your subscription settings.</p>"
        assert _bare_vertical("New chat message", chat) == "other"
        assert (
            _bare_vertical("Component Docs was locked", "<p>The component was locked.</p>")
            == "other"
        )
        assert _bare_vertical("New comment in Docs", "<p>A new comment was posted.</p>") == "other"
        assert (
            _bare_vertical("News from Harbor", "<p>Click below to verify your email address.</p>")
            == "account"
        )
