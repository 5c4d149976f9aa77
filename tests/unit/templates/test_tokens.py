"""Tokens: word shingles of text nodes and subjects, and their hashes as annotation sees them."""

from __future__ import annotations

from server.templates.tokens import (
    END,
    PREFIX,
    SUBJECT,
    SUFFIX,
    email_hashes,
    shingles,
    signature_hashes,
    suffix_words,
    tokens_of,
)


class TestTokens:
    def test_shingles_keep_fixed_words_apart_from_values(self) -> None:
        """Word 3-shingles between markers: a value spoils only the shingles it touches."""
        a = shingles("Hi Ava, your order 1234 has shipped")
        b = shingles("Hi Bob, your order 98 has shipped")
        assert f"has shipped {END}" in a & b
        assert "Hi Ava, your" in a - b
        assert shingles("Total:") == {f"^ Total: {END}"}

    def test_subject_prefixes_and_whole_subject(self) -> None:
        """A subject yields its shingles, its 1-4 word prefixes and, when short, itself."""
        toks = tokens_of("Your order #123", [])
        assert {PREFIX + "Your", PREFIX + "Your order"} <= toks
        assert PREFIX + f"Your order #123 {END}" in toks
        assert SUBJECT + "^ Your order" in toks
        assert not any(t.startswith(PREFIX) for t in tokens_of("", [("/p", "x")]))

    def test_subject_suffixes_read_last_word_first(self) -> None:
        """A subject yields its 1-4 word suffixes, last word first, and, when short, itself:
        a fixed end after a value (``(Closed)``) is a token of its own."""
        toks = tokens_of("Printer on fire (Closed)", [])
        assert {SUFFIX + "(Closed)", SUFFIX + "(Closed) fire"} <= toks
        assert SUFFIX + f"(Closed) fire on Printer {END}" in toks
        assert suffix_words(SUFFIX + "(Closed) fire") == ("(Closed)", "fire")
        assert suffix_words(PREFIX + "Printer") is None
        assert not any(t.startswith(SUFFIX) for t in tokens_of("", [("/p", "x")]))

    def test_hashes_agree_with_the_tokens(self) -> None:
        """What annotation intersects is exactly the tokens, hashed: a signature made of an
        email's tokens is wholly contained in that email's hashes, and nothing else is."""
        texts = [("/p", "Hi Ava, your order 1234 has shipped"), ("/p", "Total:"), ("/p", "")]
        for subject in (
            "",
            "Order",
            "Your order #123",
            "Reset your password for Ava Smith",
            "a b (Closed)",
        ):
            toks = tokens_of(subject, texts)
            assert signature_hashes(tuple(sorted(toks))) == email_hashes(subject, texts)
        assert not signature_hashes(("not in it",)) & email_hashes("Order", texts)
