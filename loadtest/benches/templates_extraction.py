"""Field extraction with clustering set aside: each true template's training emails its cluster.

``python -m loadtest.benches.templates_extraction [--subjects real|sender|names]
[--source NAME] [--json OUT]``

The quality phase's real corpus (`email_corpus.build_corpus`), in one process: the field
rules, date format, fixed text and vertical each true template's 25 training emails form
(k = 5, the service's own `udcas`), then every fresh instance read by them
(`service.fields_of`),
scored per source by `figures.templates_extraction` exactly as the server run's
``extraction.per_source`` is. What it isolates: extraction alone, on perfect clusters, so
a change to formation or reading shows without the online clustering's run-to-run spread.
Deterministic (the corpus is seeded); also prints a digest of every formed rule, so two
trees can be shown to form the same rules.

``--online`` clusters as the service does instead, replayed in one process as
`templates_loso` replays it (each row formed at k recipients and re-formed as it grows, the
rules of a template whose sample has not doubled kept), and reads each fresh instance by
the template it matches: the server run's protocol without its run-to-run spread (the
server's formation timing moves Weblate's clusters from run to run), so a change to
formation or reading shows on the clusters the service forms.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

__all__ = ["main", "measure", "measure_online"]

_K = 5


def _annotated(
    e: Any,
    formed_vertical: str,
    fixed: Sequence[str],
    fields: Sequence[Any],
    blocks: Sequence[Any],
    shared: frozenset[str] = frozenset(),
) -> Any:
    """One fresh instance as `figures.templates_extraction` scores it: what its generator
    put in against the fields and rows read from it."""
    from loadtest.figures.templates_extraction import Annotated, Generated
    from loadtest.workloads.templates import visible_text

    def cells(got: Sequence[Any]) -> list[tuple[str, str, str, str]]:
        return [(f.label, f.value, f.type, f.normalized) for f in got]

    return Annotated(
        e.package,
        [Generated(v.name, v.value, v.row, v.constant, shown=v.shown) for v in e.values],
        e.vertical,
        formed_vertical,
        cells(fields),
        [cells(row) for b in blocks for row in b.rows],
        list(fixed),
        visible_text(e.html),
        shared,
    )


def _per_source(annotated: Sequence[Any]) -> dict[str, dict[str, Any]]:
    from loadtest.figures.templates_extraction import by_source

    return {
        f.source: {k: v for k, v in asdict(f).items() if k != "source"}
        for f in by_source(annotated)
    }


def measure(subjects: str, source: str = "", seed: int = 7) -> dict[str, Any]:
    """Per-source extraction figures on perfect clusters, and the rules' digest."""
    from loadtest.corpora.email_corpus import build_corpus, real_templates
    from loadtest.figures.templates_extraction import Annotated, k_shared
    from server.templates.fingerprint import parse_structure
    from server.templates.model import ClusterEmail
    from server.templates.service import fields_of
    from server.templates.udcas import Cluster, date_format, field_rules, fixed_text, vertical

    templates = [t for t in real_templates() if source in t.package]
    train: dict[str, list[Any]] = defaultdict(list)
    fresh: dict[str, list[Any]] = defaultdict(list)
    for e in build_corpus(templates, subjects=subjects, seed=seed):
        if not e.noise:
            (fresh if e.held_out else train)[e.label].append(e)
    digest = hashlib.sha256()
    annotated: list[Annotated] = []
    shared = k_shared((e for got in train.values() for e in got), _K)
    for label in sorted(train):
        emails = [
            ClusterEmail(e.recipient, e.sender, e.subject, parse_structure(e.html).texts, 0)
            for e in train[label]
        ]
        cluster = Cluster(emails, _K)
        rules, order, fixed = field_rules(cluster), date_format(cluster), fixed_text(cluster)
        formed_vertical = vertical(cluster, rules)
        digest.update(repr(rules).encode())
        for e in fresh[label]:
            texts = parse_structure(e.html).texts
            fields, blocks = fields_of(rules, texts, order)
            annotated.append(
                _annotated(
                    e, formed_vertical, fixed, fields, blocks, shared.get(label, frozenset())
                )
            )
    return {
        "subjects": subjects,
        "k": _K,
        "seed": seed,
        "rules_digest": digest.hexdigest()[:16],
        "per_source": _per_source(annotated),
    }


def measure_online(subjects: str, source: str = "", seed: int = 7) -> dict[str, Any]:
    """Per-source extraction figures on the clusters the service forms, replayed."""
    from loadtest.benches.templates_loso import fingerprinted, form_online
    from loadtest.corpora.email_corpus import build_corpus, real_templates
    from loadtest.figures.templates_extraction import Annotated, k_shared
    from server.templates.schemes import SchemeParams, match_template
    from server.templates.service import fields_of
    from server.templates.tokens import email_hashes

    corpus = build_corpus(
        [t for t in real_templates() if source in t.package], subjects=subjects, seed=seed
    )
    parsed = fingerprinted(corpus)
    p = SchemeParams()
    formed = form_online(corpus, parsed, p, _K, keep_rules=True)
    shared = k_shared((e for e in corpus if not e.held_out and not e.noise), _K)
    annotated: list[Annotated] = []
    for e, pr in zip(corpus, parsed, strict=True):
        if not e.held_out or e.noise or pr is None:
            continue
        t, _ = match_template(formed.get(pr.keys[0], []), email_hashes(e.subject, pr.texts), p)
        if t is None:
            continue
        fields, blocks = fields_of(t.field_rules, pr.texts, t.date_format)
        annotated.append(
            _annotated(
                e, t.vertical, t.fixed_text, fields, blocks, shared.get(e.label, frozenset())
            )
        )
    return {
        "subjects": subjects,
        "k": _K,
        "seed": seed,
        "online": True,
        "per_source": _per_source(annotated),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--subjects", default="real", choices=("name", "real", "sender"))
    parser.add_argument("--source", default="", help="only packages whose name holds this")
    parser.add_argument("--online", action="store_true", help="cluster as the service does")
    parser.add_argument(
        "--seed", type=int, default=7, help="the corpus's draws (7: the published figures)"
    )
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    out = (measure_online if args.online else measure)(args.subjects, args.source, args.seed)
    for name, got in out["per_source"].items():
        shares = "  ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} -"
            for k, v in got.items()
            if k in ("whole", "inside", "money", "dates", "rows", "vertical")
        )
        print(f"{name:34s} {shares}")
    if "rules_digest" in out:
        print("rules digest", out["rules_digest"])
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
