"""The two clustering schemes: the paper's, kept as the baseline, and Loom's.

**paper** (Crusher §2.1, exactly): the cluster keys are the email's three MinHash values
over its indexed XPath set; every email is stored under all three; a row with >= k
distinct recipients forms one template whose id is its MinHash; an email is annotated with
the first of its three values that has a template. Measured on real vendor templates it
merges every template of a vendor that reuses one layout, and any two senders' emails with
the same skeleton (e.g. one-off human mail from one webmail client) share rows (docs/benchmarks.md).

**loom** keeps the paper's machinery (a row per cluster key, Algorithm 2, formation the
moment a row has k distinct recipients) and changes what a row and a template are:

1. **One row per email**, keyed by (sender, layout skeleton): a hash of the email's
   index-free paths made only of container elements (``table``, ``tr``, ``td``, ``div``…)
   down to `LAYOUT_DEPTH`. Content elements (``p``, ``a``, ``img``, ``li``…) and deeper
   containers are left out, so an optional section, a repeated line item or a conditional
   link never moves an email to another row; the sender keeps senders apart (one-off human mail never pools across
   people). One row, not the paper's three: a template forms once, not once per key.
2. A row may hold several templates of one layout. Formation divides the row's emails by
   the k-anonymous text each template owns (`server/templates/grouping.py`): word
   shingles of text nodes and subject (`server/templates/tokens.py`), each counted only
   once >= k distinct recipients of the row saw it. Each part with >= k recipients is a
   template, identified by the row and its *signature*: the tokens nearly all its emails
   have. A re-formed template keeps the id of the template it continues.
3. Annotation picks, among the row's templates, the one whose signature the email contains
   best (containment >= `match`).

Keys and formation run in the CPU stage's processes; `match_template` on the event loop.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import mmh3

from server.templates.extraction import MAX_FORM_EMAILS
from server.templates.fingerprint import Structure
from server.templates.grouping import GroupingParams, group_emails
from server.templates.model import ClusterEmail, FieldRuleValue, TemplateValue
from server.templates.tokens import signature_hashes, tokens_of
from server.templates.udcas import Cluster, date_format, field_rules, fixed_text, vertical

__all__ = [
    "CONTAINERS",
    "SchemeParams",
    "form_templates",
    "keys_for",
    "match_template",
    "row_key",
    "skeleton",
]

CONTAINERS = frozenset(
    {
        "html", "body", "table", "tbody", "thead", "tfoot", "tr", "td", "th", "div",
        "center", "section", "article", "main", "header", "footer", "aside", "nav",
    }
)  # fmt: skip
"""The elements a layout is made of; every other element is content."""
LAYOUT_DEPTH = 10
"""How deep the layout frame goes: ``html/body`` and two nested tables (table, tbody, tr,
td each). Deeper containers are content blocks (an optional section's own table, a
newsletter card's grid), which must not move an email to another row."""
SIGNATURE_SLACK = 20
"""A template's signature is the text all its emails have, but one in every this many may
lack a token (a misparsed or stray email must not erase it); an optional block (in ~80 %
of instances) stays out."""
BUSY_RULES_EMAILS = 10
"""While emails wait for the CPU stage (`form_templates`' `defer_rules`), field rules that
must form read at most this many emails, or 2k (`busy_sample`): a first formation then
costs the CPU stage a third less, and its rules re-form from a full sample on an idle stage."""
KEEP_ID = 0.5
"""A re-formed template keeps a previous template's id when they share at least this share
of the smaller signature (the same template, grown or trimmed by new emails)."""


@dataclass(frozen=True, slots=True)
class SchemeParams:
    """A scheme and its knobs (picklable: it travels to the worker processes)."""

    scheme: str = "loom"
    """``loom`` or ``paper``."""
    match: float = 0.8
    """Loom: least containment of a template's signature for an email to match it."""
    grouping: GroupingParams = field(default_factory=GroupingParams)
    """Loom: the split rules that divide a row into templates."""


def _sender_prefix(sender: str) -> bytes:
    return hashlib.blake2b(sender.strip().lower().encode(), digest_size=8).digest()


def skeleton(structure: Structure) -> list[str]:
    """The email's layout: its index-free paths made only of `CONTAINERS`, at most
    `LAYOUT_DEPTH` elements deep, sorted."""
    return sorted(
        path
        for path in structure.plain_paths
        if path.count("/") <= LAYOUT_DEPTH and all(t in CONTAINERS for t in path[1:].split("/"))
    )


def row_key(sender: str, layout: Sequence[str]) -> bytes:
    """Loom's row key of `sender`'s emails in `layout` (sorted paths, `skeleton`'s)."""
    digest = mmh3.hash64("\n".join(layout).encode(), 0, signed=False)[0]
    return _sender_prefix(sender) + b"\x00" + digest.to_bytes(8, "big")


def keys_for(
    sender: str, structure: Structure, fingerprints: Sequence[int], p: SchemeParams
) -> tuple[bytes, ...]:
    """The email's cluster row keys in annotation priority order."""
    if p.scheme == "paper":
        return tuple(v.to_bytes(8, "big") for v in fingerprints)
    return (row_key(sender, skeleton(structure)),)


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
    rules: tuple[FieldRuleValue, ...] | None = None,
    rules_from: int = MAX_FORM_EMAILS,
) -> TemplateValue:
    cluster = Cluster(emails, k)
    if rules is None:
        rules = field_rules(cluster, rules_from)
    senders = {e.sender for e in emails}
    sender = max(senders, key=lambda s: (sum(e.sender == s for e in emails), s))
    return TemplateValue(
        template_id=template_id,
        sender=sender,
        fingerprints=(int.from_bytes(key[-8:], "big"),),
        distinct_recipients=_recipients(emails),
        email_count=len(emails),
        vertical=vertical(cluster, rules),
        fixed_text=fixed_text(cluster),
        date_format=date_format(cluster),
        field_rules=rules,
        created_at_ms=now_ms,
        scheme=p.scheme,
        signature=signature,
    )


def _kept_rules(
    settled: TemplateValue | None,
    read: int,
    signature: tuple[str, ...],
    emails: int,
    *,
    defer: bool = False,
) -> tuple[FieldRuleValue, ...] | None:
    """A settled template's rules when the template continues with the same signature and
    they were read from (`read` emails) more than half of the sample they would be read
    from now, or whatever their sample when re-forming them is deferred."""
    if settled is None or settled.signature != signature:
        return None
    keep = defer or 2 * read > min(emails, MAX_FORM_EMAILS)
    return settled.field_rules if keep else None


def _core(sigs: Sequence[frozenset[str]], share: float) -> frozenset[str]:
    """Tokens present in at least `share` of `sigs`."""
    counts: dict[str, int] = {}
    for sig in sigs:
        for tok in sig:
            counts[tok] = counts.get(tok, 0) + 1
    return frozenset(t for t, c in counts.items() if c >= share * len(sigs))


def _ids(
    key: bytes, signatures: list[tuple[str, ...]], previous: Sequence[TemplateValue]
) -> list[str]:
    """Each new signature's template id: a previous template's it continues, else a new one.

    Greedy by overlap, each previous id used once, so a re-formation that grew or trimmed a
    template's signature (optional blocks settling, more emails) keeps the id callers hold.
    """
    pairs = []
    for i, sig in enumerate(signatures):
        new = set(sig)
        for j, old in enumerate(previous):
            shared = len(new & set(old.signature))
            if shared and shared >= KEEP_ID * min(len(new), len(old.signature)):
                pairs.append((shared, i, j))
    ids: list[str | None] = [None] * len(signatures)
    used: set[str] = set()  # by id: a row stored with a repeated id heals here
    for _, i, j in sorted(pairs, reverse=True):
        if ids[i] is None and previous[j].template_id not in used:
            ids[i] = previous[j].template_id
            used.add(previous[j].template_id)
    # A new id is the signature's hash, unless another template of the row holds it: a
    # signature may equal one an earlier formation gave an id that has since moved on to
    # the template continuing it (two templates of a row never share an id).
    taken = {i for i in ids if i is not None}
    out = []
    for i, sig in enumerate(signatures):
        found = ids[i]
        salt = 0
        while found is None or (ids[i] is None and found in taken):
            digest = mmh3.hash64("\x00".join(sig).encode(), salt, signed=False)[0]
            found = f"{key.hex()}-{digest:016x}"
            salt += 1
        taken.add(found)
        out.append(found)
    return out


_NONE_SETTLED: Mapping[str, int] = {}


def busy_sample(k: int) -> int:
    """The emails field rules are read from at most while the CPU stage is busy."""
    return max(BUSY_RULES_EMAILS, 2 * k)


def form_templates(  # noqa: PLR0917 - FormTemplate(h)'s inputs, then out-parameters
    key: bytes,
    emails: Sequence[ClusterEmail],
    k: int,
    now_ms: int,
    p: SchemeParams,
    left_out: list[int] | None = None,
    previous: Sequence[TemplateValue] = (),
    settled: Mapping[str, int] = _NONE_SETTLED,
    read: dict[str, int] | None = None,
    *,
    defer_rules: bool = False,
) -> list[TemplateValue]:
    """FormTemplate(h): the templates of one cluster row (none below k recipients).

    `left_out`, when given, receives the indexes of emails in no template (parts still
    below k): a row with such emails may hold a template that has yet to form. `previous`
    are the row's templates before this formation (their ids carry over).

    `settled` names those of `previous` whose field rules this code formed, each with the
    count of emails its rules were read from: a template that continues one of them with
    the same signature keeps its rules when they were read from more than half of the
    sample they would be read from now (`MAX_FORM_EMAILS` emails at most). `read`, when
    given, receives each formed template's count (the kept rules' own, or the sample its
    rules were read from now): the next formation's `settled`, since a template's
    `email_count` says how many emails it held, not how many its kept rules were read from.
    `defer_rules` keeps every settled template's rules whatever their sample (the formation
    stage passes it while emails are queued for the CPU stage): their count stays theirs,
    so a later formation re-forms them. Rules that must form then (a new template, changed
    signature) read at most `busy_sample(k)` emails, and when that is fewer than they would
    read on an idle stage their count is 0: the next formation without `defer_rules` re-forms
    them whatever the row's size (the formation stage schedules it once the stage is idle).
    So a growing template's rules re-form each time their sample doubles, not at every
    growth of its row, and never again once read from over half a full sample: field rules
    cost most of a re-formation's CPU, and another sample of the same template, at most
    twice the size, seldom changes them.
    """
    left_out = [] if left_out is None else left_out
    if _recipients(emails) < k:
        left_out.extend(range(len(emails)))
        return []
    if p.scheme == "paper":
        return [_template(key.hex(), key, emails, k, now_ms, p, ())]
    tokens = [tokens_of(e.subject, e.texts) for e in emails]
    by_user: dict[str, set[str]] = {}
    for email, toks in zip(emails, tokens, strict=True):
        by_user.setdefault(email.user, set()).update(toks)
    recipients: Counter[str] = Counter()
    for toks in by_user.values():
        recipients.update(toks)
    anonymous = {tok for tok, n in recipients.items() if n >= k}
    sigs = [frozenset(t & anonymous) for t in tokens]
    groups: list[list[int]] = []
    signatures: list[tuple[str, ...]] = []
    for group in group_emails(sigs, [e.user for e in emails], k, p.grouping):
        if _recipients([emails[i] for i in group]) < k:
            left_out.extend(group)
            continue
        share = 1.0 - (len(group) // SIGNATURE_SLACK) / len(group)
        signature = tuple(sorted(_core([sigs[i] for i in group], share)))
        if not signature:  # nothing k-anonymous in common: nothing to annotate with
            left_out.extend(group)
            continue
        groups.append(group)
        signatures.append(signature)
    ids = _ids(key, signatures, [t for t in previous if t.signature])
    kept = {t.template_id: t for t in previous if t.template_id in settled}
    limit = busy_sample(k) if defer_rules else MAX_FORM_EMAILS
    out = []
    for template_id, group, signature in zip(ids, groups, signatures, strict=True):
        rules = _kept_rules(
            kept.get(template_id),
            settled.get(template_id, 0),
            signature,
            len(group),
            defer=defer_rules,
        )
        members = [emails[i] for i in group]
        out.append(_template(template_id, key, members, k, now_ms, p, signature, rules, limit))
        if read is not None:
            full = min(len(group), MAX_FORM_EMAILS)
            fresh = full if limit >= full else 0  # 0: read from a busy stage's short sample
            read[template_id] = fresh if rules is None else settled[template_id]
    out.sort(key=lambda t: (-len(t.signature), t.template_id))
    return out


def match_template(
    templates: Sequence[TemplateValue], tokens: AbstractSet[int], p: SchemeParams
) -> tuple[TemplateValue | None, float]:
    """The template of one row that the email (its token hashes) belongs to, and how well.

    The score is the share of the template's signature the email contains (1.0 for a
    paper-scheme row, which holds one template). None when no template reaches `p.match`.
    Among the templates that reach it, the one whose *own* tokens (its signature less every
    other template's of the row) the email holds most of wins, then the one with the most
    of its signature in the email. A sibling sharing the row's layout may reach the
    threshold on the layout alone (its own sentences are a fifth of its signature), and a
    template of the shared layout alone (no own tokens) holds all of its few tokens in every
    email of the row; the email's own template holds its own sentences.
    """
    if not templates:
        return None, 0.0
    if p.scheme == "paper":
        return templates[0], 1.0
    best: TemplateValue | None = None
    best_rank = (0.0, 0, 0.0)
    top = 0.0
    own = _own_hashes(templates)
    for t, mine in zip(templates, own, strict=True):
        size = len(t.signature)
        if not size:  # no k-anonymous text to recognise it by
            continue
        found = len(signature_hashes(t.signature) & tokens)
        score = found / size
        top = max(top, score)
        if score < p.match:
            continue
        rank = (len(mine & tokens) / len(mine) if mine else 0.0, found, score)
        if rank > best_rank:
            best, best_rank = t, rank
    if best is None:
        return None, top
    return best, best_rank[2]


_OWN: dict[tuple[tuple[str, int], ...], list[frozenset[int]]] = {}
_OWN_CACHE = 4096


def _own_hashes(templates: Sequence[TemplateValue]) -> list[frozenset[int]]:
    """Each template's own tokens: its signature less every other template's of the row.

    Cached per row formation (ids and formation times), so annotation pays for it once.
    """
    key = tuple((t.template_id, t.created_at_ms) for t in templates)
    found = _OWN.get(key)
    if found is None:
        sigs = [signature_hashes(t.signature) for t in templates]
        found = []
        for i, sig in enumerate(sigs):
            others = frozenset().union(*(x for j, x in enumerate(sigs) if j != i))
            found.append(sig - others)
        if len(_OWN) >= _OWN_CACHE:
            _OWN.clear()
        _OWN[key] = found
    return found
