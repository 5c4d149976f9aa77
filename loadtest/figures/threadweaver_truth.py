"""What the ThreadWeaver workload checks the server's answers against: the union-find truth.

Pure (unit-tested): the stats every component of the ground truth must report, and how many
threads a ResolveThreads partition puts in the wrong group. Any non-zero mismatch figure
fails the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loadtest.corpora.threadweaver import GroundTruth, ThreadKey, WovenMessage

__all__ = ["ExpectedStats", "expected_stats", "partition_mismatches"]


@dataclass(frozen=True, slots=True)
class ExpectedStats:
    """What ``UnifiedThreadStats`` must say for a component of the ground truth."""

    message_count: int
    last_message_at_ms: int


def expected_stats(
    messages: Sequence[WovenMessage], truth: GroundTruth
) -> dict[frozenset[ThreadKey], ExpectedStats]:
    """Distinct Message-IDs and latest ``sent_at`` of every component (whoever holds them).

    Every copy of a Message-ID carries the same ``sent_at`` in the corpus, and the first
    writer of the Message-ID wins, so the expected last time is simply the maximum.
    """
    rfcs: dict[frozenset[ThreadKey], set[str]] = {}
    last: dict[frozenset[ThreadKey], int] = {}
    component_of: dict[ThreadKey, frozenset[ThreadKey]] = {}
    for m in messages:
        key = (m.gid, m.thread_id)
        comp = component_of.get(key)
        if comp is None:
            comp = component_of[key] = truth.component(m.gid, m.thread_id)
        rfcs.setdefault(comp, set()).add(m.rfc_message_id)
        last[comp] = max(last.get(comp, m.sent_at_ms), m.sent_at_ms)
    return {c: ExpectedStats(len(ids), last[c]) for c, ids in rfcs.items()}


def partition_mismatches(resolved: Mapping[ThreadKey, str | None], truth: GroundTruth) -> int:
    """Threads whose group of same-unified-id threads differs from their true component.

    The server's unified ids are opaque; what must hold is that two threads share an id
    exactly when the union-find puts them together. Compared only over ``resolved``'s
    threads, so pass every thread of the corpus for a full check. Unresolved (None) counts.
    """
    groups: dict[str, set[ThreadKey]] = {}
    bad = 0
    for key, ut in resolved.items():
        if ut is None:
            bad += 1
        else:
            groups.setdefault(ut, set()).add(key)
    asked = set(resolved)
    for members in groups.values():
        for key in members:
            if truth.component(*key) & asked != members:
                bad += 1
    return bad
