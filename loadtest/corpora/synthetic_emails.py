"""Crusher's §6.2 synthetic workload, with real-looking HTML instead of random bytes.

Template ids come from a Zipf(alpha) distribution over `templates` ids (finite support, so
alpha may be as close to 1 as the paper's 1.001); a template is never sent more than `T`
times (a draw beyond that is redrawn, as the paper's clients cap at T). Each template id
seeds its own skeleton: a vendor sender, a table layout chosen from a block library
(headers, paragraphs of fixed text, item tables, address blocks, buttons, footers) and
its fixed text. Each email instantiates it: a distinct random recipient, personal values,
1-8 line items, optional blocks, and a free-text message whose length brings the body to
a size drawn from N(10 KB, 2 KB), capped at 30 KB.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

__all__ = ["SyntheticEmail", "ZipfStream", "instantiate", "skeleton"]

_WORDS = [
    "account",
    "order",
    "total",
    "item",
    "shipping",
    "receipt",
    "invoice",
    "payment",
    "delivery",
    "review",
    "thank",
    "team",
    "support",
    "manage",
    "update",
    "confirm",
    "details",
    "summary",
    "balance",
    "credit",
    "offer",
    "member",
    "service",
    "plan",
    "storage",
    "device",
    "travel",
    "booking",
    "seat",
    "hotel",
    "flight",
    "reward",
    "points",
    "profile",
    "notice",
    "secure",
]
_FILL = [
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
    "incididunt",
    "ut",
    "labore",
    "et",
    "dolore",
    "magna",
    "aliqua",
]
_BLOCKS = ("para", "items", "address", "button", "two_col", "notice")


@dataclass(frozen=True)
class SyntheticEmail:
    """One generated email and its ground-truth template id."""

    template: int
    email_id: str
    sender: str
    recipient: str
    subject: str
    html: str


def _phrase(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n)).capitalize()


def skeleton(template: int) -> tuple[str, str, list[tuple[str, str, bool]]]:
    """(sender, subject, blocks) of a template: blocks are (kind, fixed text, optional)."""
    rng = random.Random(template * 7919 + 1)
    sender = f"noreply@vendor{template % 997}.example"
    subject = _phrase(rng, 4)
    blocks = [
        (rng.choice(_BLOCKS), _phrase(rng, rng.randint(3, 9)), rng.random() < 0.25)
        for _ in range(rng.randint(3, 7))
    ]
    return sender, subject, blocks


def _block(kind: str, fixed: str, rng: random.Random) -> str:
    if kind == "para":
        return f"<tr><td><h3>{fixed}</h3><p>{fixed}, {rng.choice(_WORDS)} {rng.randint(1, 999)}.</p></td></tr>"
    if kind == "items":
        rows = "".join(
            f"<tr><td>{_phrase(rng, 2)}</td><td>{rng.randint(1, 9)}</td><td>${rng.randint(1, 999)}.{rng.randint(0, 99):02d}</td></tr>"
            for _ in range(rng.randint(1, 8))
        )
        return f'<tr><td><h4>{fixed}</h4><table class="items"><tr><th>Item</th><th>Qty</th><th>Price</th></tr>{rows}</table></td></tr>'
    if kind == "address":
        return (
            f"<tr><td><p><strong>{fixed}</strong><br>{rng.randint(1, 999)} {_phrase(rng, 2)} St"
            f"<br>City {rng.randint(10000, 99999)}</p></td></tr>"
        )
    if kind == "button":
        return f'<tr><td align="center"><a class="button" href="https://x.example/{rng.getrandbits(40):x}">{fixed}</a></td></tr>'
    if kind == "two_col":
        return (
            f'<tr><td><table><tr><td width="50%"><p>{fixed}</p></td><td width="50%">'
            f"<p>{rng.randint(10**7, 10**8)}</p></td></tr></table></td></tr>"
        )
    return f'<tr><td><div class="notice"><em>{fixed}</em> {rng.randint(1, 28)}/{rng.randint(1, 12)}/2026</div></td></tr>'


def instantiate(
    template: int,
    index: int,
    recipient: str,
    rng: random.Random,
    size: int,
    *,
    all_blocks: bool = False,
) -> SyntheticEmail:
    """Email `index` of `template` to `recipient`, about `size` bytes of HTML.

    `all_blocks` keeps every optional block, so every instance has the same structure (the
    template-delay phase measures the pipeline, not how optional blocks split clusters).
    """
    sender, subject, blocks = skeleton(template)
    parts = [
        "<!DOCTYPE html><html><head><style>.button{padding:8px}</style></head><body>",
        f'<table class="wrapper" width="100%"><tr><td><h1>{sender.split("@")[1]}</h1></td></tr>',
        f"<tr><td><p>Hi {rng.choice(_WORDS).title()} {rng.choice(_WORDS).title()},</p></td></tr>",
    ]
    parts += [
        _block(kind, fixed, rng)
        for kind, fixed, optional in blocks
        if all_blocks or not optional or rng.random() < 0.5
    ]
    tail = '<tr><td><p class="footer">You receive this email because you have an account.</p></td></tr></table></body></html>'
    body = "".join(parts)
    room = max(0, size - len(body) - len(tail) - 40)
    words: list[str] = []
    length = 0
    while length < room:
        word = rng.choice(_FILL)
        words.append(word)
        length += len(word) + 1
    message = f'<tr><td><p class="message">{" ".join(words)}</p></td></tr>' if words else ""
    html = body + message + tail
    return SyntheticEmail(
        template,
        f"t{template}-{index}",
        sender,
        recipient,
        f"{subject} #{rng.randint(1, 10**6)}",
        html,
    )


class ZipfStream:
    """An endless stream of synthetic emails, template ids ~ Zipf(alpha), at most T each."""

    def __init__(
        self, *, alpha: float, templates: int, max_per_template: int, seed: int = 1
    ) -> None:
        weights = 1.0 / np.power(np.arange(1, templates + 1, dtype=float), alpha)
        self._cdf = np.cumsum(weights) / weights.sum()
        self._np = np.random.default_rng(seed)
        self._rng = random.Random(seed)
        self._cap = max_per_template
        self._sent: dict[int, int] = {}

    def _draw(self) -> int:
        for _ in range(1000):
            t = int(np.searchsorted(self._cdf, self._np.random()))
            if self._sent.get(t, 0) < self._cap:
                return t
        raise RuntimeError("every drawn template reached T")

    def __iter__(self) -> Iterator[SyntheticEmail]:
        while True:
            t = self._draw()
            n = self._sent.get(t, 0)
            self._sent[t] = n + 1
            size = min(30 * 1024, max(1024, int(self._rng.gauss(10 * 1024, 2 * 1024))))
            yield instantiate(t, n, f"u{self._rng.getrandbits(40)}", self._rng, size)

    def take(self, n: int) -> list[SyntheticEmail]:
        """The next `n` emails."""
        out: list[SyntheticEmail] = []
        for email in self:
            out.append(email)
            if len(out) == n:
                return out
        return out
