#!/usr/bin/env bash
# One Cassandra node in a container, addressed by the container's IP on the default ports (CQL
# 9042, storage 7000). The heap is MAX_HEAP_SIZE (default 1G), fixed at its maximum.
set -euo pipefail
ENGINE=cassandra
LOOM_SCRIPTS_DIR=/opt/cassandra/scripts
STATE_DIR=/var/lib/cassandra
# shellcheck disable=SC2034  # read by node.sh
JAVA=java
say() { printf '[cassandra] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }
engine_marker() { printf 'loom.engine=%s' "${ENGINE}"; }
launch() { exec "$@"; }
# shellcheck source=/dev/null
source "${LOOM_SCRIPTS_DIR}/cassandra/node.sh"
cassandra_lib() { echo /opt/cassandra/lib; }

address="$(hostname -i | awk '{print $1}')"
cassandra_render_config cassandra.yaml.in ADDRESS="${address}" SEEDS="${address}:7000" \
  STORAGE_PORT=7000 NATIVE_PORT=9042
# This node holds the only copy of every row: a write is acknowledged only once the commit log
# holds it on disk (batch), so a crashed container loses nothing it acknowledged. (The test
# engines sync every 10 s instead: their data is thrown away.)
sed -i -e 's/^commitlog_sync: periodic$/commitlog_sync: batch/' -e '/^commitlog_sync_period:/d' \
  "${STATE_DIR}/conf/cassandra.yaml"
grep -q '^commitlog_sync: batch$' "${STATE_DIR}/conf/cassandra.yaml" || die "commitlog_sync not set"
cassandra_launch "${MAX_HEAP_SIZE:-1G}" "${MAX_HEAP_SIZE:-1G}" 7199
