"""Templates of four vendors built with mailgen, as a Node service builds its e-mails.

mailgen (npm, Apache-2.0, by Elad Nava) generates transactional e-mail from a theme and a
body (intro lines, a table, a key/value dictionary, action buttons, outro lines). Each of
its four themes (default, neopolitan, salted, cerberus) is one vendor here, with four
templates written the way its README's examples are (welcome, receipt, password reset) plus
a weekly digest. The layout and the rendering are mailgen's own code, run by Node; what a
template holds:

- **repeated blocks**: a receipt's line items and a digest's entries, 1-10 table rows;
- **optional blocks**: lines, a dictionary or an action present in about 80 % of instances.

`ensure_mailgen()` fetches mailgen@2.0.36 with ``npm pack`` (sha512 pinned) and installs
that tarball (its three dependencies resolved by npm) under the corpus cache, once.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtest.corpora.email_sources import SourceTemplate, cache_dir

__all__ = ["MAILGEN", "ensure_mailgen", "instantiate_mailgen", "mailgen_sources", "render_mailgen"]

MAILGEN = ("mailgen", "2.0.36", "Apache-2.0")
_INTEGRITY = "sha512-SyGJx3c8muDa8xtPIQnYlM8o+GC7aGs7yz3VzuvjXgz16JxW/ihdvp6N3XNUFlJaefJ7LNquvAsxJNNIpDZG9g=="
_SCRIPT = Path(__file__).with_name("mailgen_render.cjs")

_VENDORS = {
    "default": ("Brightloop", "hello@brightloop.example"),
    "neopolitan": ("Cobalt Bank", "alerts@cobalt-bank.example"),
    "salted": ("Fernway Travel", "trips@fernway.example"),
    "cerberus": ("Quillsmith", "team@quillsmith.example"),
}

_TEMPLATES: dict[str, dict[str, Any]] = {
    "welcome": {
        "intro": ["Welcome to {product}! We're very excited to have you on board."],
        "intro_optional": ["Your account comes with a free 14-day trial of every feature."],
        "action": {
            "instructions": "To get started with {product}, please click here:",
            "button": "Confirm your account",
        },
        "outro": ["Need help, or have questions? Just reply to this email, we'd love to help."],
    },
    "receipt": {
        "intro": ["Your order has been processed successfully."],
        "table": ["item", "description", "price"],
        "dictionary": ["Order number", "Shipping method"],
        "action": {
            "instructions": "You can check the status of your order and more in your dashboard:",
            "button": "Go to Dashboard",
            "optional": True,
        },
        "outro": ["We thank you for your purchase."],
    },
    "reset": {
        "intro": [
            "You have received this email because a password reset request for your "
            "account was received."
        ],
        "action": {
            "instructions": "Click the button below to reset your password:",
            "button": "Reset your password",
        },
        "outro": [
            "If you did not request a password reset, no further action is required on your part."
        ],
        "outro_optional": ["This link expires in one hour for your security."],
    },
    "digest": {
        "intro": ["Here is what happened in the projects you follow this week."],
        "table": ["project", "activity", "when"],
        "action": {
            "instructions": "See everything that changed since your last visit:",
            "button": "Open your activity feed",
            "optional": True,
        },
        "outro_optional": ["You receive this digest because you follow these projects."],
    },
}

_PRODUCTS = ["Desk lamp", "Notebook set", "Travel mug", "Wool scarf", "Phone stand",
             "Desk mat", "Fountain pen", "Backpack", "Water bottle", "Headphones"]  # fmt: skip


def _integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def ensure_mailgen() -> Path:
    """The ``node_modules`` folder holding mailgen, installed once under the corpus cache."""
    name, version, _ = MAILGEN
    folder = cache_dir() / f"{name}-{version}"
    modules = folder / "node_modules"
    if (modules / name / "package.json").exists():
        return modules
    folder.mkdir(parents=True, exist_ok=True)
    tarball = folder / f"{name}-{version}.tgz"
    if not tarball.exists() or _integrity(tarball) != _INTEGRITY:
        subprocess.run(
            ["npm", "pack", f"{name}@{version}", "--silent", "--pack-destination", str(folder)],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
    if _integrity(tarball) != _INTEGRITY:
        tarball.unlink(missing_ok=True)
        raise RuntimeError(f"{name}@{version}: integrity mismatch")
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix",
         str(folder), str(tarball)],
        check=True, capture_output=True, timeout=900,
    )  # fmt: skip
    license_text = (modules / name / "LICENSE").read_text(errors="replace")
    if "Apache License" not in license_text:
        raise RuntimeError(f"{name}@{version}: LICENSE is not Apache-2.0")
    return modules


def mailgen_sources() -> list[SourceTemplate]:
    """One SourceTemplate per (theme, template); the source is the template's spec (JSON)."""
    modules = str(ensure_mailgen())
    out = []
    for theme, (product, sender) in _VENDORS.items():
        for name, spec in _TEMPLATES.items():
            full = {"theme": theme, "product": product, **spec}
            out.append(
                SourceTemplate(
                    f"mailgen-{theme}",
                    name,
                    sender,
                    json.dumps(full),
                    {"node_modules": modules},
                    "mailgen",
                    {},
                    "mailgen",
                )
            )
    return out


def instantiate_mailgen(
    t: SourceTemplate,
    rng: random.Random,
    value: Callable[[str], str],
    optional: float = 0.8,
    record: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """One e-mail's mailgen input: values, 1-10 table rows, optional parts kept at `optional`.

    `record` is called with (name, value, row) for each value the e-mail will show: the
    greeting's name, each table row's cells (row ``table#i``), the dictionary's values,
    the action's link, and the product's name (a per-sender constant).
    """
    spec = json.loads(t.source)
    product = spec["product"]
    shown: list[tuple[str, str, str]] = [("product_name", product, "")]

    def put(name: str, got: str, row: str = "") -> str:
        shown.append((name, got, row))
        return got

    def fill(lines: list[str]) -> list[str]:
        return [line.format(product=product) for line in lines]

    body: dict[str, Any] = {"name": put("name", value("name"))}
    body["intro"] = fill(spec["intro"]) + [
        line for line in fill(spec.get("intro_optional", [])) if rng.random() < optional
    ]
    if "table" in spec:
        rows = []
        for i in range(rng.randint(1, 10)):
            first, second, third = spec["table"]
            row = f"table#{i + 1}"
            rows.append(
                {
                    first: put(
                        first, rng.choice(_PRODUCTS) if first == "item" else value("title"), row
                    ),
                    second: put(second, value("details"), row),
                    third: put(third, value("price") if third == "price" else value("date"), row),
                }
            )
        body["table"] = {"data": rows}
    if "dictionary" in spec and rng.random() < optional:
        body["dictionary"] = {key: put(key, value(key)) for key in spec["dictionary"]}
    action = spec.get("action")
    if action and (not action.get("optional") or rng.random() < optional):
        body["action"] = [
            {
                "instructions": action["instructions"].format(product=product),
                "button": {"text": action["button"], "link": put("link", value("link"))},
            }
        ]
    outro = fill(spec.get("outro", [])) + [
        line for line in fill(spec.get("outro_optional", [])) if rng.random() < optional
    ]
    if outro:
        body["outro"] = outro
    if record is not None:
        for name, got, row in shown:
            record(name, got, row, name == "product_name")  # (name, value, row, constant)
    return {
        "theme": spec["theme"],
        "product": {
            "name": product,
            "link": f"https://{product.lower().replace(' ', '')}.example/",
        },
        "body": body,
    }


def render_mailgen(emails: list[dict[str, Any]], modules: str) -> list[str]:
    """HTML of every e-mail, rendered by mailgen in one Node process."""
    if not emails:
        return []
    done = subprocess.run(
        ["node", str(_SCRIPT)],
        input=json.dumps({"modules": modules, "emails": emails}),
        capture_output=True, text=True, check=True, timeout=900,
    )  # fmt: skip
    htmls: list[str] = json.loads(done.stdout)
    return htmls
