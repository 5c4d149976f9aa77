"""Which real engines this test run uses, and settings that point Loom at them.

`make test` starts every engine (scripts/engines/up.sh) and exports where each listens;
a test that needs an engine whose address is missing FAILS: a skipped engine is not a
passed engine. `--engines sqlite` (or LOOM_TEST_ENGINES) narrows a run on purpose.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import uuid
from pathlib import Path

from server.config import Settings, load_settings
from storage.engines import engine_names

CLUSTER = "cassandra-cluster"
"""Not an engine of a port but a deployment of one: three Cassandra nodes with login and TLS
(`scripts/engines/cassandra-cluster.sh`), for the tests that take nodes down."""

COLLECTOR = "otelcol"
"""Not a store either: the OpenTelemetry Collector the tracing tests export spans to and read
them back from (`scripts/engines/otelcol.sh`)."""

ALL_ENGINES = (*engine_names(), CLUSTER, COLLECTOR)
"""Every engine of every port (`storage.engines`), the cluster and the collector: what a full
run covers."""

_REQUIRED_ENV = {
    "bigtable": ("BIGTABLE_EMULATOR_HOST",),
    "cassandra": ("LOOM_TEST_CASSANDRA_CONTACT_POINTS", "LOOM_TEST_CASSANDRA_PORT"),
    "dynamodb": ("LOOM_TEST_DYNAMODB_ENDPOINT",),
    "sqs": ("LOOM_TEST_SQS_ENDPOINT",),
    "postgres": ("LOOM_TEST_POSTGRES_URL",),
    "mariadb": ("LOOM_TEST_MARIADB_URL",),
    CLUSTER: (
        "LOOM_TEST_CASSANDRA_CLUSTER_CONTACT_POINTS",
        "LOOM_TEST_CASSANDRA_CLUSTER_TLS_DIR",
    ),
    COLLECTOR: ("LOOM_TEST_OTELCOL_ENDPOINT", "LOOM_TEST_OTELCOL_SPANS"),
}

SOURCE_URL_ENV = {"postgres": "LOOM_TEST_POSTGRES_URL", "mariadb": "LOOM_TEST_MARIADB_URL"}


def source_url(engine: str, data_dir: Path) -> str:
    """The SQLAlchemy URL of an iteration source on `engine` (a SQLite file in `data_dir`)."""
    if engine == "sqlite":
        return f"sqlite+aiosqlite:///{data_dir / unique('source')}.sqlite3"
    require(engine)
    return os.environ[SOURCE_URL_ENV[engine]]


REPO = Path(__file__).resolve().parents[1]


def engines_dir() -> Path:
    """Where the engines this run talks to keep their state: what `scripts/engines/up.sh`
    exported (another worktree's `.engines`, a CI run's), else this checkout's."""
    return Path(os.environ.get("LOOM_TEST_ENGINES_DIR") or REPO / ".engines")


class EngineMissing(RuntimeError):
    """An engine the run was asked to cover is not reachable."""


def require(engine: str) -> None:
    """Fails loudly when `engine`'s address was not exported by scripts/engines/up.sh."""
    missing = [name for name in _REQUIRED_ENV.get(engine, ()) if not os.environ.get(name)]
    if missing:
        raise EngineMissing(
            f"engine {engine!r} is not running: {', '.join(missing)} unset "
            "(run `make engines-up && source .engines/env`, or narrow with --engines)"
        )


def unique(prefix: str) -> str:
    """A short unique name for a table prefix, keyspace or data directory."""
    return f"{prefix}{uuid.uuid4().hex[:10]}"


KEYSPACES: list[str] = []
"""Keyspaces on the test node named by `settings_for` and `server_env`; `tests/conftest.py`
hands those of a module to `DROPPER` once it is done, so the single node holds about a
module's keyspaces at a time, not the whole run's: every keyspace costs the node heap
(its tables' metadata and memtables), and a run's few hundred filled a 3 GiB heap."""


class KeyspaceDropper:
    """Drops keyspaces on the test node one at a time, in a thread of its own.

    A drop costs the node about 0.15 s per table (it flushes and unloads each), so a
    module's dozens of keyspaces took 30-50 s of waiting at its end. Here the run goes on
    while they go. One at a time, because the node applies schema changes in turn: a test
    creating its keyspace waits behind at most one drop, never behind a module's backlog.
    Best effort: a keyspace never created is no error, and a drop that fails only leaves
    the keyspace behind (said on stderr).
    """

    def __init__(self) -> None:
        self._names: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def drop(self, names: list[str]) -> None:
        """Queues `names` for dropping (nothing to do without a test node)."""
        if not names or not os.environ.get("LOOM_TEST_CASSANDRA_CONTACT_POINTS"):
            return
        for name in names:
            self._names.put(name)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="keyspace-dropper", daemon=True)
            self._thread.start()

    def wait(self, timeout_s: float = 600.0) -> None:
        """Returns once every queued keyspace is dropped (the end of the run waits here, so
        the node is left as the run found it)."""
        if self._thread is None:
            return
        self._names.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            print(f"keyspace drops still running after {timeout_s:.0f} s", file=sys.stderr)
        self._thread = None

    def _run(self) -> None:
        from cassandra.cluster import Cluster

        points = os.environ["LOOM_TEST_CASSANDRA_CONTACT_POINTS"].split(",")
        port = int(os.environ.get("LOOM_TEST_CASSANDRA_PORT", "9042"))
        cluster = Cluster(points, port=port)
        try:
            session = cluster.connect()
        except Exception as exc:
            print(f"could not connect to drop keyspaces: {exc}", file=sys.stderr)
            session = None
        try:
            while (name := self._names.get()) is not None:
                if session is None:
                    continue
                try:
                    session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=120)
                except Exception as exc:
                    print(f"could not drop keyspace {name}: {exc}", file=sys.stderr)
        finally:
            cluster.shutdown()


DROPPER = KeyspaceDropper()
"""The run's one dropper (`tests/conftest.py` feeds it per module and waits at the end)."""


def settings_for(engine: str, data_dir: Path, **stores: str) -> Settings:
    """Settings whose stores named in `stores` live on `engine`, in a fresh namespace.

    Loaded the way `loom serve` loads them (no environment, no file), so they are final:
    the chosen engines are checked and their defaults applied (the Inbox fan-out's pacing).
    """
    require(engine)
    for store_engine in stores.values():
        require(store_engine)
    namespace = unique("t")
    if "cassandra" in {engine, *stores.values()}:
        KEYSPACES.append(f"loom_{namespace}")
    return load_settings(
        env={},
        overrides={
            "server": {"port": 0, "use_uvloop": False, "grace_s": 1.0},
            "sqlite": {"data_dir": str(data_dir / namespace), "synchronous": "NORMAL"},
            "bigtable": {
                "project": "loom-test",
                "instance": "loom-test",
                "table_prefix": f"{namespace}-",
                "create_tables": True,
                # The suite asserts behaviour, not speed: 4 s bounds a serving process's calls
                # below their deadlines, but dozens of concurrent weaves against the emulator
                # on a loaded 2-core CI machine can queue past it (tests of a hung engine set
                # their own bound).
                "request_timeout_s": 30.0,
            },
            "cassandra": {
                "contact_points": os.environ.get("LOOM_TEST_CASSANDRA_CONTACT_POINTS", "127.0.0.1"),
                "port": int(os.environ.get("LOOM_TEST_CASSANDRA_PORT", "9042")),
                "keyspace": f"loom_{namespace}",
                "create_schema": True,
            },
            "dynamodb": {
                "endpoint_url": os.environ.get("LOOM_TEST_DYNAMODB_ENDPOINT", ""),
                "table_prefix": f"{namespace}-",
                "create_tables": True,
            },
            "sqs": {
                "endpoint_url": os.environ.get("LOOM_TEST_SQS_ENDPOINT", ""),
                "queue_prefix": f"{namespace}-",
                "create_queues": True,
            },
            "storage": stores,
        },
    )


def server_env(**stores: str) -> dict[str, str]:
    """LOOM_* variables for a `loom serve` process whose named stores live on the named
    engines, in a fresh namespace (keyspace, table prefixes). Reuse the same dict to restart
    a server on the same data."""
    for engine in stores.values():
        require(engine)
    namespace = unique("p")
    env = {f"LOOM_STORAGE__{store.upper()}": engine for store, engine in stores.items()}
    engines = set(stores.values())
    if "cassandra" in engines:
        KEYSPACES.append(f"loom_{namespace}")
        env |= {
            "LOOM_CASSANDRA__CONTACT_POINTS": os.environ["LOOM_TEST_CASSANDRA_CONTACT_POINTS"],
            "LOOM_CASSANDRA__PORT": os.environ["LOOM_TEST_CASSANDRA_PORT"],
            "LOOM_CASSANDRA__KEYSPACE": f"loom_{namespace}",
            "LOOM_CASSANDRA__CREATE_SCHEMA": "true",
        }
    if "bigtable" in engines:
        env |= {
            "LOOM_BIGTABLE__PROJECT": "loom-test",
            "LOOM_BIGTABLE__INSTANCE": "loom-test",
            "LOOM_BIGTABLE__TABLE_PREFIX": f"{namespace}-",
            "LOOM_BIGTABLE__CREATE_TABLES": "true",
        }
    if "dynamodb" in engines:
        env |= {
            "LOOM_DYNAMODB__ENDPOINT_URL": os.environ["LOOM_TEST_DYNAMODB_ENDPOINT"],
            "LOOM_DYNAMODB__TABLE_PREFIX": f"{namespace}-",
            "LOOM_DYNAMODB__CREATE_TABLES": "true",
        }
    if "sqs" in engines:
        env |= {
            "LOOM_SQS__ENDPOINT_URL": os.environ["LOOM_TEST_SQS_ENDPOINT"],
            "LOOM_SQS__QUEUE_PREFIX": f"{namespace}-",
            "LOOM_SQS__CREATE_QUEUES": "true",
        }
    return env
