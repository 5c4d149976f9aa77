"""The formation replay: what it compares is the same work each repetition, from cold caches."""

from __future__ import annotations

from loadtest.benches.templates_formation import FIRST_AT, measure


def test_repetitions_form_the_same_templates_from_the_stream() -> None:
    """A short stream's busiest rows (>= FIRST_AT emails) form templates, and a repetition
    after the caches are cleared forms the same bytes: the digest two trees are compared
    by depends on the code, not on what a cache held."""
    once = measure(600, 1)
    twice = measure(600, 2)
    assert once["rows_formed"] >= 1, f"no row reached {FIRST_AT} emails"
    assert once["templates"] >= once["rows_formed"]
    assert once["digest"] == twice["digest"]
    assert once["floor_cpu_s_per_1000"] > 0
    assert once["formation_cpu_s_per_1000"] > 0
