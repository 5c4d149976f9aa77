"""Fenced code blocks of a Markdown text, with the line each opens on: what the tests that
run or load the documentation's examples read (`tests/e2e/test_readme_examples.py`,
`tests/unit/runtime/test_documented_settings.py`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Block", "blocks"]

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One fenced block."""

    language: str
    code: str
    line: int

    @property
    def name(self) -> str:
        """Its first comment line, else its first line: a readable test id."""
        first = self.code.splitlines()[0]
        title = first.lstrip("# ").strip() if first.startswith("#") else first
        return f"L{self.line}-{self.language}-{title[:40]}"


def blocks(text: str) -> list[Block]:
    """Every fenced block of `text`, with the line its fence opens on."""
    return [
        Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1)
        for m in FENCE.finditer(text)
    ]
