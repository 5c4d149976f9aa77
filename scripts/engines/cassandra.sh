#!/usr/bin/env bash
# Apache Cassandra 5.0 single node from Maven Central jars (no tarball, no Docker), on Java 17.
# CQL on 127.0.0.1:19042, storage port 17000, JMX local-only on 17199. Data persists across
# stop/start in .engines/cassandra/ (only `up.sh --fresh` wipes it).
# usage: cassandra.sh start [--no-wait]|stop|restart|status|wait|env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=cassandra/node.sh
source "${LOOM_SCRIPTS_DIR}/cassandra/node.sh"
engine_init cassandra

HOST=127.0.0.1
NATIVE_PORT="${LOOM_CASSANDRA_PORT:-19042}"
STORAGE_PORT="${LOOM_CASSANDRA_STORAGE_PORT:-17000}"
JMX_PORT="${LOOM_CASSANDRA_JMX_PORT:-17199}"
# Heap fixed at its maximum (as Cassandra's own jvm options advise): G1 never resizes it
# under a write burst.
HEAP_MIN="${LOOM_CASSANDRA_HEAP_MIN:-3g}"
HEAP_MAX="${LOOM_CASSANDRA_HEAP_MAX:-3g}"
# Cold start on a 2-core machine is 30-90 s; allow headroom for commit log replay after a kill.
READY_TIMEOUT="${LOOM_CASSANDRA_TIMEOUT:-180}"
EXTRA_LOG="${STATE_DIR}/logs/system.log"

do_start() {
  ensure_port_free "${HOST}" "${NATIVE_PORT}"
  ensure_port_free "${HOST}" "${STORAGE_PORT}"
  cassandra_render_config cassandra.yaml.in ADDRESS="${HOST}" SEEDS="${HOST}:${STORAGE_PORT}" \
    STORAGE_PORT="${STORAGE_PORT}" NATIVE_PORT="${NATIVE_PORT}"
  # unsafesystem: a schema change does not flush the system tables (the commit log still holds
  # it, and `stop` drains). The suite makes a keyspace per test, and the flushes were half of
  # each one's cost. A node that must keep its schema through a power loss wants it off: this
  # is the test node only, not the cluster.
  cassandra_launch "${HEAP_MIN}" "${HEAP_MAX}" "${JMX_PORT}" -Dcassandra.unsafesystem=true
}

# Shutdown hook drains (flushes memtables, syncs the commit log): give it time before KILL.
do_stop() { stop_engine 60; }

# Ready means a real CQL round trip, not just an open port: the port opens before the node
# finishes loading schema.
check_ready() {
  port_open "${HOST}" "${NATIVE_PORT}" || return 1
  "${LOOM_PYTHON}" - "${HOST}" "${NATIVE_PORT}" >/dev/null 2>&1 <<'PY'
import logging, sys
logging.disable(logging.CRITICAL)
from cassandra.cluster import Cluster
cluster = Cluster([sys.argv[1]], port=int(sys.argv[2]), connect_timeout=3,
                  control_connection_timeout=3)
try:
    row = cluster.connect().execute("SELECT release_version FROM system.local", timeout=5).one()
    print(row.release_version)
finally:
    cluster.shutdown()
PY
}

env_lines() {
  echo "export LOOM_TEST_CASSANDRA_CONTACT_POINTS=${HOST}"
  echo "export LOOM_TEST_CASSANDRA_PORT=${NATIVE_PORT}"
}

do_runtime() { dirname "$(cassandra_lib)"; }

engine_main "$@"
