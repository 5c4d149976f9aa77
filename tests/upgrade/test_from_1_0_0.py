"""Data written by release 1.0.0 itself opens in today's server: same answers, new writes work.

For each engine setup the suite covers, release 1.0.0 (its own tree, `tests/upgrade/release.py`)
serves on fresh stores and is driven through gRPC to store something in all five services;
its answers to every read are recorded. It stops, today's ``loom serve`` opens the same
stores (migrating them at start-up), and must give the same answers, then take new writes
on top. On SQLite the test also reads the files: 1.0.0 recorded no version, today's server
recorded each store's current one, and the Iterator's chunk keys left the old column.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import grpc
import pytest

from loadtest.corpora.iterator import CorpusShape, generate, private_database, write_url
from storage.sqlite.versions import ERASURES
from storage.upgrades import SQLITE_FILES
from tests.conftest import selected_engines
from tests.engines import server_env, source_url
from tests.serving import loom_process, run_loom
from tests.upgrade import release, workload

SETUPS: dict[str, tuple[str, dict[str, str]]] = {
    "sqlite": ("sqlite", {}),
    "cassandra-postgres": (
        "postgres",
        {"threadweaver_store": "cassandra", "inbox_store": "cassandra"},
    ),
    "bigtable-mariadb": (
        "mariadb",
        {"threadweaver_store": "bigtable", "templates_store": "bigtable"},
    ),
    "dynamodb-sqs": (
        "sqlite",
        {"summary_store": "dynamodb", "iterator_state": "dynamodb", "iterator_queue": "sqs"},
    ),
}
"""Each distributed engine under the stores it serves, and PostgreSQL and MariaDB as the
Iterator's source (the operator's database, not a Loom store: a setup each, beside stores on
other engines, to keep the run short); every other store on SQLite."""

SHAPE = CorpusShape(enterprises=2, users_per_enterprise=6, large_users=0, max_files_per_user=20)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "setup" in metafunc.fixturenames:
        wanted = []
        for name, (source, stores) in SETUPS.items():
            needed = {"sqlite", source, *stores.values()}
            if set(selected_engines(metafunc.config, tuple(needed))) == needed:
                wanted.append(name)
        metafunc.parametrize("setup", wanted, ids=wanted)


def _versions(data: Path) -> dict[str, int]:
    """Every SQLite store's recorded version, by store name."""
    found: dict[str, int] = {}
    for path in sorted(data.glob("*.sqlite3")):
        with sqlite3.connect(path) as conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'loom_schema'").fetchone():
                found.update(conn.execute("SELECT store, version FROM loom_schema").fetchall())
    return found


def _keys_in_old_column(data: Path) -> int:
    with sqlite3.connect(data / "iterator-state.sqlite3") as conn:
        (n,) = conn.execute("SELECT count(*) FROM iter_chunk WHERE length(keys) > 0").fetchone()
    return int(n)


async def test_data_written_by_1_0_0_opens(setup: str, tmp_path: Path) -> None:
    """Every read answers as 1.0.0 answered it, after today's server migrated the stores;
    new writes land on top and agree with the old data."""
    source, stores = SETUPS[setup]
    async with private_database(source_url(source, tmp_path)) as url:
        await write_url(url, generate(SHAPE))
        env = {
            **server_env(**stores),
            "LOOM_ITERATOR__SOURCE_URL": url,
            "LOOM_TEMPLATES__K_ANONYMITY": str(workload.K),
        }
        await _upgrade(tmp_path, env, stores)


async def _upgrade(tmp_path: Path, env: dict[str, str], stores: dict[str, str]) -> None:
    """1.0.0 writes and answers, today's server answers the same and writes on top."""
    data = tmp_path / "data"
    old_env = {**env, **release.env()}
    old_server = loom_process(tmp_path, env=old_env, data_dir=data, program=release.program())
    async with old_server as old, grpc.aio.insecure_channel(old.target) as channel:
        job_id, objects = await workload.write(channel)
        delivery_id = await workload.announce(channel)
        before = await workload.read(channel, job_id)
        before["announcement"] = await workload.delivered(channel, delivery_id)
    assert objects, "the 1.0.0 job emitted nothing"
    assert _versions(data) == {}  # 1.0.0 records no version
    old_layout_keys = _keys_in_old_column(data) if "iterator_state" not in stores else 0

    checked = run_loom("serve", "--check-only", "--data-dir", str(data), env=env)
    assert checked.returncode == 0, checked.stderr
    _assert_check_lines(checked.stdout, stores)
    assert _versions(data) == {}  # the check wrote nothing

    async with loom_process(tmp_path, env=env, data_dir=data) as new:
        async with grpc.aio.insecure_channel(new.target) as channel:
            after = await workload.read(channel, job_id)
            after["announcement"] = await workload.delivered(channel, delivery_id)
            await workload.write_more(channel, objects)
            await workload.announce_again(channel, delivery_id)
        migrated = [line for line in new.log_lines() if line.get("event") == "store migrated"]

    assert after == before
    rechecked = run_loom("serve", "--check-only", "--data-dir", str(data), env=env)
    recorded = rechecked.stdout.splitlines()
    assert len(recorded) == len(SQLITE_FILES), rechecked.stdout
    assert all(line.endswith("up to date") for line in recorded), rechecked.stdout
    sqlite_stores = {
        layout.store: layout.current for field, _, layout in SQLITE_FILES if field not in stores
    }
    # The server also keeps its erasure log beside the stores (new in 1.1.0, so created).
    assert _versions(data) == {**sqlite_stores, "erasures": ERASURES.current}
    if "iterator_state" not in stores:
        assert old_layout_keys > 0, "1.0.0 kept no chunk keys in iter_chunk: nothing migrated"
        assert _keys_in_old_column(data) == 0
        assert {(m["version_before"], m["version_after"]) for m in migrated} >= {(1, 2)}


def _assert_check_lines(out: str, stores: dict[str, str]) -> None:
    """``--check-only`` on 1.0.0's stores: every store unrecorded at version 1, and the
    steps of the layouts that changed since."""
    lines = out.splitlines()
    assert len(lines) == len(SQLITE_FILES), out
    for field, name, layout in SQLITE_FILES:
        engine = stores.get(field, "sqlite")
        mine = [line for line in lines if f"({layout.store})" in line and engine in line]
        assert len(mine) == 1, (field, out)
        if engine == "sqlite":
            assert name in mine[0]
        assert "version 1 (unrecorded)" in mine[0], mine[0]
        want = "would migrate to 2" if layout.current == 2 and engine != "dynamodb" else ""
        assert want in mine[0], mine[0]
