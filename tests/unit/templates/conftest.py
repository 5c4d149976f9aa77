"""Fixtures of the TemplateInduction unit tests that need a store: the real embedded one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.sqlite.templates import SqliteTemplateStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteTemplateStore]:
    """A fresh SQLite template store in the test's directory."""
    s = await SqliteTemplateStore.open(
        tmp_path / "t.sqlite3", email_ttl_s=3600, synchronous="NORMAL"
    )
    try:
        yield s
    finally:
        await s.close()
