#!/usr/bin/env bash
# Apache Cassandra 5.0 single node from Maven Central jars (no tarball, no Docker), on Java 17.
# CQL on 127.0.0.1:19042, storage port 17000, JMX local-only on 17199. Data persists across
# stop/start in .engines/cassandra/ (only `up.sh --fresh` wipes it).
# usage: cassandra.sh start [--no-wait]|stop|restart|status|wait|env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
engine_init cassandra

HOST=127.0.0.1
NATIVE_PORT="${LOOM_CASSANDRA_PORT:-19042}"
STORAGE_PORT="${LOOM_CASSANDRA_STORAGE_PORT:-17000}"
JMX_PORT="${LOOM_CASSANDRA_JMX_PORT:-17199}"
# Heap fixed at its maximum (as Cassandra's own jvm options advise): G1 never resizes it
# under a write burst.
HEAP_MIN="${LOOM_CASSANDRA_HEAP_MIN:-2g}"
HEAP_MAX="${LOOM_CASSANDRA_HEAP_MAX:-2g}"
# G1 with a 20 ms pause target instead of Cassandra's 300 ms: under a 300K announcement the
# young pauses are what reads wait on, and the shorter target roughly halved the unread p99 at the
# same fan-out time (docs/benchmarks.md, "The collector's pause target"). Overridable to study the collector.
read -r -a GC_FLAGS <<<"${LOOM_CASSANDRA_GC_FLAGS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ParallelRefProcEnabled}"
# Cold start on a 2-core machine is 30-90 s; allow headroom for commit log replay after a kill.
READY_TIMEOUT="${LOOM_CASSANDRA_TIMEOUT:-180}"
HERE="${LOOM_SCRIPTS_DIR}/cassandra"
CONF_DIR="${STATE_DIR}/conf"
EXTRA_LOG="${STATE_DIR}/logs/system.log"

# From Cassandra 5.0's conf/jvm17-server.options (JPMS section): Cassandra reaches into JDK
# internals (direct buffers, JMX, attach, jamm), which Java 17 forbids unless opened explicitly.
JVM17_MODULE_FLAGS=(
  -Djdk.attach.allowAttachSelf=true
  --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
  --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
  --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
  --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
  --add-exports java.sql/java.sql=ALL-UNNAMED
  --add-exports java.base/java.lang.ref=ALL-UNNAMED
  --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
  --add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
  --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED
  --add-opens java.base/java.lang.module=ALL-UNNAMED
  --add-opens java.base/jdk.internal.loader=ALL-UNNAMED
  --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
  --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
  --add-opens java.base/jdk.internal.math=ALL-UNNAMED
  --add-opens java.base/jdk.internal.module=ALL-UNNAMED
  --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
  --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens java.base/java.io=ALL-UNNAMED
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED
  --add-opens java.base/java.lang=ALL-UNNAMED
  --add-opens java.base/java.util=ALL-UNNAMED
  # Netty settings the same file ships with (direct buffers via Unsafe, pre-4.1.75 allocator).
  -Dio.netty.tryReflectionSetAccessible=true
  -Dio.netty.allocator.useCacheForAllThreads=true
  -Dio.netty.allocator.maxOrder=11
)

render_config() {
  mkdir -p "${CONF_DIR}" "${STATE_DIR}/logs" "${STATE_DIR}/triggers"
  sed -e "s|@STATE@|${STATE_DIR}|g" \
      -e "s|@STORAGE_PORT@|${STORAGE_PORT}|g" \
      -e "s|@NATIVE_PORT@|${NATIVE_PORT}|g" \
      "${HERE}/cassandra.yaml.in" >"${CONF_DIR}/cassandra.yaml"
  cp "${HERE}/logback.xml" "${CONF_DIR}/logback.xml"
}

do_start() {
  local lib jamm
  ensure_port_free "${HOST}" "${NATIVE_PORT}"
  ensure_port_free "${HOST}" "${STORAGE_PORT}"
  lib="$(mvn_lib_dir "${HERE}/pom.xml" cassandra)/lib"
  jamm="$(compgen -G "${lib}/jamm-*.jar" | head -n1)" || die "jamm jar missing in ${lib}"
  render_config
  launch "${JAVA}" \
    "-D$(engine_marker)" \
    -Xms"${HEAP_MIN}" -Xmx"${HEAP_MAX}" -Xss256k \
    "${GC_FLAGS[@]}" \
    -XX:+ExitOnOutOfMemoryError -XX:+PerfDisableSharedMem \
    -Djava.net.preferIPv4Stack=true \
    "${JVM17_MODULE_FLAGS[@]}" \
    -javaagent:"${jamm}" \
    -Dcassandra-foreground=yes \
    -Dcassandra.config="file://${CONF_DIR}/cassandra.yaml" \
    -Dcassandra.storagedir="${STATE_DIR}" \
    -Dcassandra.logdir="${STATE_DIR}/logs" \
    -Dcassandra.triggers_dir="${STATE_DIR}/triggers" \
    -Dlogback.configurationFile="file://${CONF_DIR}/logback.xml" \
    -Dcassandra.jmx.local.port="${JMX_PORT}" \
    -Dcassandra.skip_wait_for_gossip_to_settle=0 \
    -Dcassandra.ring_delay_ms=1000 \
    -Dcassandra.superuser_setup_delay_ms=0 \
    -cp "${CONF_DIR}:${lib}/*" \
    org.apache.cassandra.service.CassandraDaemon
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

engine_main "$@"
