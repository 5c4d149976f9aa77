"""TemplateInduction's settings: Crusher's k, S, A and TTL, the scheme, the SEDA stages.

Loaded with every other setting by `server.config` (``[templates]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["TemplatesSettings"]


@dataclass(frozen=True, slots=True)
class TemplatesSettings:
    """TemplateInduction: Crusher's k, S, A and TTL, the clustering scheme, the SEDA stages."""

    k_anonymity: int = 5
    """k: distinct recipients a cluster needs before a template forms (Crusher: 1,000)."""
    max_emails: int = 200
    """S: emails stored per cluster row; a row with a template and S emails is full."""
    reinduce_after_s: float = 3600.0
    """A: a template this old is re-formed from the row's current emails."""
    email_ttl_s: float = 7 * 24 * 3600.0
    """Stored emails and recipients expire this long after their write."""
    reform_interval_s: float = 1.0
    """Least time between two re-formations of one row (first formations are immediate)."""
    full_cache_size: int = 100_000
    """Rows in the full-template cache (LRU); emails of a full row are ignored."""
    full_cache_ttl_s: float = 600.0
    """How long a row stays in the full-template cache (then re-checked)."""
    template_cache_size: int = 100_000
    """Rows whose templates AnnotateEmail keeps in memory (LRU)."""
    template_cache_ttl_s: float = 60.0
    """How long a cached row's templates are trusted (other replicas' formations)."""
    absent_cache_ttl_s: float = 1.0
    """How long "this row has no template" is trusted."""
    scheme: Literal["loom", "paper"] = "loom"
    """Clustering scheme: Loom's (sender + layout skeleton, text each template owns) or the
    paper's (three MinHash rows)."""
    match_threshold: float = 0.8
    """Loom: share of a template's signature an email must contain to be annotated with it."""
    text_present: float = 0.9
    """Loom: a token is in a group when at least this share of its emails has it."""
    text_absent: float = 0.1
    """Loom: a token belongs to one side of a split when at most this share of its emails
    are on the other side."""
    own_text_min: int = 2
    """Loom: least tokens of text of its own each side of a split needs."""
    own_text_share: float = 0.1
    """Loom: least own text of each side, as a share of the text both sides share (so a
    one-word alternative within a template never splits it)."""
    own_text_share_cap: int = 8
    """Loom: most tokens `own_text_share` may ask for (0: no cap), so two templates that
    share a long text and differ by a sentence each still split."""
    own_over_shared: float = 2.0
    """Loom: a group whose own text is at least this many times the text it shares with
    the rest of its row splits from a rest that owns none (a sibling whose text is all
    values); 0 turns this rule off."""
    cut_across_ratio: float = 2.0
    """Loom: of two candidate groups that cross, one that this many times as much text cuts
    across waits for the other (a block several templates share in some of their emails,
    not a template); 0 turns this rule off, else at least 1 (the default, 2, is the value
    chosen leaving one source out; docs/benchmarks.md says what it gains and costs)."""
    cpu_workers: int = 2
    """Processes of the CPU stage (parse, XPaths, MinHash; template formation)."""
    cpu_queue: int = 1000
    """Emails waiting for the CPU stage; beyond that SubmitEmails drops (and counts). Sized
    in time: about a quarter of a second of this machine's throughput (~4,000 emails/s), so
    queueing never delays a template by more than that (a longer queue only converts
    overload into template delay)."""
    cpu_batch: int = 256
    """Most emails handed to a worker process at once: a hand-off costs the event loop, the
    pool's threads and a pipe round trip, and its results reach the store as one group
    commit (SQLite writes each page a transaction touches once), so a process call carries
    many emails (docs/benchmarks.md, TemplateInduction throughput). A batch is whatever is
    queued up to this, so a lone email is not held back."""
    io_concurrency: int = 32
    """I/O stage tasks storing emails and fetching s, t, n concurrently."""
    io_queue: int = 2000
    """Fingerprinted emails waiting for the I/O stage; beyond that dropped (and counted)."""
    io_batch: int = 64
    """Emails one I/O task stores in one store call."""
    formation_workers: int = 4
    """Template formations running at once: each holds a CPU process only while its UDCAs
    run, so several overlap their store reads and writes (on Bigtable 4 instead of 1 cut
    the template delay's p50 from 51 s to 1.5 s under a 200 emails/s stream)."""
    formation_queue: int = 1000
    """Rows waiting for formation; beyond that a formation is dropped (retried later)."""
    max_body_bytes: int = 1024 * 1024
    """Largest html_body accepted (UTF-8 bytes); larger is INVALID_ARGUMENT."""
    max_batch: int = 1000
    """Emails per SubmitEmails call."""
    recipient_hash_key: str = "loom-templates"
    """Key of the BLAKE2b hash that stands for recipient ids in storage (set per deployment)."""

    def __post_init__(self) -> None:
        for name, low, high in _BOUNDS:
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(f"templates.{name} = {value!r}: must be in [{low}, {high}]")
        if 0 < self.cut_across_ratio < 1:  # below 1 both of two crossing groups would wait
            raise ValueError(
                f"templates.cut_across_ratio = {self.cut_across_ratio!r}: must be 0 or >= 1"
            )


_MANY = float("inf")
_BOUNDS: tuple[tuple[str, float, float], ...] = (
    ("k_anonymity", 2, _MANY),  # k = 1 forms a template from one recipient's email
    ("max_emails", 1, _MANY),
    ("reinduce_after_s", 0, _MANY),
    ("email_ttl_s", 1, _MANY),
    ("reform_interval_s", 0, _MANY),
    ("full_cache_size", 1, _MANY),
    ("full_cache_ttl_s", 0, _MANY),
    ("template_cache_size", 1, _MANY),
    ("template_cache_ttl_s", 0, _MANY),
    ("absent_cache_ttl_s", 0, _MANY),
    ("match_threshold", 0.01, 1),
    ("text_present", 0.5, 1),
    ("text_absent", 0, 0.5),
    ("own_text_min", 1, _MANY),
    ("own_text_share", 0, 1),
    ("own_text_share_cap", 0, _MANY),
    ("own_over_shared", 0, _MANY),
    ("cut_across_ratio", 0, _MANY),
    ("cpu_workers", 1, 256),
    ("cpu_queue", 1, _MANY),
    ("cpu_batch", 1, _MANY),
    ("io_concurrency", 1, _MANY),
    ("io_queue", 1, _MANY),
    ("io_batch", 1, _MANY),
    ("formation_workers", 1, _MANY),
    ("formation_queue", 1, _MANY),
    ("max_body_bytes", 1, _MANY),
    ("max_batch", 1, _MANY),
)
"""Each numeric setting's range: a value outside it stops start-up naming the setting (a
zero k or a share above one would form templates no rule of the service allows)."""
