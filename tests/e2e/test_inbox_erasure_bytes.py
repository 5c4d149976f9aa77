"""DeleteInbox on the embedded engine leaves no byte of the erased inbox id in its files
(secure_delete zeroes the freed cells, `scrub` empties the WAL)."""

from __future__ import annotations

from pathlib import Path

from storage.sqlite.inbox import SqliteInboxStore


def _bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file())


async def test_no_byte_of_an_erased_inbox_stays_in_the_files(tmp_path: Path) -> None:
    erased = "erase-me-7f3a9c1d"
    store = await SqliteInboxStore.open(tmp_path / "inbox.sqlite3")
    try:
        others = [f"keep-{i:05}" for i in range(3000)]
        for m in range(1, 301):  # enough rows for interior B-tree pages around the inbox
            await store.deliver(f"thread-{m}", m, unread=[erased, *others[m * 9 : m * 9 + 9]])
        await store.deliver("thread-sent", 400, unread=others[:5], read=[erased])
        assert erased.encode() in _bytes(tmp_path)
        assert await store.delete_inbox(erased) == 301
        assert await store.scan_inbox(erased, 1000) == []
        assert await store.scan_inbox(others[9], 10) != []
        assert erased.encode() not in _bytes(tmp_path)
    finally:
        await store.close()
