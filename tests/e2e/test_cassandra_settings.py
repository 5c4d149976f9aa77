"""A data centre the cluster does not have stops `loom serve` at start-up, naming the setting.

`local_dc` routes every statement to one data centre's nodes, and `replication` creates the
keyspace with so many replicas in each data centre named. Either naming a data centre the
cluster lacks would leave the server with no node to use, or a keyspace no write can reach a
quorum of, so it must not start. (The login and TLS settings are checked against the
authenticated cluster, in tests/reliability/test_cassandra_cluster.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engines import settings_for
from tests.serving import run_loom

pytestmark = pytest.mark.engine("cassandra")


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "LOCAL_DC",
            "nowhere",
            "cassandra.local_dc: 'nowhere' is not a data centre of the cluster (it has [",
        ),
        (
            "REPLICATION",
            "nowhere=3",
            "cassandra.replication: 'nowhere' is not a data centre of the cluster (it has [",
        ),
    ],
)
def test_an_unknown_data_centre_stops_start_up(
    tmp_path: Path, variable: str, value: str, message: str
) -> None:
    """`loom serve` exits 2 with the setting and the cluster's data centres, and never serves."""
    c = settings_for("cassandra", tmp_path).cassandra
    env = {
        "LOOM_STORAGE__THREADWEAVER_STORE": "cassandra",
        "LOOM_CASSANDRA__CONTACT_POINTS": ",".join(c.contact_points),
        "LOOM_CASSANDRA__PORT": str(c.port),
        "LOOM_CASSANDRA__KEYSPACE": c.keyspace,
        "LOOM_CASSANDRA__CREATE_SCHEMA": "true",
        f"LOOM_CASSANDRA__{variable}": value,
    }
    done = run_loom("serve", "--port", "0", "--data-dir", str(tmp_path / "d"), env=env)
    assert done.returncode == 2, done.stderr
    assert f"loom: cannot start: {message}" in done.stderr
    assert '"event": "serving"' not in done.stderr
