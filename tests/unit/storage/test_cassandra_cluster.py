"""What the Cassandra adapter decides without a cluster: which statements may run twice (and so
be speculated and retried), the keyspace's replication clause, and the settings an operator
gets wrong (a consistency level or a replication map), each refused naming the setting."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from server.config import load_settings
from storage.cassandra.cluster import (
    CONDITIONAL,
    idempotent,
    live_hosts,
    other_coordinator,
    replication_clause,
)
from storage.errors import StorageMisconfigured
from storage.settings import CassandraSettings

# Statements as Loom's Cassandra stores write them.
UPSERT = "INSERT INTO ks.ut_threads (ut, gid, thread_id) VALUES (?, ?, ?)"
TIMESTAMPED = "INSERT INTO ks.inbox (inbox_id, kind, thread_id) VALUES (?, ?, ?) USING TIMESTAMP ?"
CLAIM = (
    "UPDATE ks.inbox_deliveries SET updated_at_ms = ? WHERE delivery_id = ? IF updated_at_ms = ?"
)
CREATE = "INSERT INTO ks.thread_ut (gid, thread_id, ut) VALUES (?, ?, ?) IF NOT EXISTS"


@pytest.mark.parametrize("cql", [UPSERT, TIMESTAMPED, "SELECT ut FROM ks.thread_ut WHERE gid = ?"])
def test_plain_upserts_and_reads_may_run_twice(cql: str) -> None:
    """A read or an upsert of fixed values is idempotent, and not conditional."""
    assert idempotent(cql)
    assert CONDITIONAL.search(cql) is None


@pytest.mark.parametrize(
    "cql",
    [
        CLAIM,
        CREATE,
        "DELETE FROM ks.t WHERE k = ? IF EXISTS",
        "UPDATE ks.c SET hits = hits + ? WHERE k = ?",
        "UPDATE ks.l SET items = [?] + items WHERE k = ?",
    ],
)
def test_conditional_writes_and_increments_are_never_speculated(cql: str) -> None:
    """A conditional write (Paxos), a counter or a list prepend is not idempotent."""
    assert not idempotent(cql)


def test_only_conditional_writes_are_conditional() -> None:
    """The conditional-write path (two attempts on different coordinators) is for LWTs only."""
    assert CONDITIONAL.search(CLAIM)
    assert CONDITIONAL.search(CREATE)
    assert not CONDITIONAL.search("UPDATE ks.c SET hits = hits + ? WHERE k = ?")


def test_replication_clause_is_a_topology_map_or_a_simple_factor() -> None:
    """Named data centres give NetworkTopologyStrategy; none gives SimpleStrategy."""
    assert replication_clause(CassandraSettings(replication={"dc1": 3, "dc2": 2})) == (
        "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 2}"
    )
    assert replication_clause(CassandraSettings(replication_factor=3)) == (
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    with pytest.raises(StorageMisconfigured, match=r"^cassandra\.replication: invalid"):
        replication_clause(CassandraSettings(replication={"dc1': 3}; DROP": 1}))


def test_defaults_are_local_quorum_and_local_serial() -> None:
    """Out of the box, every statement survives one node of three down in the local DC."""
    c = load_settings(env={}).cassandra
    assert (c.read_consistency, c.write_consistency, c.serial_consistency) == (
        "LOCAL_QUORUM",
        "LOCAL_QUORUM",
        "LOCAL_SERIAL",
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("READ_CONSISTENCY", "QUORM", r"cassandra\.read_consistency: 'QUORM' is not one of"),
        ("READ_CONSISTENCY", "EACH_QUORUM", r"cassandra\.read_consistency: 'EACH_QUORUM'"),
        ("SERIAL_CONSISTENCY", "QUORUM", r"cassandra\.serial_consistency: 'QUORUM'"),
        ("REPLICATION", "dc1", r"cassandra\.replication: 'dc1' is not of the form"),
        ("REPLICATION", "dc1=three", r"cassandra\.replication\.dc1: 'three' is not a valid int"),
    ],
)
def test_a_wrong_setting_is_refused_naming_it(variable: str, value: str, message: str) -> None:
    """Loading refuses a consistency level that is not one, or a malformed replication map."""
    with pytest.raises(ValueError, match=message):
        load_settings(env={f"LOOM_CASSANDRA__{variable}": value})


def test_replication_reads_from_toml_and_environment(tmp_path: Path) -> None:
    """``{dc1 = 3}`` in TOML and ``dc1=3,dc2=2`` in the environment give the same kind of map."""
    config = tmp_path / "loom.toml"
    config.write_text('[cassandra]\nreplication = {dc1 = 3}\nlocal_dc = "dc1"\n')
    assert dict(load_settings(config, env={}).cassandra.replication) == {"dc1": 3}
    env = {"LOOM_CASSANDRA__REPLICATION": "dc1=3, dc2=2"}
    assert dict(load_settings(env=env).cassandra.replication) == {"dc1": 3, "dc2": 2}


@dataclass(eq=False)
class _Host:
    """What the driver's Host tells these functions: an address, a data centre, up or not."""

    endpoint: str
    datacenter: str = "dc1"
    is_up: bool | None = True


@dataclass
class _Ring:
    """The driver's cluster metadata as these functions read it: every host, and the replicas
    of a routing key (all of them, in ring order, as with RF 3 on three nodes)."""

    hosts: list[_Host] = field(default_factory=list)

    def all_hosts(self) -> list[_Host]:
        return list(self.hosts)

    def get_replicas(self, keyspace: str, key: bytes) -> list[_Host]:
        return list(self.hosts)


@dataclass
class _Bound:
    routing_key: bytes | None = b"k"


def test_a_conditional_write_is_redirected_only_to_another_live_local_node() -> None:
    """The silent coordinator, a node the driver thinks down and a node of another data
    centre are never chosen; with none left the driver chooses (None), and `live_hosts`
    counts what a conditional write may give up early for."""
    a, b, c = _Host("a"), _Host("b", is_up=False), _Host("c")
    far = _Host("d", datacenter="dc2")
    ring = _Ring([a, b, far, c])
    assert other_coordinator(ring, "dc1", "ks", _Bound(), a) is c
    assert other_coordinator(ring, "dc1", "ks", _Bound(routing_key=None), a) is c
    assert other_coordinator(ring, "dc1", "ks", _Bound(), c) is a
    assert other_coordinator(_Ring([a, b, far]), "dc1", "ks", _Bound(), a) is None
    assert other_coordinator(_Ring([a, far]), "", "ks", _Bound(), a) is far
    assert live_hosts(ring, "dc1") == 2
    assert live_hosts(ring, "") == 3
    assert live_hosts(_Ring([a]), "dc1") == 1
