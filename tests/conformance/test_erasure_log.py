"""ErasureLog conformance: what every erasure log keeps, and what it never does.

The log has one engine (a SQLite file kept apart from the stores); the suite is written
against the Protocol so another adapter would run it unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage import factory
from storage.ports import Erasure, ErasureLog
from storage.settings import SqliteSettings


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[ErasureLog]:
    opened = await factory.open_erasure_log(tmp_path / "erasures.sqlite3", SqliteSettings())
    try:
        yield opened
    finally:
        await opened.close()


def _e(service: str, subject: bytes, at: int = 1) -> Erasure:
    return Erasure(service=service, subject=subject, erased_at_ms=at)


async def test_subjects_are_kept_per_service(log: ErasureLog) -> None:
    await log.record([_e("inbox", b"a" * 32), _e("summary", b"b" * 32)])
    assert await log.subjects("inbox") == frozenset({b"a" * 32})
    assert await log.subjects("summary") == frozenset({b"b" * 32})
    assert await log.subjects("templates") == frozenset()


async def test_recording_twice_is_recording_once(log: ErasureLog) -> None:
    await log.record([_e("inbox", b"a" * 32, at=1)])
    await log.record([_e("inbox", b"a" * 32, at=2), _e("inbox", b"a" * 32, at=3)])
    await log.record([])
    assert await log.count() == 1


async def test_the_log_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "erasures.sqlite3"
    first = await factory.open_erasure_log(path, SqliteSettings())
    await first.record([_e("threadweaver", b"c" * 32)])
    await first.close()
    again = await factory.open_erasure_log(path, SqliteSettings())
    try:
        assert await again.subjects("threadweaver") == frozenset({b"c" * 32})
    finally:
        await again.close()
