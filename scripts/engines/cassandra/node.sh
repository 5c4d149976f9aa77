# shellcheck shell=bash
# One Cassandra 5.0 node as a plain JVM process: the jars, the command line, the config. Shared by
# cassandra.sh (the single node) and cassandra-cluster.sh (N nodes on 127.0.0.1x). Sourced after
# lib.sh; acts on lib.sh's current engine (STATE_DIR, PID_FILE, LOG_FILE, engine_marker).

CASSANDRA_HERE="${LOOM_SCRIPTS_DIR}/cassandra"

# G1 with a 20 ms pause target instead of Cassandra's 300 ms: under a 300K announcement the
# young pauses are what reads wait on, and the shorter target roughly halved the unread p99 at the
# same fan-out time (docs/benchmarks.md, "The collector's pause target"). Overridable to study the collector.
read -r -a CASSANDRA_GC_FLAGS <<<"${LOOM_CASSANDRA_GC_FLAGS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ParallelRefProcEnabled}"

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

# The directory of Cassandra's jars (resolved from Maven once, then cached).
cassandra_lib() { printf '%s/lib\n' "$(mvn_lib_dir "${CASSANDRA_HERE}/pom.xml" cassandra)"; }

# cassandra_render_config TEMPLATE [NAME=VALUE...]: STATE_DIR/conf/cassandra.yaml is common.yaml.in
# followed by TEMPLATE (the settings of this kind of engine), with @STATE@ and every @NAME@
# replaced; a placeholder left over is an error, not a config Cassandra half understands.
cassandra_render_config() {
  local template="$1" pair expressions
  shift
  expressions=(-e "s|@STATE@|${STATE_DIR}|g")
  for pair in "$@"; do
    expressions+=(-e "s|@${pair%%=*}@|${pair#*=}|g")
  done
  mkdir -p "${STATE_DIR}/conf" "${STATE_DIR}/logs" "${STATE_DIR}/triggers"
  sed "${expressions[@]}" "${CASSANDRA_HERE}/common.yaml.in" "${CASSANDRA_HERE}/${template}" \
    >"${STATE_DIR}/conf/cassandra.yaml"
  if grep -n '@[A-Z_]\+@' "${STATE_DIR}/conf/cassandra.yaml" >&2; then
    die "unreplaced placeholder in ${STATE_DIR}/conf/cassandra.yaml"
  fi
  cp "${CASSANDRA_HERE}/logback.xml" "${STATE_DIR}/conf/logback.xml"
}

# Cassandra warns at start when vm.max_map_count is below 1048575 (it mmaps every sstable
# segment). Raised when we may (root); never a reason to fail.
raise_max_map_count() {
  local current
  current="$(cat /proc/sys/vm/max_map_count 2>/dev/null)" || return 0
  ((current >= 1048575)) && return 0
  sysctl -q -w vm.max_map_count=1048575 >/dev/null 2>&1 ||
    say "vm.max_map_count is ${current} and could not be raised (Cassandra will warn; harmless for tests)"
}

# cassandra_launch HEAP_MIN HEAP_MAX JMX_PORT [JVM flag...]: starts CassandraDaemon on the config
# rendered in STATE_DIR/conf, with its data, logs and pid under STATE_DIR.
cassandra_launch() {
  local heap_min="$1" heap_max="$2" jmx_port="$3" lib jamm conf="${STATE_DIR}/conf"
  shift 3
  lib="$(cassandra_lib)"
  jamm="$(compgen -G "${lib}/jamm-*.jar" | head -n1)" || die "jamm jar missing in ${lib}"
  raise_max_map_count
  launch "${JAVA}" \
    "-D$(engine_marker)" \
    -Xms"${heap_min}" -Xmx"${heap_max}" -Xss256k \
    "${CASSANDRA_GC_FLAGS[@]}" \
    -XX:+ExitOnOutOfMemoryError -XX:+PerfDisableSharedMem \
    -Djava.net.preferIPv4Stack=true \
    "${JVM17_MODULE_FLAGS[@]}" \
    -javaagent:"${jamm}" \
    -Dcassandra-foreground=yes \
    -Dcassandra.config="file://${conf}/cassandra.yaml" \
    -Dcassandra.storagedir="${STATE_DIR}" \
    -Dcassandra.logdir="${STATE_DIR}/logs" \
    -Dcassandra.triggers_dir="${STATE_DIR}/triggers" \
    -Dlogback.configurationFile="file://${conf}/logback.xml" \
    -Dcassandra.jmx.local.port="${jmx_port}" \
    -Dcassandra.skip_wait_for_gossip_to_settle=0 \
    -Dcassandra.ring_delay_ms=1000 \
    -Dcassandra.superuser_setup_delay_ms=0 \
    "$@" \
    -cp "${conf}:${lib}/*" \
    org.apache.cassandra.service.CassandraDaemon
}
