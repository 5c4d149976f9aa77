"""Crusher's fingerprint: indexed XPaths of the DOM and three pinned MinHash values."""

from __future__ import annotations

import mmh3

from server.templates.fingerprint import MAX_DEPTH, MINHASH_SEEDS, minhash, parse_structure

_TABLE = "<html><body><table><tr><td>Order</td><td>42</td></tr></table></body></html>"


class TestFingerprint:
    def test_xpaths_are_tag_names_with_same_tag_indices(self) -> None:
        """The paper's S: indexed tag paths, no attributes, no text."""
        s = parse_structure(
            '<table class="x"><tr><td>a</td></tr><tr><td>b</td><td id="c">c</td></tr></table>'
        )
        assert "/html[0]/body[0]/table[0]/tbody[0]/tr[1]/td[1]" in s.xpaths
        assert not any("class" in x or "id" in x for x in s.xpaths)
        assert "/html/body/table/tbody/tr/td" in s.plain_paths
        assert ("/html[0]/body[0]/table[0]/tbody[0]/tr[1]/td[1]", "c") in s.texts

    def test_three_minhash_values_are_pinned(self) -> None:
        """Same email, same values, in every process on every machine (mmh3, fixed seeds)."""
        assert MINHASH_SEEDS == (0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D)
        expected = (1262771533175142054, 7768749385341590074, 1469259957201556649)
        assert minhash(parse_structure(_TABLE).xpaths) == expected

    def test_minhash_is_the_least_seeded_hash(self) -> None:
        """Each value is min over the set of mmh3.hash64(path, seed) (unsigned)."""
        items = frozenset({"/a[0]", "/a[0]/b[0]", "/a[0]/b[1]"})
        want = tuple(
            min(mmh3.hash64(i, seed, signed=False)[0] for i in items) for seed in MINHASH_SEEDS
        )
        assert minhash(items) == want

    def test_junk_and_deep_nesting_are_bounded(self) -> None:
        """Binary junk parses; 100,000 unclosed tags are cut to MAX_TAGS and MAX_DEPTH."""
        assert parse_structure(bytes(range(256)) * 10).xpaths
        deep = parse_structure("<div>" * 100_000)
        assert len(deep.xpaths) <= MAX_DEPTH + 1
