"""The erasure recorder: keyed hashes only, one key per deployment, matching by the key."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path
from typing import Any

import pytest

from server.runtime.erasures import SubjectHasher, key_path, log_path, open_recorder
from storage.settings import ErasureSettings, SqliteSettings


def test_the_key_is_created_once_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "erasure.key"
    first = SubjectHasher.from_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_bytes()) == 32
    again = SubjectHasher.from_file(path)
    assert first.digest("inbox", "alice") == again.digest("inbox", "alice")


def _first_key(path: Path, start: Any, out: Any) -> None:
    start.wait()
    try:
        out.put(SubjectHasher.from_file(path).digest("inbox", "alice"))
    except ValueError as error:
        out.put(str(error))


def test_processes_starting_together_all_read_the_one_whole_key(tmp_path: Path) -> None:
    """`--workers N` start at once: none may read the key while another is still writing it.

    The workers come from a forkserver, not a fork of this process: pytest's process holds
    threads of earlier tests (driver event loops, pools), and a fork of it may inherit a
    lock one of them held and abort, leaving the others waiting at the barrier."""
    context = multiprocessing.get_context("forkserver")
    for round_ in range(20):
        path = tmp_path / f"round-{round_}" / "erasure.key"
        start, out = context.Barrier(4, timeout=30), context.Queue()
        workers = [context.Process(target=_first_key, args=(path, start, out)) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        assert [w.exitcode for w in workers] == [0] * 4
        digests = {out.get(timeout=5) for _ in workers}
        assert len(digests) == 1, digests
        assert isinstance(digests.pop(), bytes)
        assert sorted(p.name for p in path.parent.iterdir()) == ["erasure.key"]


def test_digests_depend_on_key_service_and_subject() -> None:
    one, two = SubjectHasher(b"k" * 32), SubjectHasher(b"j" * 32)
    assert one.digest("inbox", "alice") != two.digest("inbox", "alice")
    assert one.digest("inbox", "alice") != one.digest("summary", "alice")
    assert one.digest("inbox", "alice") != one.digest("inbox", "alicf")
    assert b"alice" not in one.digest("inbox", "alice")


def test_a_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        SubjectHasher(b"short")


def test_paths_default_to_the_data_directory(tmp_path: Path) -> None:
    sqlite = SqliteSettings(data_dir=str(tmp_path))
    assert log_path(ErasureSettings(), sqlite) == tmp_path / "erasures.sqlite3"
    assert key_path(ErasureSettings(), sqlite) == tmp_path / "erasure.key"
    chosen = ErasureSettings(log_file=str(tmp_path / "x.db"), key_file=str(tmp_path / "k"))
    assert log_path(chosen, sqlite) == tmp_path / "x.db"
    assert key_path(chosen, sqlite) == tmp_path / "k"


async def test_matching_finds_only_what_was_erased_from_that_service(tmp_path: Path) -> None:
    recorder = await open_recorder(ErasureSettings(), SqliteSettings(data_dir=str(tmp_path)))
    try:
        await recorder.erased("inbox", ["alice", "bob", "alice"])
        assert await recorder.matching("inbox", ["carol", "bob", "alice"]) == ["alice", "bob"]
        assert await recorder.matching("summary", ["alice"]) == []
        assert await recorder.log.count() == 2
    finally:
        await recorder.close()
    raw = (tmp_path / "erasures.sqlite3").read_bytes()
    assert b"alice" not in raw
    assert b"bob" not in raw
