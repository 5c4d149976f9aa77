"""The Inbox domain's tests run over the real embedded engine (a SQLite file per test)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.sqlite.inbox import SqliteInboxStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteInboxStore]:
    """A fresh InboxStore on the embedded engine, closed after the test."""
    opened = await SqliteInboxStore.open(tmp_path / "inbox.sqlite3", synchronous="NORMAL")
    yield opened
    await opened.close()
