"""The demo hierarchy `make run` puts in the embedded Iterator source: the same rows on every
machine, written once, never over an operator's rows, and where the server looks for them."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from server.config import load_settings
from storage import factory
from storage.ports import SourceLevel
from storage.sqlite.demo_source import SOURCE_FILE, demo_rows, main, write_demo_source

REPO = Path(__file__).resolve().parents[3]
LEVELS = [
    SourceLevel(name=name, table=table, id_columns=("id",), parent_column=parent, where=where)
    for name, table, parent, where in (
        ("enterprise", "enterprise", "", "deleted = 0"),
        ("user", "users", "enterprise_id", "deleted = 0"),
        ("file", "file", "user_id", "deleted = 0"),
        ("version", "file_version", "file_id", "deleted = 0"),
    )
]


def _count(path: Path, sql: str) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute(sql).fetchone()[0])


class TestDemoRows:
    def test_the_same_rows_on_every_call(self) -> None:
        """A fixed seed: two calls (two machines) generate the same hierarchy."""
        assert demo_rows() == demo_rows()

    def test_enterprises_one_to_twenty_with_children_and_deleted_rows(self) -> None:
        """Enterprises 1..20 (the README's range), every level populated, some rows deleted
        so each level's ``where`` counts, and small enough to read by eye."""
        rows = demo_rows()
        assert [e for e, _, _ in rows.enterprise] == list(range(1, 21))
        assert len(rows.users) == 100
        assert 0 < len(rows.file) < 1000
        assert len(rows.file) <= len(rows.file_version) <= 3 * len(rows.file)
        live = rows.live()
        assert live["users"] < len(rows.users)
        assert live["file"] < len(rows.file)


class TestWriteDemoSource:
    def test_writes_an_empty_source_once(self, tmp_path: Path) -> None:
        """The first call writes every row; the second finds enterprises and writes none."""
        written = write_demo_source(tmp_path)
        assert written is not None
        path = tmp_path / SOURCE_FILE
        assert _count(path, "SELECT count(*) FROM file_version") == len(written.file_version)
        assert write_demo_source(tmp_path) is None
        assert _count(path, "SELECT count(*) FROM file_version") == len(written.file_version)

    def test_leaves_an_operators_rows_alone(self, tmp_path: Path) -> None:
        """A source that already holds an enterprise is not added to."""
        with closing(sqlite3.connect(tmp_path / SOURCE_FILE)) as conn, conn:
            conn.execute("CREATE TABLE enterprise (id BIGINT PRIMARY KEY, deleted SMALLINT)")
            conn.execute("INSERT INTO enterprise VALUES (7, 0)")
        assert write_demo_source(tmp_path) is None
        assert _count(tmp_path / SOURCE_FILE, "SELECT count(*) FROM enterprise") == 1

    def test_main_says_what_it_did(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The command `make run` calls exits 0 both times and says which case it met."""
        assert main(["--data-dir", str(tmp_path)]) == 0
        assert main(["--data-dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "demo hierarchy written" in out
        assert "left as it is" in out

    async def test_the_embedded_source_reads_it(self, tmp_path: Path) -> None:
        """The server's embedded source (no ``source_url``) opens the file written here and
        finds enterprises 1..20: the two agree on where the source lives."""
        write_demo_source(tmp_path)
        settings = load_settings(env={}, overrides={"sqlite": {"data_dir": str(tmp_path)}})
        source = await factory.open_iteration_source("", LEVELS, settings=settings)
        try:
            assert await source.exists(0, (1,), (20,))
            assert not await source.exists(0, (21,), (40,))
        finally:
            await source.close()


def test_make_run_writes_the_demo_before_serving() -> None:
    """`make run`'s recipe (dry run) calls the demo command on its data directory, then
    serves that directory: what the README's examples rely on. The flags of a `make test`
    this runs under are not passed on (the dry run must print, not inherit a mode)."""
    out = subprocess.run(
        ["make", "-n", "run", "DATA_DIR=/tmp/loom-demo-x", "PORT=50999"],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    demo = [i for i, line in enumerate(out) if "storage.sqlite.demo_source" in line]
    serve = [i for i, line in enumerate(out) if "loom serve" in line]
    assert demo, out
    assert serve, out
    assert demo[0] < serve[0], out
    assert "--data-dir /tmp/loom-demo-x" in out[demo[0]]
    assert "--port 50999 --data-dir /tmp/loom-demo-x" in out[serve[0]]
