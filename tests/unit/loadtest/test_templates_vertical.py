"""The vertical keywords' leave-one-source-out choice, on templates made here."""

from __future__ import annotations

from loadtest.benches.templates_vertical import _shares, _Template, choose


def _t(source: str, truth: str, fixed: str) -> _Template:
    return _Template(source, truth, fixed, ("News from Harbor",) * 6)


def test_a_word_enters_only_where_two_sources_vouch_for_it() -> None:
    """``gift`` corrects one source's template, ``regist`` two sources' templates: with
    two sources asked for, only ``regist`` enters; with one, both do."""
    templates = [
        _t("a", "account", "Thank you for registering."),
        _t("b", "account", "You registered with this address."),
        _t("c", "receipt", "A gift was bought for you."),
        _t("c", "other", "A ticket was opened."),
    ]
    sources = ["a", "b", "c"]
    assert _shares(templates, [])["a"] == 0.0
    two = choose(templates, sources, 2)
    assert [c[1] for c in two] == ["regist"]
    one = {c[1] for c in choose(templates, sources, 1)}
    assert {"regist", "gift"} <= one
    assert _shares(templates, two) == {"a": 1.0, "b": 1.0, "c": 0.5}


def test_a_word_that_lowers_a_source_never_enters() -> None:
    """``member`` corrects two sources' account mail but relabels a third source's
    newsletter: it does not enter."""
    templates = [
        _t("a", "account", "You are now a member. Please sign in."),
        _t("b", "account", "Member since today. Sign in here."),
        _t("c", "other", "A member posted: sign in to read it."),
    ]
    chosen = choose(templates, ["a", "b", "c"], 2)
    assert all(c[1] != "member" for c in chosen)
