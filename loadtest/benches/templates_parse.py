"""Which HTML parser Crusher's fingerprint uses: ``python -m loadtest.benches.templates_parse``.

Parses the real-template corpus (`loadtest/corpora/email_sources`, instantiated by
`email_corpus`: ~1,100 emails of ~9 KB) with selectolax (Lexbor) and with lxml, each
followed by the same walk (indexed XPaths, index-free paths, text nodes) and the three
MinHash values, and reports documents/s for parse only and parse + walk + MinHash, best of
`--repeat` runs, in one process. The walks are the same; the trees differ (Lexbor builds
the HTML5 tree, inserting ``tbody`` as browsers do; lxml's libxml2 does not), reported as
the share of identical XPath sets.
The server keeps the faster (`server/templates/fingerprint.py`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import lxml.html
from selectolax.lexbor import LexborHTMLParser

from loadtest.corpora.email_corpus import build_corpus, real_templates
from server.templates.fingerprint import minhash, parse_structure

__all__ = ["lxml_structure", "main"]

_SKIP = {"head", "script", "style", "noscript", "template", "title", "meta", "link"}


def lxml_structure(html: str) -> tuple[frozenset[str], frozenset[str], list[tuple[str, str]]]:
    """The same walk as `parse_structure` (indexed and plain paths, own text), on lxml."""
    root = lxml.html.document_fromstring(html or "<html></html>")
    xpaths: set[str] = set()
    plain: set[str] = set()
    texts: list[tuple[str, str]] = []
    stack = [(root, f"/{root.tag}[0]", f"/{root.tag}")]
    while stack:
        node, path, plain_path = stack.pop()
        xpaths.add(path)
        plain.add(plain_path)
        counts: dict[str, int] = {}
        own = [node.text or ""]
        children = []
        for child in node:
            own.append(child.tail or "")
            tag = child.tag
            if not isinstance(tag, str) or tag in _SKIP:
                continue
            index = counts.get(tag, 0)
            counts[tag] = index + 1
            children.append((child, f"{path}/{tag}[{index}]", f"{plain_path}/{tag}"))
        text = " ".join(" ".join(own).split())[:200]
        if text:
            texts.append((path, text))
        stack.extend(reversed(children))
    return frozenset(xpaths), frozenset(plain), texts


def _rate(fn: Callable[[str], object], docs: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for doc in docs:
            fn(doc)
        best = min(best, time.perf_counter() - t0)
    return len(docs) / best


def main() -> None:
    """Prints a Markdown table of documents/s per parser."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    docs = [e.html for e in build_corpus(real_templates())]
    size = sum(len(d.encode()) for d in docs) / len(docs)
    rows = [
        ("selectolax (Lexbor) parse", _rate(LexborHTMLParser, docs, args.repeat)),
        ("lxml parse", _rate(lxml.html.document_fromstring, docs, args.repeat)),
        (
            "selectolax parse + walk + 3 MinHash",
            _rate(lambda d: minhash(parse_structure(d).xpaths), docs, args.repeat),
        ),
        (
            "lxml parse + walk + 3 MinHash",
            _rate(lambda d: minhash(lxml_structure(d)[0]), docs, args.repeat),
        ),
    ]
    same = sum(parse_structure(d).xpaths == lxml_structure(d)[0] for d in docs) / len(docs)
    print(f"{len(docs)} emails, mean {size / 1024:.1f} KB; identical XPath sets: {same:.0%}\n")
    print("| parser | documents/s |\n|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
