"""How well templates were induced: pairwise quality, the held-out protocol, Juicer's batch.

Pure arithmetic on what a run annotated (unit-tested): pairwise precision and recall of
predicted template ids against the true templates, the held-out protocol's figures (which
true templates formed, how many ids one true template got, k-anonymity of every formed
template), and Juicer's weekly MapReduce over a sample, run with the service's own keys
and formation, to compare the online service's recall with.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from loadtest.corpora.synthetic_emails import skeleton
from server.templates.model import ClusterEmail, EmailIn
from server.templates.schemes import SchemeParams, form_templates, match_template
from server.templates.tokens import email_hashes
from server.templates.work import fingerprint_batch

__all__ = [
    "HeldOut",
    "Quality",
    "held_out_quality",
    "juicer_batch",
    "owns",
    "pairwise_quality",
    "per_source",
    "templates_reaching_k",
    "worst_source",
]


@dataclass(frozen=True)
class HeldOut:
    """The held-out protocol's figures for one scheme."""

    precision: float
    recall: float
    true_templates: int
    templates_formed: int
    formed_per_true: float
    ids_per_true: float
    """Distinct template ids among one true template's held-out instances, on average."""
    unformed: list[str]
    """True templates none of whose held-out instances got a template of their own."""
    noise_templated: int
    least_recipients: int
    """Fewest distinct recipients of any formed template (k-anonymity: never below k)."""
    recall_repeated: float
    """Pairwise recall within templates that have repeated blocks."""
    recall_optional: float
    """Pairwise recall within templates that have optional blocks."""


def held_out_quality(
    train: Sequence[tuple[str, str, bool]],
    fresh: Sequence[tuple[str, str, bool]],
    formed: Sequence[tuple[str, int]],
    repeated: set[str],
    optional: set[str],
) -> HeldOut:
    """(label, annotated id or "", is noise) of the training and held-out emails, and the
    (id, distinct recipients) of every formed template -> the protocol's figures.

    A template id is *owned* by the true template most of the training emails annotated
    with it belong to; a true template *formed* when one of its held-out instances got an
    id it owns.
    """
    q = pairwise_quality(fresh)
    votes: dict[str, Counter[str]] = defaultdict(Counter)
    for label, tid, noise in train:
        if tid and not noise:
            votes[tid][label] += 1
    owner = {tid: c.most_common(1)[0][0] for tid, c in votes.items()}
    labels = sorted({label for label, _, noise in fresh if not noise})
    ids: dict[str, set[str]] = defaultdict(set)
    found: set[str] = set()
    for label, tid, noise in fresh:
        if tid and not noise:
            ids[label].add(tid)
            if owner.get(tid) == label:
                found.add(label)

    def recall_within(keep: set[str]) -> float:
        rows = [r for r in fresh if r[0] in keep]
        return round(pairwise_quality(rows).recall, 3) if rows else 0.0

    templated_noise = sum(1 for _, tid, n in [*train, *fresh] if n and tid)
    return HeldOut(
        precision=round(q.precision, 3),
        recall=round(q.recall, 3),
        true_templates=len(labels),
        templates_formed=len(formed),
        formed_per_true=round(len(formed) / len(labels), 3) if labels else 0.0,
        ids_per_true=round(sum(len(ids[x]) for x in labels) / len(labels), 3) if labels else 0.0,
        unformed=[x for x in labels if x not in found],
        noise_templated=templated_noise,
        least_recipients=min((n for _, n in formed), default=0),
        recall_repeated=recall_within(repeated),
        recall_optional=recall_within(optional),
    )


Row = tuple[str, str, bool]
"""(true label, annotated template id or "", is noise) of one email."""


def per_source(
    train: Sequence[Row],
    fresh: Sequence[Row],
    formed: Sequence[tuple[str, int, str]],
    repeated: set[str],
    optional: set[str],
    source_of: dict[str, str],
) -> dict[str, HeldOut]:
    """The held-out figures of each source alone (leave-one-source-out's measure).

    `formed` is (template id, distinct recipients, sender) of every formed template and
    `source_of` maps a true label and a sender to its source; human emails are in every
    source's rows (a source's figures count the human emails it templated: none may be).
    A source's pairs never meet another's (senders differ), so its precision and recall are
    those of its own emails.
    """
    out: dict[str, HeldOut] = {}
    for source in sorted(set(source_of.values())):

        def mine(rows: Sequence[Row], source: str = source) -> list[Row]:
            return [r for r in rows if r[2] or source_of.get(r[0]) == source]

        own = [(tid, n) for tid, n, sender in formed if source_of.get(sender) == source]
        rows = mine(fresh)
        if any(not noise for _, _, noise in rows):
            out[source] = held_out_quality(mine(train), rows, own, repeated, optional)
    return out


def worst_source(figures: dict[str, HeldOut]) -> str:
    """The source whose weaker of precision and recall is lowest (ties: more unformed)."""
    return min(
        figures,
        key=lambda s: (min(figures[s].precision, figures[s].recall), -len(figures[s].unformed)),
    )


@dataclass(frozen=True)
class Quality:
    """Pairwise clustering quality of predicted template ids against ground truth."""

    precision: float
    recall: float
    noise_templated: int
    templates: int


def pairwise_quality(rows: Sequence[tuple[str, str, bool]]) -> Quality:
    """(truth label, predicted id or "", is noise) per email -> pairwise precision/recall.

    A pair is predicted together when both emails got the same non-empty template id, and
    truly together when they share a label; an email with no template pairs with nothing.
    """
    tp = fp = fn = 0
    for (l1, p1, _), (l2, p2, _) in itertools.combinations(rows, 2):
        same_truth = l1 == l2
        same_pred = p1 != "" and p1 == p2
        tp += same_truth and same_pred
        fp += same_pred and not same_truth
        fn += same_truth and not same_pred
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    noise = sum(1 for _, p, n in rows if n and p)
    return Quality(precision, recall, noise, len({p for _, p, _ in rows if p}))


def juicer_batch(
    emails: Sequence[tuple[int, str, str, str, str]],
    *,
    rate: float,
    k: int,
    params: SchemeParams,
    seed: int = 11,
) -> tuple[int, int]:
    """Juicer's weekly MapReduce over a `rate` sample: (sampled emails, templates found).

    `emails` are (template, sender, recipient, subject, html). The sample is clustered with
    the same keys and formation as the online service, with `k` scaled for the sample; a
    ground-truth template counts as found when one of its sampled emails matches a formed
    template that `owns` it.
    """
    rng = random.Random(seed)
    sample = [e for e in emails if rng.random() < rate]
    parsed = fingerprint_batch([EmailIn("", s, "", "", h, 0) for _, s, _, _, h in sample], params)
    rows: dict[bytes, list[ClusterEmail]] = defaultdict(list)
    for (_, sender, recipient, subject, _), p in zip(sample, parsed, strict=True):
        if p is not None:
            for key in p.keys:
                rows[key].append(ClusterEmail(recipient, sender, subject, p.texts, 0))
    formed = {key: form_templates(key, row, k, 0, params) for key, row in rows.items()}
    found: set[int] = set()
    for (template, _, _, subject, _), p in zip(sample, parsed, strict=True):
        if p is None:
            continue
        toks = email_hashes(subject, p.texts)
        for key in p.keys:
            match, _ = match_template(formed.get(key, []), toks, params)
            if match is not None and owns(match.fixed_text, template):
                found.add(template)
                break
    return len(sample), len(found)


def owns(fixed_text: Sequence[str], template: int) -> bool:
    """Whether a template's fixed text is `template`'s own (holds one of its phrases).

    A template formed from several rare templates' emails that share a vendor's layout
    (their own text not yet k-anonymous) annotates their probes too, but with the layout's
    text only: that is not finding *this* template.
    """
    _, _, blocks = skeleton(template)
    fixed = set(fixed_text)
    return any(phrase in fixed for _, phrase, _ in blocks)


def templates_reaching_k(emails: Sequence[tuple[int, str]], k: int) -> int:
    """Ground-truth templates whose emails reached k distinct recipients."""
    users: dict[int, set[str]] = defaultdict(set)
    for template, recipient in emails:
        users[template].add(recipient)
    return sum(1 for u in users.values() if len(u) >= k)
