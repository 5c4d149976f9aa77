"""An email's structure, as Crusher reads it: the DOM's XPaths and their MinHash values.

The paper (§2.1): the DOM becomes the set S of XPaths of tag names *with indices*, no
attributes and no text (``/html[0]/body[0]/table[0]/tr[1]/td[2]``); three MinHash values of
S, each under its own fixed seed, summarise it. Indices count siblings of the same tag
name from 0 (XPath's own notion of position, shifted to the paper's 0-based spelling).

The same walk also yields what Loom's own scheme and the UDCAs need, so the HTML is parsed
exactly once per email: the *index-free* paths (``/html/body/table/tr/td``: 2 or 9 line
items look alike) and the text nodes with the indexed XPath of their element.

Parser: selectolax (Lexbor). Measured on the real-template corpus, parse + walk:
`python -m loadtest.benches.templates_parse` (selectolax vs lxml, docs/benchmarks.md).
Everything here is bounded, so junk input costs bounded work: at most `MAX_TAGS` tags
parsed, `MAX_ELEMENTS` elements walked to depth `MAX_DEPTH`, `MAX_TEXTS` text nodes kept,
each cut to `MAX_TEXT_CHARS`.

Runs in the CPU stage's worker processes: pure, no I/O, deterministic on every machine
(mmh3 is specified byte for byte; a unit test pins known values).
"""

from __future__ import annotations

from dataclasses import dataclass

import mmh3
from selectolax.lexbor import LexborHTMLParser, LexborNode

__all__ = [
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "MAX_TEXTS",
    "MAX_TEXT_CHARS",
    "MINHASH_SEEDS",
    "PIECE_SEP",
    "Structure",
    "minhash",
    "parse_structure",
]

MINHASH_SEEDS = (0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D)
"""The paper's three fixed seeds (documented, never to change: they are template ids):
the 32-bit golden-ratio constant and MurmurHash3's two fmix32 multipliers."""
MAX_ELEMENTS = 20_000
"""Elements walked per email; a 30 MB junk body costs no more than a large real one."""
MAX_TEXTS = 2_000
"""Text nodes kept per email."""
MAX_TEXT_CHARS = 200
"""Characters kept per text node (whitespace collapsed)."""
MAX_TAGS = 8_000
"""Tags parsed per email: the body is cut before the next ``<``. Lexbor's cost grows with
the square of nesting depth (50,000 unclosed ``<div>`` take seconds), a real email has a
few hundred to a few thousand tags."""
MAX_DEPTH = 128
"""Elements deeper than this are not walked (paths would grow with the square of depth)."""

PIECE_SEP = "\x1f"
"""Joins the pieces of one element's direct text (``Ship to<br>Ines<br>Main St``): each piece
is its own text item for extraction. It is whitespace to ``str.split()``, so word tokens and
clustering shingles are exactly those of the pieces joined by a space, and it is no line
break, so a text still never holds one (the I/O stage joins an email's texts one a line)."""

_SKIP = frozenset({"head", "script", "style", "noscript", "template", "title", "meta", "link"})
_EMPTY_MINHASH = 0xFFFFFFFFFFFFFFFF


@dataclass(frozen=True, slots=True)
class Structure:
    """What one walk of an email's DOM yields."""

    xpaths: frozenset[str]
    """The paper's S: element XPaths with 0-based same-tag sibling indices."""
    plain_paths: frozenset[str]
    """The same paths without indices (Loom's clustering set)."""
    texts: tuple[tuple[str, str], ...]
    """(indexed XPath of an element, its own direct text), pre-order, one per element; the
    text's pieces (separated by child elements such as ``<br>``) joined by `PIECE_SEP`."""


def minhash(items: frozenset[str], seeds: tuple[int, ...] = MINHASH_SEEDS) -> tuple[int, ...]:
    """One MinHash value per seed: the least unsigned 64-bit MurmurHash3 over `items`.

    An empty set (no elements at all) gets all-ones under every seed.
    """
    if not items:
        return tuple(_EMPTY_MINHASH for _ in seeds)
    encoded = [item.encode() for item in items]
    return tuple(min(mmh3.hash64(e, seed, signed=False)[0] for e in encoded) for seed in seeds)


def _collapse(text: str) -> str:
    return " ".join(text.split())[:MAX_TEXT_CHARS]


def _pieces(own: list[str]) -> str:
    """Direct text pieces, each whitespace-collapsed, joined by `PIECE_SEP`, cut as one."""
    if len(own) == 1:
        return _collapse(own[0])
    pieces = [" ".join(p.split()) for p in own]
    return PIECE_SEP.join(p for p in pieces if p)[:MAX_TEXT_CHARS].rstrip(PIECE_SEP)


def _first_tags(html: str, limit: int) -> str:
    """`html` cut just before its `limit`-th ``<`` (unchanged when it has fewer)."""
    at = -1
    for _ in range(limit):
        at = html.find("<", at + 1)
        if at < 0:
            return html
    return html[:at]


def parse_structure(html: str | bytes) -> Structure:
    """Parses `html` (any bytes: malformed HTML and binary junk are fine) and walks it."""
    if isinstance(html, bytes):
        html = html.decode("utf-8", errors="replace")
    html = _first_tags(html, MAX_TAGS)
    root = LexborHTMLParser(html).root
    xpaths: set[str] = set()
    plain: set[str] = set()
    texts: list[tuple[str, str]] = []
    if root is None:
        return Structure(frozenset(), frozenset(), ())
    walked = 0
    # Explicit stack (deep junk nesting must not hit Python's recursion limit):
    # (node, its indexed path, its plain path).
    stack: list[tuple[LexborNode, str, str, int]] = [(root, f"/{root.tag}[0]", f"/{root.tag}", 0)]
    while stack and walked < MAX_ELEMENTS:
        node, path, plain_path, depth = stack.pop()
        walked += 1
        xpaths.add(path)
        plain.add(plain_path)
        counts: dict[str, int] = {}
        children: list[tuple[LexborNode, str, str, int]] = []
        own: list[str] = []
        for child in node.iter(include_text=True):  # C-level sibling walk: ~10 % faster
            tag = child.tag
            if tag == "-text":
                text = child.text_content
                if text and not text.isspace():  # most are indentation between tags
                    own.append(text)
            elif tag and tag[0] not in "-_!" and tag not in _SKIP and depth < MAX_DEPTH:
                index = counts.get(tag, 0)
                counts[tag] = index + 1
                children.append((child, f"{path}/{tag}[{index}]", f"{plain_path}/{tag}", depth + 1))
        if own and len(texts) < MAX_TEXTS:
            text = _pieces(own)
            if text:
                texts.append((path, text))
        stack.extend(reversed(children))  # pre-order, document order for texts
    return Structure(frozenset(xpaths), frozenset(plain), tuple(texts))
