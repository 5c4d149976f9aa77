"""Leave one source out: ``python -m loadtest.benches.templates_loso [--json OUT]``.

The clustering's thresholds (annotation's match share, the split rules' presence and own
text share) are chosen on the real-template corpus's other sources and measured on the
source left out, for every source in turn; the report gives each source's figures under
the thresholds chosen without it, and the worst source. A threshold that only holds on
the material it was chosen on shows up here as a bad left-out figure.

The online service is replayed in one process, with its own functions: the training
emails arrive in the corpus's order, each row forms at k distinct recipients and re-forms
each time its recipients grow by `rows.GROWTH` (Algorithm 2 with Loom's growth rule, as
`server/templates/rows.py` decides), and the held-out instances are annotated with
`schemes.match_template` against the row's last templates. `python -m loadtest templates
--phases quality` runs the same protocol through a real server with the defaults.

``--brand prefix|suffix`` puts the sender's name on every template email's subject
(``[Helpdesk-desk] …`` or ``… | Helpdesk-desk``), as many senders do: material the
thresholds were not chosen on, which a subject rule that only holds on bare subjects fails.
``--names prefix|suffix`` greets each recipient by first name on every template subject
(``Ava, your order …`` or ``… for Ava``), one name per recipient from the corpus's list of
twenty, as personalised mail does: a value that, from so short a list, k recipients of a
row share.

``--layout tables`` is an experiment on the row key, not what the service does: a container
element counts in the layout only when it holds a table part at some depth, so a ``div`` of
links that some of a template's emails have (Weblate's breadcrumb) no longer sends them to
another row, and neither does a ``div`` that is all a template's structure has of its own
(docs/benchmarks.md gives both sides).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadtest.corpora.email_corpus import FIRST_NAMES, LabeledEmail, build_corpus, real_templates
from loadtest.figures.templates_quality import pairwise_quality
from server.templates.fingerprint import parse_structure
from server.templates.grouping import GroupingParams
from server.templates.model import ClusterEmail, EmailIn, Parsed, TemplateValue
from server.templates.rows import GROWTH
from server.templates.schemes import (
    SchemeParams,
    form_templates,
    match_template,
    row_key,
    skeleton,
)
from server.templates.tokens import email_hashes
from server.templates.work import fingerprint_batch

__all__ = [
    "GRID",
    "SourceFigures",
    "branded",
    "choose",
    "fingerprinted",
    "form_online",
    "main",
    "named",
    "relaid",
    "replay",
    "table_frame",
]

GRID = tuple(
    SchemeParams(
        match=m,
        grouping=GroupingParams(
            present=pr, min_own_share=share, own_share_cap=cap, own_over_shared=oos
        ),
    )
    for m, pr, share, cap, oos in itertools.product(
        (0.7, 0.8, 0.9), (0.85, 0.9), (0.05, 0.1, 0.2), (0, 8), (0.0, 2.0)
    )
)
"""The thresholds a fold chooses among (the service's defaults are one of them)."""


@dataclass(frozen=True)
class SourceFigures:
    """One source's held-out figures under one choice of thresholds."""

    precision: float
    recall: float
    templates_per_true: float
    unformed: int
    true_templates: int

    @property
    def floor(self) -> float:
        """The weaker of precision and recall: what a fold maximises the worst of."""
        return min(self.precision, self.recall)

    @property
    def meets_aims(self) -> bool:
        """Precision >= 0.95, recall >= 0.90, <= 1.1 templates per true one, none unformed."""
        return (
            self.precision >= 0.95
            and self.recall >= 0.9
            and self.templates_per_true <= 1.1
            and not self.unformed
        )


def _resubjected(
    emails: Sequence[LabeledEmail], subject: Callable[[LabeledEmail], str]
) -> list[LabeledEmail]:
    """`emails` with every template email's subject replaced by `subject`'s; human emails
    as they were."""
    return [e if e.noise else dataclasses.replace(e, subject=subject(e)) for e in emails]


def branded(emails: Sequence[LabeledEmail], where: str) -> list[LabeledEmail]:
    """`emails` with the sender's name (its domain's first label) before (``prefix``) or
    after (``suffix``) every template email's subject; human emails as they were."""

    def brand(e: LabeledEmail) -> str:
        return e.sender.rsplit("@", 1)[-1].split(".", 1)[0].capitalize()

    def subject(e: LabeledEmail) -> str:
        return f"[{brand(e)}] {e.subject}" if where == "prefix" else f"{e.subject} | {brand(e)}"

    if where not in ("prefix", "suffix"):
        raise ValueError(f"brand must be prefix or suffix, not {where!r}")
    return _resubjected(emails, subject)


def named(emails: Sequence[LabeledEmail], where: str) -> list[LabeledEmail]:
    """`emails` with the recipient's first name (one per recipient, `FIRST_NAMES`) before
    (``prefix``: ``Ava, your order …``) or after (``suffix``: ``… for Ava``) every template
    email's subject; human emails as they were."""

    def first(e: LabeledEmail) -> str:
        digest = hashlib.blake2b(e.recipient.encode(), digest_size=8).digest()
        return FIRST_NAMES[int.from_bytes(digest, "big") % len(FIRST_NAMES)]

    def subject(e: LabeledEmail) -> str:
        if where == "prefix":
            return f"{first(e)}, {e.subject[:1].lower()}{e.subject[1:]}"
        return f"{e.subject} for {first(e)}"

    if where not in ("prefix", "suffix"):
        raise ValueError(f"names must be prefix or suffix, not {where!r}")
    return _resubjected(emails, subject)


def fingerprinted(emails: Sequence[LabeledEmail]) -> list[Parsed | None]:
    """Each email parsed and keyed once, as the CPU stage does (every replay reuses it)."""
    return fingerprint_batch(
        [EmailIn("", e.sender, "", e.subject, e.html, 0) for e in emails], SchemeParams()
    )


_TABLE_PARTS = frozenset({"html", "body", "table", "tbody", "thead", "tfoot", "tr", "td", "th"})


def table_frame(paths: Sequence[str]) -> list[str]:
    """`schemes.skeleton`'s paths less the containers that hold no table part at any depth
    (``--layout tables``): a table part always counts, any other container only above one."""
    kept: set[str] = set()
    for path in sorted(paths, key=lambda p: -p.count("/")):
        if path.rsplit("/", 1)[1] in _TABLE_PARTS or any(k.startswith(path + "/") for k in kept):
            kept.add(path)
    return sorted(kept)


def relaid(emails: Sequence[LabeledEmail], parsed: Sequence[Parsed | None]) -> list[Parsed | None]:
    """`parsed` with each email's row key the service's (`schemes.row_key`) over its
    `table_frame` layout. The HTML is parsed again: `Parsed` keeps no structure."""
    out: list[Parsed | None] = []
    for e, pr in zip(emails, parsed, strict=True):
        if pr is None:
            out.append(None)
            continue
        frame = table_frame(skeleton(parse_structure(e.html)))
        out.append(pr._replace(keys=(row_key(e.sender, frame),)))
    return out


def form_online(
    emails: Sequence[LabeledEmail],
    parsed: Sequence[Parsed | None],
    p: SchemeParams,
    k: int,
    *,
    keep_rules: bool = False,
) -> dict[bytes, list[TemplateValue]]:
    """Each row's templates after the training emails, formed as the service forms them: at
    k distinct recipients, again at each growth (`rows.GROWTH`, and by k). `keep_rules`
    passes the row's templates before as settled, so field rules re-form only as the
    service's do (`schemes.form_templates`)."""
    rows: dict[bytes, list[ClusterEmail]] = defaultdict(list)
    users: dict[bytes, set[str]] = defaultdict(set)
    formed: dict[bytes, list[TemplateValue]] = {}
    formed_users: dict[bytes, int] = {}
    reads: dict[bytes, dict[str, int]] = {}
    for e, pr in zip(emails, parsed, strict=True):
        if e.held_out or pr is None:
            continue
        key = pr.keys[0]
        rows[key].append(ClusterEmail(e.recipient, e.sender, e.subject, pr.texts, 0))
        users[key].add(e.recipient)
        n, last = len(users[key]), formed_users.get(key, 0)
        if (not last and n >= k) or (last and n >= max(last + k, GROWTH * last)):
            before = formed.get(key, [])
            settled = reads.get(key, {}) if keep_rules else {}
            reads[key] = {}
            formed[key] = form_templates(key, rows[key], k, 0, p, None, before, settled, reads[key])
            formed_users[key] = n
    return formed


def replay(
    emails: Sequence[LabeledEmail], parsed: Sequence[Parsed | None], p: SchemeParams, k: int
) -> dict[str, SourceFigures]:
    """The online service replayed over `emails` (training, then held-out): per source."""
    formed = form_online(emails, parsed, p, k)
    fresh: dict[str, list[tuple[str, str, bool]]] = defaultdict(list)
    for e, pr in zip(emails, parsed, strict=True):
        if not e.held_out or pr is None or e.noise:
            continue
        match, _ = match_template(formed.get(pr.keys[0], []), email_hashes(e.subject, pr.texts), p)
        fresh[e.package].append((e.label, match.template_id if match else "", False))
    out = {}
    for source, got in fresh.items():
        q = pairwise_quality(got)
        labels = {label for label, _, _ in got}
        owner: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for label, tid, _ in got:
            if tid:
                owner[tid][label] += 1
        owned = {max(c, key=lambda x: c[x]) for c in owner.values()}
        out[source] = SourceFigures(
            round(q.precision, 3),
            round(q.recall, 3),
            round(len(owner) / len(labels), 3),
            len(labels - owned),
            len(labels),
        )
    return out


def choose(table: dict[int, dict[str, SourceFigures]], left_out: str) -> int:
    """The grid index whose worst source, the left-out one excluded, is best."""
    return max(
        table,
        key=lambda i: (
            min(f.floor for s, f in table[i].items() if s != left_out),
            -sum(f.unformed for s, f in table[i].items() if s != left_out),
            i == GRID.index(SchemeParams()),
        ),
    )


def main(argv: list[str] | None = None) -> None:
    """Runs every grid point over the corpus, then every fold; prints and writes the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", choices=("name", "real", "sender"), default="sender")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--brand", choices=("prefix", "suffix"))
    parser.add_argument("--names", choices=("prefix", "suffix"))
    parser.add_argument("--layout", choices=("service", "tables"), default="service")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    corpus = build_corpus(real_templates(), subjects=args.subjects)
    if args.brand:
        corpus = branded(corpus, args.brand)
    if args.names:
        corpus = named(corpus, args.names)
    parsed = fingerprinted(corpus)
    if args.layout == "tables":
        parsed = relaid(corpus, parsed)
    table = {i: replay(corpus, parsed, p, args.k) for i, p in enumerate(GRID)}
    default = GRID.index(SchemeParams())
    folds = {}
    for source in sorted(table[default]):
        i = choose(table, source)
        folds[source] = {
            "chosen": {
                "match": GRID[i].match,
                "present": GRID[i].grouping.present,
                "min_own_share": GRID[i].grouping.min_own_share,
                "own_share_cap": GRID[i].grouping.own_share_cap,
                "own_over_shared": GRID[i].grouping.own_over_shared,
            },
            "held_out": vars(table[i][source]),
            "defaults": vars(table[default][source]),
        }
    worst = min(folds, key=lambda s: SourceFigures(**folds[s]["held_out"]).floor)
    report = {
        "subjects": args.subjects,
        "brand": args.brand,
        "names": args.names,
        "layout": args.layout,
        "k": args.k,
        "folds": folds,
        "worst_source": worst,
    }
    for source, fold in folds.items():
        print(f"{source:40s} chosen {fold['chosen']} held out {fold['held_out']}")
    print("worst source:", worst, folds[worst]["held_out"])
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
