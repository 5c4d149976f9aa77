"""A small synthetic corpus for the TemplateInduction tests (no download needed).

Two templates of one vendor share one layout (a receipt and a password reset, as real
vendors do), with personal values, 1-8 line items and an optional block; plus one-off
human emails. Bodies are written here, by us.
"""

from __future__ import annotations

import random

from server.templates.fingerprint import parse_structure
from server.templates.model import ClusterEmail

_LAYOUT = """<!DOCTYPE html><html><head><style>td{{padding:4px}}</style></head><body>
<table class="wrapper"><tr><td><table class="header"><tr><td><img src="logo.png"><h1>Acme Shop</h1></td></tr></table>
<table class="main"><tr><td>{content}</td></tr></table>
<table class="footer"><tr><td><p>Acme Shop, 1 Market Street, Springfield</p><p>You receive this because you have an Acme account.</p></td></tr></table>
</td></tr></table></body></html>"""

NAMES = [
    "Ava Smith",
    "Bob Garcia",
    "Chen Okafor",
    "Dana Nguyen",
    "Emil Rossi",
    "Fatima Tanaka",
    "Grace Silva",
    "Hiro Novak",
    "Ines Berg",
    "Jonas Moreau",
    "Kemal Lopez",
    "Lena Kim",
]


def receipt(rng: random.Random, name: str, day_first: bool = True) -> tuple[str, str]:
    """(subject, html) of an Acme order receipt."""
    order = f"AC{rng.randint(100000, 999999)}"
    d, m = rng.randint(13, 28), rng.randint(1, 12)
    date = f"{d:02d}/{m:02d}/2025" if day_first else f"{m:02d}/{d:02d}/2025"
    items = "".join(
        f"<tr><td>{rng.choice(['Lamp', 'Chair', 'Desk', 'Rug', 'Vase'])}</td><td>{rng.randint(1, 5)}</td><td>${rng.randint(5, 500)}.00</td></tr>"
        for _ in range(rng.randint(1, 8))
    )
    gift = "<p>Gift wrapping included.</p>" if rng.random() < 0.4 else ""
    content = (
        f"<h2>Thanks for your order</h2><p>Hi {name},</p><p>Order number</p><p>{order}</p>"
        f'<p>Order date</p><p>{date}</p><table class="items"><tr><th>Item</th><th>Qty</th><th>Price</th></tr>{items}</table>'
        f"<p>Total</p><p>${rng.randint(10, 900)}.{rng.randint(0, 99):02d}</p>{gift}<p>Track your package in your account.</p>"
    )
    return f"Your Acme order {order}", _LAYOUT.format(content=content)


def reset(rng: random.Random, name: str) -> tuple[str, str]:
    """(subject, html) of an Acme password reset, in the same layout."""
    content = (
        f"<h2>Reset your password</h2><p>Hi {name},</p><p>Someone asked to reset the password of your account.</p>"
        f'<p><a href="https://acme.example/reset/{rng.randint(10**8, 10**9)}">Choose a new password</a></p>'
        f"<p>This link expires in 24 hours.</p><p>If it was not you, ignore this email.</p>"
    )
    return "Reset your Acme password", _LAYOUT.format(content=content)


def human(rng: random.Random) -> tuple[str, str]:
    """(subject, html) of a one-off human email."""
    lines = "".join(
        f"<div>{' '.join(rng.choice(['see', 'you', 'at', 'the', 'lake', 'soon', 'bring', 'cake']) for _ in range(8))}</div>"
        for _ in range(3)
    )
    return "hello", f'<div dir="ltr"><div>Hi,</div>{lines}<div>Sam</div></div>'


def one_off_notice(rng: random.Random, index: int) -> tuple[str, str]:
    """(subject, html) of a rare template of the same layout, sent once (text of its own)."""
    words = ["amber", "birch", "coral", "delta", "ember", "fjord", "grove", "heath", "iris"]
    own = " ".join(rng.choice(words) for _ in range(5))
    content = f"<h2>Notice {index} {own}</h2><p>Hi there,</p><p>{own} {index}</p><p>{rng.randint(1, 10**6)}</p>"
    return f"Notice {index}", _LAYOUT.format(content=content)


def cluster_emails(
    made: list[tuple[str, str]], users: list[str], sender: str = "orders@acme.example"
) -> list[ClusterEmail]:
    """(subject, html) emails, each to its user, as a row holds them: parsed text nodes."""
    return [
        ClusterEmail(user, sender, subject, parse_structure(html).texts, 0)
        for (subject, html), user in zip(made, users, strict=True)
    ]
