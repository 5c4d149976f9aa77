"""Field values: generic types, and dates read in the order a template learned."""

from __future__ import annotations

from server.templates.values import classify, date_order, normalize


class TestValues:
    def test_types(self) -> None:
        """Generic annotations: dates, money, ids, URLs, emails, names."""
        assert classify("12/03/2024") == "date"
        assert classify("$1,234.50") == "money"
        assert classify("AC123456") == "id"
        assert classify("https://x.example/a") == "url"
        assert classify("a@b.example") == "email"
        assert classify("Susan Calvin") == "name"
        assert classify("hello world") == "text"

    def test_telephone_numbers_are_typed_and_normalised_to_their_digits(self) -> None:
        """``(408) 341-0600`` is a telephone number, read as its digits (``+`` kept); a date
        or an order id of digit groups is not."""
        assert classify("(408) 341-0600") == "phone"
        assert normalize("(408) 341-0600", "phone") == "4083410600"
        assert normalize("+44 20 7946 0958", "phone") == "+442079460958"
        assert classify("887-623-2860") == "phone"
        assert classify("12-03-2026") == "date"
        assert classify("ORD-123456") == "id"

    def test_ambiguous_dates_use_the_learned_order(self) -> None:
        """1/2/2025 is read with the template's order; unambiguous dates need none."""
        assert date_order(["13/02/2025", "1/2/2025", "25/12/2024"]) == "DMY"
        assert date_order(["02/13/2025"]) == "MDY"
        assert normalize("01/02/2025", "date", "DMY") == "2025-02-01"
        assert normalize("01/02/2025", "date", "MDY") == "2025-01-02"
        assert normalize("01/02/2025", "date", "") == ""
        assert normalize("25/12/2024", "date", "") == "2024-12-25"


def test_word_dates_with_ordinal_days() -> None:
    """``February 25th, 2026`` and ``3rd March 2026`` are dates of their day."""
    from server.templates.values import classify, normalize

    assert classify("February 25th, 2026") == "date"
    assert normalize("February 25th, 2026", "date") == "2026-02-25"
    assert normalize("3rd March 2026", "date") == "2026-03-03"
