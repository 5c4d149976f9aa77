"""A synthetic mail corpus with the Gmail quirks that made Streak's BFS unification slow.

The Streak write-up names two quirks that multiply the threads one conversation touches:

* **Multi-centi-threads.** Gmail starts a new thread after 100 messages. A long discussion
  delivered to 20 people becomes ~20 threads *per person*, and because each person joined
  (or had their thread counter started) at a different point, person A's split points
  differ from person B's. A's thread 3 and A's thread 4 share no message, but B's thread
  straddling A's boundary shares one with each — so every centi-thread of every participant
  chains into ONE unified thread, and a breadth-first search must walk that whole chain.
* **Same-subject automated mail.** Gmail threads same-subject messages sent within a few
  days even when unrelated; notifications to overlapping recipients chain into large
  components.

Plus ordinary short threads for realistic background. Everything is deterministic from
``CorpusParams.seed``. Ground truth comes from a union-find over thread ↔ Message-ID, the
definition of "unified thread" that both the BFS baseline and ThreadWeaver must meet.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from loadtest.corpora.unionfind import UnionFind

__all__ = [
    "Chain",
    "Corpus",
    "CorpusParams",
    "Discussion",
    "GroundTruth",
    "ThreadKey",
    "WovenMessage",
    "chain",
    "generate",
    "shuffled",
]

ThreadKey = tuple[str, str]
"""(gid, thread_id): one user's Gmail thread."""

_DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class WovenMessage:
    """One copy of a message in one mailbox: the input of ``WeaveMessage``."""

    gid: str
    thread_id: str
    rfc_message_id: str
    sent_at_ms: int


@dataclass(frozen=True, slots=True)
class CorpusParams:
    """Shape of the corpus; defaults give one 2,000-message discussion among 20 users."""

    users: int = 20
    """Team size (gids the team filter keeps)."""
    discussions: int = 1
    messages_per_discussion: int = 2000
    participants_per_discussion: int | None = None
    """Team members in each discussion (≥ 2 so split points can stagger); None = all."""
    externals_per_discussion: int = 2
    """Non-team participants with mailboxes of their own (other customers' users)."""
    automated_senders: int = 3
    automated_messages: int = 100
    """Notifications per automated sender, all with that sender's one subject."""
    automated_max_recipients: int = 5
    short_threads: int = 100
    short_thread_max_messages: int = 6
    gmail_thread_cap: int = 100
    same_subject_window_ms: int = 3 * _DAY_MS
    span_ms: int = 30 * _DAY_MS
    start_ms: int = 1_700_000_000_000
    seed: int = 0


@dataclass(slots=True)
class Discussion:
    """A long discussion: who took part, where each joined, and each one's centi-threads."""

    index: int
    join_offsets: dict[str, int]
    threads: dict[str, list[str]] = field(default_factory=dict)


class GroundTruth:
    """Connected components of thread ↔ Message-ID, computed with a union-find."""

    def __init__(self, messages: Iterable[WovenMessage]) -> None:
        uf: UnionFind[ThreadKey | str] = UnionFind()
        keys: dict[ThreadKey, None] = {}
        for m in messages:
            key = (m.gid, m.thread_id)
            keys[key] = None
            uf.union(key, m.rfc_message_id)
        self._members: dict[ThreadKey | str, list[ThreadKey]] = {}
        self._root: dict[ThreadKey, ThreadKey | str] = {}
        for key in keys:
            root = uf.find(key)
            self._root[key] = root
            self._members.setdefault(root, []).append(key)

    def component(self, gid: str, thread_id: str) -> frozenset[ThreadKey]:
        """Every thread, of anyone, unified with ``(gid, thread_id)``."""
        return frozenset(self._members[self._root[(gid, thread_id)]])

    def team_component(
        self, gid: str, thread_id: str, team_gids: Iterable[str]
    ) -> frozenset[ThreadKey]:
        """The component filtered to the team, as ``GetUnifiedThread(team_gids)`` returns it."""
        team = set(team_gids)
        return frozenset(k for k in self.component(gid, thread_id) if k[0] in team)

    def components(self) -> list[frozenset[ThreadKey]]:
        """All components, largest first."""
        return sorted((frozenset(v) for v in self._members.values()), key=len, reverse=True)


@dataclass(slots=True)
class Corpus:
    """The generated messages (send-time order) and what is known about their structure."""

    params: CorpusParams
    team_gids: tuple[str, ...]
    external_gids: tuple[str, ...]
    messages: list[WovenMessage]
    discussions: list[Discussion]

    def __iter__(self) -> Iterator[WovenMessage]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def thread_sizes(self) -> dict[ThreadKey, int]:
        """Messages per (gid, thread_id)."""
        sizes: dict[ThreadKey, int] = {}
        for m in self.messages:
            key = (m.gid, m.thread_id)
            sizes[key] = sizes.get(key, 0) + 1
        return sizes

    def ground_truth(self) -> GroundTruth:
        """Union-find components over all messages (recomputed on each call)."""
        return GroundTruth(self.messages)


def shuffled(messages: Iterable[WovenMessage], seed: int = 0) -> list[WovenMessage]:
    """The messages in a deterministic random order: weaving must not depend on order."""
    out = list(messages)
    random.Random(seed).shuffle(out)
    return out


class _Builder:
    """Mutable state of one generation: rng, id allocation, Gmail's per-mailbox threading."""

    def __init__(self, p: CorpusParams) -> None:
        self.p = p
        self.rng = random.Random(p.seed)
        self._ids: set[str] = set()
        self._rows: list[tuple[int, int, WovenMessage]] = []
        self._seq = 0

    def gid(self) -> str:
        while True:
            gid = str(100_000_000_000_000_000_000 + self.rng.randrange(10**20))
            if gid not in self._ids:
                self._ids.add(gid)
                return gid

    def thread_id(self) -> str:
        while True:
            tid = f"{self.rng.getrandbits(64):016x}"
            if tid not in self._ids:
                self._ids.add(tid)
                return tid

    def message_id(self, kind: str, domain: str) -> str:
        self._seq += 1
        return f"<{kind}.{self._seq}.{self.rng.getrandbits(48):012x}@{domain}>"

    def deliver(self, sent_at_ms: int, rfc: str, copies: Iterable[ThreadKey]) -> None:
        for gid, tid in copies:
            row = WovenMessage(gid, tid, rfc, sent_at_ms)
            self._rows.append((sent_at_ms, len(self._rows), row))

    def sorted_messages(self) -> list[WovenMessage]:
        self._rows.sort(key=lambda r: (r[0], r[1]))
        return [r[2] for r in self._rows]


def _discussion(b: _Builder, index: int, team: tuple[str, ...], externals: list[str]) -> Discussion:
    p, rng = b.p, b.rng
    n_team = min(len(team), p.participants_per_discussion or len(team))
    people = [*rng.sample(team, n_team), *externals]
    # Stagger: the starter is at 0, everyone else at a distinct offset inside the first
    # thread, so every boundary of every user is straddled by someone else's thread.
    pool = list(range(1, p.gmail_thread_cap))
    rng.shuffle(pool)
    offsets = [0, *(pool[i % len(pool)] for i in range(len(people) - 1))]
    d = Discussion(index, dict(zip(people, offsets, strict=True)))
    start = p.start_ms + rng.randrange(max(1, p.span_ms // 2))
    gap = max(1, (p.span_ms // 2) // max(1, p.messages_per_discussion))
    count: dict[str, int] = {}
    t = start
    for k in range(p.messages_per_discussion):
        t += 1 + rng.randrange(2 * gap)
        copies: list[ThreadKey] = []
        for person, off in d.join_offsets.items():
            if k < off:
                continue
            if count.get(person, p.gmail_thread_cap) >= p.gmail_thread_cap:
                d.threads.setdefault(person, []).append(b.thread_id())
                count[person] = 0
            count[person] += 1
            copies.append((person, d.threads[person][-1]))
        b.deliver(t, b.message_id(f"d{index}", "discuss.example.com"), copies)
    return d


def _automated(b: _Builder, sender: int, team: tuple[str, ...]) -> None:
    p, rng = b.p, b.rng
    current: dict[str, tuple[str, int, int]] = {}  # gid → (thread, size, last sent)
    times = sorted(p.start_ms + rng.randrange(p.span_ms) for _ in range(p.automated_messages))
    for t in times:
        k = rng.randint(1, min(len(team), p.automated_max_recipients))
        copies: list[ThreadKey] = []
        for gid in rng.sample(team, k):
            tid, size, last = current.get(gid, ("", p.gmail_thread_cap, t))
            if size >= p.gmail_thread_cap or t - last > p.same_subject_window_ms:
                tid, size = b.thread_id(), 0
            current[gid] = (tid, size + 1, t)
            copies.append((gid, tid))
        b.deliver(t, b.message_id(f"n{sender}", "notify.example.net"), copies)


def _short_thread(b: _Builder, team: tuple[str, ...], externals: tuple[str, ...]) -> None:
    p, rng = b.p, b.rng
    people = rng.sample(team, rng.randint(min(2, len(team)), min(4, len(team))))
    if externals and rng.random() < 0.3:
        people.append(rng.choice(externals))
    threads = [(gid, b.thread_id()) for gid in people]
    t = p.start_ms + rng.randrange(p.span_ms)
    for _ in range(rng.randint(1, min(p.short_thread_max_messages, p.gmail_thread_cap))):
        t += 1 + rng.randrange(_DAY_MS // 4)
        b.deliver(t, b.message_id("s", "mail.example.org"), threads)


def generate(params: CorpusParams | None = None) -> Corpus:
    """Build the corpus described by ``params`` (deterministic from ``params.seed``)."""
    p = params if params is not None else CorpusParams()
    if p.users < 2:
        raise ValueError("users must be ≥ 2: one user alone cannot stagger split points")
    b = _Builder(p)
    team = tuple(b.gid() for _ in range(p.users))
    externals: list[str] = []
    discussions = []
    for i in range(p.discussions):
        ext = [b.gid() for _ in range(p.externals_per_discussion)]
        externals.extend(ext)
        discussions.append(_discussion(b, i, team, ext))
    for s in range(p.automated_senders):
        _automated(b, s, team)
    for _ in range(p.short_threads):
        _short_thread(b, team, tuple(externals))
    return Corpus(p, team, tuple(externals), b.sorted_messages(), discussions)


@dataclass(frozen=True, slots=True)
class Chain:
    """One conversation of `threads` threads whose unified threads form a chain of `length`.

    Weave `groups` first (one batch per group: each group becomes one unified thread), then
    `links` (each joins two neighbouring groups' unified threads, in shuffled order). Every
    chain has the same threads and messages whatever its length, so a read of a long chain
    and of a short one return the same amount: only the chain of merges differs.
    """

    length: int
    threads: list[ThreadKey]
    groups: list[list[WovenMessage]]
    links: list[list[WovenMessage]]

    @property
    def messages(self) -> list[WovenMessage]:
        return [m for part in (*self.groups, *self.links) for m in part]


def chain(
    length: int, *, threads: int = 80, seed: int = 0, start_ms: int = 1_700_000_000_000
) -> Chain:
    """A chain of `length` unified threads over `threads` threads (one per mailbox).

    `threads` must be a multiple of `length`. The unified threads are named after the
    groups' first threads, so the smallest sits at one end of the chain.
    """
    if length < 1 or threads % length:
        raise ValueError("threads must be a positive multiple of length")
    tag = f"chain{length}-{seed}"
    keys: list[ThreadKey] = [(f"{tag}-u{i:03d}", "t") for i in range(threads)]
    per = threads // length
    groups = [
        [
            WovenMessage(gid, tid, f"<group-{g}@{tag}.example>", start_ms + g)
            for gid, tid in keys[g * per : (g + 1) * per]
        ]
        for g in range(length)
    ]
    links = [
        [
            WovenMessage(
                *keys[(g + 1) * per - 1], f"<link-{g}@{tag}.example>", start_ms + length + g
            ),
            WovenMessage(*keys[(g + 1) * per], f"<link-{g}@{tag}.example>", start_ms + length + g),
        ]
        for g in range(length - 1)
    ]
    random.Random(seed + length).shuffle(links)
    return Chain(length, keys, groups, links)
