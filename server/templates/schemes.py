"""The two clustering schemes: the paper's, kept as the baseline, and Loom's.

**paper** (Crusher §2.1, exactly): the cluster keys are the email's three MinHash values
over its indexed XPath set; every email is stored under all three; a row with >= k
distinct recipients forms one template whose id is its MinHash; an email is annotated with
the first of its three values that has a template. Measured on real vendor templates this
merges every template of a vendor that reuses one layout (pairwise precision 0.09 before
Loom was built; see the README's quality figure), and any two senders' emails with the
same skeleton (e.g. one-off human mail from one webmail client) share rows.

**loom** keeps the paper's machinery (rows keyed by a MinHash, Algorithm 2, formation the
moment a row has k distinct recipients) and changes what a row and a template are:

1. The key is (sender, LSH band): a MinHash of the *index-free* path set (2 or 9 line items
   look alike), AND-amplified over `rows` values per band, OR over `bands` bands. The
   sender in the key keeps senders apart (one-off human mail never pools across people).
2. A row may still hold several templates of one layout. Formation splits it by the
   cluster's **k-anonymous fixed text**: a text (or the subject) counts only once it was
   seen by >= k distinct recipients in the row, so no value seen by fewer than k
   recipients ever influences a template. An email joins the group whose core text (the
   k-anonymous text most of its emails have) it contains (>= `similarity`) and which
   explains enough of the email's own k-anonymous text (>= `coverage`); each group with
   >= k distinct recipients is a template, identified by the row and its *signature*
   (its core). A row is re-formed as it grows, so a rarer template splits out once its
   own text has become k-anonymous.
3. Annotation picks, among its rows' templates in band order, the template whose signature
   the email contains best (containment >= `match`).

Keys and formation run in the CPU stage's processes; `match` runs on the event loop.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import mmh3

from server.templates.fingerprint import Structure, minhash
from server.templates.model import ClusterEmail, TemplateValue
from server.templates.udcas import Cluster, date_format, field_rules, fixed_text, vertical

__all__ = [
    "LOOM_SEED_BASE",
    "SUBJECT_PREFIX",
    "SchemeParams",
    "form_templates",
    "keys_for",
    "match_template",
    "tokens_of",
]

LOOM_SEED_BASE = 0x4C4F4F4D
"""Loom's band seeds are LOOM_SEED_BASE + i ("LOOM" in ASCII), i = 0 .. bands*rows-1."""
SUBJECT_PREFIX = "\x01subject:"


@dataclass(frozen=True, slots=True)
class SchemeParams:
    """A scheme and its knobs (picklable: it travels to the worker processes)."""

    scheme: str = "loom"
    """``loom`` or ``paper``."""
    bands: int = 2
    """Loom: LSH bands (an email is stored in one row per band)."""
    rows: int = 4
    """Loom: MinHash values AND-ed within one band."""
    similarity: float = 0.6
    """Loom: least share of a group's core text an email must contain to join it."""
    match: float = 0.8
    """Loom: least containment of a template's signature for an email to match it."""
    coverage: float = 0.5
    """Loom: least share of an email's k-anonymous text its group's core must explain."""


def _sender_prefix(sender: str) -> bytes:
    return hashlib.blake2b(sender.strip().lower().encode(), digest_size=8).digest()


def keys_for(
    sender: str, structure: Structure, fingerprints: Sequence[int], p: SchemeParams
) -> tuple[bytes, ...]:
    """The email's cluster row keys in annotation priority order."""
    if p.scheme == "paper":
        return tuple(v.to_bytes(8, "big") for v in fingerprints)
    seeds = tuple(LOOM_SEED_BASE + i for i in range(p.bands * p.rows))
    values = minhash(structure.plain_paths, seeds)
    prefix = _sender_prefix(sender)
    keys = []
    for band in range(p.bands):
        chunk = b"".join(v.to_bytes(8, "big") for v in values[band * p.rows : (band + 1) * p.rows])
        band_hash = mmh3.hash64(chunk, band, signed=False)[0]
        keys.append(prefix + bytes((band,)) + band_hash.to_bytes(8, "big"))
    return tuple(keys)


def tokens_of(subject: str, texts: Sequence[tuple[str, str]]) -> set[str]:
    """The text tokens Loom clusters on: every text node, and the subject."""
    found = {t for _, t in texts}
    if subject:
        found.add(SUBJECT_PREFIX + subject)
    return found


def _recipients(emails: Sequence[ClusterEmail]) -> int:
    return len({e.user for e in emails})


def _template(  # noqa: PLR0917 - a private assembler of one value
    template_id: str,
    key: bytes,
    emails: Sequence[ClusterEmail],
    k: int,
    now_ms: int,
    p: SchemeParams,
    signature: tuple[str, ...],
) -> TemplateValue:
    cluster = Cluster(emails, k)
    senders = {e.sender for e in emails}
    sender = max(senders, key=lambda s: (sum(e.sender == s for e in emails), s))
    return TemplateValue(
        template_id=template_id,
        sender=sender,
        fingerprints=(int.from_bytes(key[-8:], "big"),),
        distinct_recipients=_recipients(emails),
        email_count=len(emails),
        vertical=vertical(cluster),
        fixed_text=fixed_text(cluster),
        date_format=date_format(cluster),
        field_rules=field_rules(cluster),
        created_at_ms=now_ms,
        scheme=p.scheme,
        signature=signature,
    )


def _core(sigs: Sequence[frozenset[str]], share: float) -> frozenset[str]:
    """Tokens present in at least `share` of `sigs`."""
    counts: dict[str, int] = {}
    for sig in sigs:
        for tok in sig:
            counts[tok] = counts.get(tok, 0) + 1
    return frozenset(t for t, c in counts.items() if c >= share * len(sigs))


def _containment(core: frozenset[str], sig: frozenset[str]) -> float:
    return len(core & sig) / len(core) if core else (1.0 if not sig else 0.0)


def _joins(core: frozenset[str], sig: frozenset[str], similarity: float, coverage: float) -> float:
    """How well `sig` fits a group of `core` (0 when it does not fit at all).

    It must contain at least `similarity` of the core (optional blocks only add text), and
    the core must be at least `coverage` of it: otherwise a group whose core is only the
    vendor's layout text would swallow every template of that layout.
    """
    contained = _containment(core, sig)
    if contained < similarity:
        return 0.0
    if sig and len(core & sig) < coverage * len(sig):
        return 0.0
    return contained


def _core_groups(sigs: list[frozenset[str]], similarity: float, coverage: float) -> list[list[int]]:
    """Indexes of `sigs` grouped by the core text they contain.

    A group's core is the k-anonymous text present in most of its emails; an email joins
    the group whose core it contains best (at least `similarity` of it), else starts one.
    Smaller sets go first, so a core is the text a template always has, and optional
    blocks (extra text) still contain it; two templates sharing a layout differ in their
    own text, so neither's core is contained in the other's emails. Two passes: the second
    re-assigns every email against the cores the first one found.
    """
    distinct: dict[frozenset[str], list[int]] = {}
    for i, sig in enumerate(sigs):
        distinct.setdefault(sig, []).append(i)
    order = sorted(distinct, key=lambda s: (len(s), -len(distinct[s]), sorted(s)))
    cores: list[frozenset[str]] = []
    members: list[list[frozenset[str]]] = []
    for sig in order:
        scored = [(_joins(c, sig, similarity, coverage), len(c), g) for g, c in enumerate(cores)]
        best = max(scored, default=(0.0, 0, -1))
        if best[2] >= 0 and best[0] > 0:
            members[best[2]].append(sig)
        else:
            cores.append(sig)
            members.append([sig])
    cores = [_core([s for s in m for _ in distinct[s]], 0.8) or m[0] for m in members]
    groups: dict[int, list[int]] = {}
    for sig in order:
        scored = [(_joins(c, sig, similarity, coverage), len(c), g) for g, c in enumerate(cores)]
        fit, _, best_group = max(scored)
        if fit == 0.0:  # fits no core of the first pass: its own first-pass group
            best_group = next(g for g, m in enumerate(members) if sig in m)
        groups.setdefault(best_group, []).extend(distinct[sig])
    return list(groups.values())


def form_templates(  # noqa: PLR0917 - FormTemplate(h)'s inputs, then an out-parameter
    key: bytes,
    emails: Sequence[ClusterEmail],
    k: int,
    now_ms: int,
    p: SchemeParams,
    left_out: list[int] | None = None,
) -> list[TemplateValue]:
    """FormTemplate(h): the templates of one cluster row (none below k recipients).

    `left_out`, when given, receives the indexes of emails in no template (groups still
    below k): a row with such emails may hold a template that has yet to form.
    """
    left_out = [] if left_out is None else left_out
    if _recipients(emails) < k:
        left_out.extend(range(len(emails)))
        return []
    if p.scheme == "paper":
        return [_template(key.hex(), key, emails, k, now_ms, p, ())]
    tokens = [tokens_of(e.subject, e.texts) for e in emails]
    seen_by: dict[str, set[str]] = {}
    for email, toks in zip(emails, tokens, strict=True):
        for tok in toks:
            seen_by.setdefault(tok, set()).add(email.user)
    anonymous = {tok for tok, users in seen_by.items() if len(users) >= k}
    sigs = [frozenset(t & anonymous) for t in tokens]
    out: list[TemplateValue] = []
    for group in _core_groups(sigs, p.similarity, p.coverage):
        members = [emails[i] for i in group]
        if _recipients(members) < k:
            left_out.extend(group)
            continue
        signature = tuple(sorted(_core([sigs[i] for i in group], 0.8)))
        digest = mmh3.hash64("\x00".join(signature).encode(), 0, signed=False)[0]
        out.append(_template(f"{key.hex()}-{digest:016x}", key, members, k, now_ms, p, signature))
    out.sort(key=lambda t: (-len(t.signature), t.template_id))
    return out


def match_template(
    templates: Sequence[TemplateValue], tokens: set[str], p: SchemeParams
) -> tuple[TemplateValue | None, float]:
    """The template of one row that the email (its text tokens) belongs to, and how well.

    The score is the share of the template's signature the email contains (1.0 for a
    paper-scheme row, which holds one template). None when no template reaches `p.match`.
    """
    if not templates:
        return None, 0.0
    if p.scheme == "paper":
        return templates[0], 1.0
    best: TemplateValue | None = None
    best_rank = (0.0, 0)
    for t in templates:
        basis = t.signature or t.fixed_text
        score = sum(1 for x in basis if x in tokens) / len(basis) if basis else 1.0
        if (score, len(basis)) > best_rank:
            best, best_rank = t, (score, len(basis))
    best_score = best_rank[0]
    if best is None or best_score < p.match:
        return None, best_score
    return best, best_score
