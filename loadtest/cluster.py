"""The three-node Cassandra cluster of ``scripts/engines/cassandra-cluster.sh``, for whatever
takes it through its states (the cluster bench, the cluster tests): a ``loom serve``
environment on it, and its nodes' control (pid, start, wait). Addresses, login and TLS
files come from what ``scripts/engines/up.sh`` exported (``.engines/env``).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

__all__ = ["cluster_env", "node", "node_pid"]

SCRIPT = Path(__file__).resolve().parents[1] / "scripts/engines/cassandra-cluster.sh"


def cluster_env(**extra: str) -> dict[str, str]:
    """LOOM_* for a `loom serve` with ThreadWeaver and Inbox on the cluster, in a fresh
    keyspace replicated three times in its data centre, logged in, over TLS with a client
    certificate; `extra` added (or replacing)."""
    tls = Path(os.environ["LOOM_TEST_CASSANDRA_CLUSTER_TLS_DIR"])
    dc = os.environ["LOOM_TEST_CASSANDRA_CLUSTER_DC"]
    env = {
        "LOOM_STORAGE__THREADWEAVER_STORE": "cassandra",
        "LOOM_STORAGE__INBOX_STORE": "cassandra",
        "LOOM_CASSANDRA__CONTACT_POINTS": os.environ["LOOM_TEST_CASSANDRA_CLUSTER_CONTACT_POINTS"],
        "LOOM_CASSANDRA__PORT": os.environ["LOOM_TEST_CASSANDRA_CLUSTER_PORT"],
        "LOOM_CASSANDRA__LOCAL_DC": dc,
        "LOOM_CASSANDRA__REPLICATION": f"{dc}=3",
        "LOOM_CASSANDRA__KEYSPACE": f"loom_c{uuid.uuid4().hex[:10]}",
        "LOOM_CASSANDRA__CREATE_SCHEMA": "true",
        "LOOM_CASSANDRA__USERNAME": os.environ["LOOM_TEST_CASSANDRA_CLUSTER_USERNAME"],
        "LOOM_CASSANDRA__PASSWORD": os.environ["LOOM_TEST_CASSANDRA_CLUSTER_PASSWORD"],
        "LOOM_CASSANDRA__TLS_CA_FILE": str(tls / "ca.pem"),
        "LOOM_CASSANDRA__TLS_CERT_FILE": str(tls / "client.pem"),
        "LOOM_CASSANDRA__TLS_KEY_FILE": str(tls / "client-key.pem"),
    }
    return env | extra


def node(command: str, *args: str) -> str:
    """`cassandra-cluster.sh <command> <args>` on the cluster this environment names (its
    state directory is ``LOOM_TEST_ENGINES_DIR``'s); its standard output."""
    engines = os.environ.get("LOOM_TEST_ENGINES_DIR")
    env = {**os.environ, "LOOM_ENGINES_DIR": engines} if engines else None
    done = subprocess.run(
        [str(SCRIPT), command, *args],
        check=True, capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    return done.stdout.strip()


def node_pid(i: int) -> int:
    """Node `i`'s process id (CalledProcessError when it is not running)."""
    return int(node("pid", str(i)).split()[-1])
