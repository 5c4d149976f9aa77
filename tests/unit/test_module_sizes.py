"""Modules of `server/` and `storage/` stay at most 450 lines, checked on the files themselves.

A module past that size has been holding two concepts (three once did: the dump code
of all five services in one, and two adapters carrying their scans beside serving); the fix
is a split by concept (`server/<service>/portable.py`, `storage/<engine>/threads_scan.py`),
and this keeps it from growing back unnoticed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 450


@pytest.mark.parametrize("package", ["server", "storage"])
def test_every_module_is_at_most_450_lines(package: str) -> None:
    """No module of the package is longer than `MAX_LINES` lines."""
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert sizes, f"no modules found under {package}/"
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
