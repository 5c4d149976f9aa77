#!/usr/bin/env bash
# Apache Cassandra 5.0 as a real N-node cluster (default 3) of plain processes, for tests that need
# replication, node failures, authentication and TLS. Same jars and JVM command line as the single
# node (cassandra/node.sh). Node i listens on its own loopback address 127.0.0.(10+i) with the
# default ports (CQL 9042, storage 7000); JMX is local-only on 127.0.0.1:(7300+i). Always secured:
# PasswordAuthenticator (login loom / loom-test-password) and client TLS with client certificates
# (certificates in .engines/cassandra-cluster/tls/). Data persists across stop/start in
# .engines/cassandra-cluster/node<i>/ (only `up.sh --fresh cassandra-cluster` wipes it).
# usage: cassandra-cluster.sh start [--no-wait]|stop|restart|status|wait|env
#        cassandra-cluster.sh start-node I|stop-node I|pid I
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=cassandra/node.sh
source "${LOOM_SCRIPTS_DIR}/cassandra/node.sh"
engine_init cassandra-cluster
CLUSTER_DIR="${STATE_DIR}"

NODES="${LOOM_CASSANDRA_CLUSTER_NODES:-3}"
# Each node is a JVM of about 1 GiB: more than a handful does not fit a test machine.
[[ "${NODES}" =~ ^[1-9]$ ]] || die "LOOM_CASSANDRA_CLUSTER_NODES must be 1 to 9 (got '${NODES}')"
NATIVE_PORT="${LOOM_CASSANDRA_CLUSTER_PORT:-9042}"
STORAGE_PORT="${LOOM_CASSANDRA_CLUSTER_STORAGE_PORT:-7000}"
# JMX binds 127.0.0.1 whatever listen_address is, so each node needs its own port there; 7301.. is
# clear of the single node (17199) and every other engine.
JMX_PORT_BASE="${LOOM_CASSANDRA_CLUSTER_JMX_PORT_BASE:-7300}"
# Three of these JVMs share the machine with the other engines: 768 MiB each, fixed (Xms = Xmx, as
# for the single node). The JVM already sizes its GC and JIT threads from the 2 cores it sees.
HEAP="${LOOM_CASSANDRA_CLUSTER_HEAP:-768m}"
# The nodes start together on 2 shared cores: all UN 21-40 s after launch here, but a node has
# taken up to 100 s on a loaded machine.
READY_TIMEOUT="${LOOM_CASSANDRA_CLUSTER_TIMEOUT:-300}"
DC=dc1
RACK=rack1
TOKENS_PER_NODE=16
USERNAME=loom
PASSWORD=loom-test-password
# system_auth is replicated to every node (up to 3): one node down never breaks a login.
AUTH_RF=$((NODES < 3 ? NODES : 3))
TLS_DIR="${CLUSTER_DIR}/tls"
# Protects only the test keystores, whose keys are in tls/ as PEM anyway.
STORE_PASSWORD=loom-test-keystore

node_address() { printf '127.0.0.%d\n' $((10 + $1)); }

node_list() {
  local i separator="" suffix="${1:-}"
  for ((i = 1; i <= NODES; i++)); do
    printf '%s%s%s' "${separator}" "$(node_address "${i}")" "${suffix}"
    separator=,
  done
  echo
}

# Every node is a seed, so all can start at once: a seed never bootstraps, which is right for an
# empty cluster (nothing to stream; tokens are fixed, below), and no node waits for another to be
# up first. A restarted node (start-node) finds a live seed whichever other node is down, instead
# of depending on node1.
seeds() { node_list ":${STORAGE_PORT}"; }

# node_tokens I: node I's share of N*16 evenly spaced Murmur3 tokens, interleaved (node I takes
# positions I-1, I-1+N, ...), half a step off the ring's ends. Fixed tokens mean no token
# allocation at start: nodes started together cannot collide, and each owns exactly 1/N.
node_tokens() {
  local total=$((NODES * TOKENS_PER_NODE)) step k tokens=()
  step=$((((1 << 62) / total) * 4))
  for ((k = $1 - 1; k < total; k += NODES)); do
    tokens+=("$(((k - total / 2) * step + step / 2))")
  done
  local IFS=,
  printf '%s\n' "${tokens[*]}"
}

# The context lib.sh's helpers act on: the cluster (its lock, its env lines) or one node (its
# pid file, log, state dir). A node's ENGINE, which names its process marker, must not begin with
# "cassandra": lib.sh matches markers as substrings, and the single node's is loom.engine=cassandra.
use_cluster() {
  engine_init cassandra-cluster
  EXTRA_LOG=""
}

use_node() {
  if [[ ! "$1" =~ ^[1-9]$ ]] || (($1 > NODES)); then die "no node '$1' (nodes are 1 to ${NODES})"; fi
  NODE="$1"
  ENGINE="node${NODE}.cassandra-cluster"
  STATE_DIR="${CLUSTER_DIR}/node${NODE}"
  PID_FILE="${STATE_DIR}/pid"
  LOG_FILE="${STATE_DIR}/cassandra.log"
  EXTRA_LOG="${STATE_DIR}/logs/system.log"
  ADDRESS="$(node_address "${NODE}")"
  JMX_PORT=$((JMX_PORT_BASE + NODE))
  mkdir -p "${STATE_DIR}"
}

# The cluster's size is fixed at its first start: a node added later would be a seed that never
# bootstraps, owning tokens without their data.
check_size() {
  local recorded="${CLUSTER_DIR}/nodes"
  if [[ -s "${recorded}" && "$(<"${recorded}")" != "${NODES}" ]]; then
    die "this cluster was created with $(<"${recorded}") nodes, not ${NODES}; wipe it to change: up.sh --fresh cassandra-cluster"
  fi
  echo "${NODES}" >"${recorded}"
}

# Test certificates, made once: a CA, the nodes' certificate (IP SANs of every node and
# 127.0.0.1), a client certificate, and an unrelated CA that tests use as the wrong one. PEM for
# Python clients; the nodes' PKCS12 keystore and truststore made with keytool.
make_tls() {
  [[ -f "${TLS_DIR}/.complete" ]] && return 0
  local tmp="${TLS_DIR}.tmp.$$" sans="IP:127.0.0.1" i
  for ((i = 1; i <= NODES; i++)); do sans+=",IP:$(node_address "${i}")"; done
  say "making test certificates in ${TLS_DIR}"
  rm -rf "${tmp}"
  mkdir -p "${tmp}"
  if ! (cd "${tmp}" && make_tls_files "${sans}") >"${tmp}/make.log" 2>&1; then
    cat "${tmp}/make.log" >&2
    die "could not make the test certificates (log above)"
  fi
  rm -f "${tmp}/make.log"
  touch "${tmp}/.complete"
  rm -rf "${TLS_DIR}"
  mv "${tmp}" "${TLS_DIR}"
}

make_tls_files() {
  local sans="$1"
  tls_ca ca "Loom test CA"
  tls_ca wrong-ca "Loom unrelated test CA"
  tls_leaf node "loom-cassandra-cluster" serverAuth,clientAuth "subjectAltName=${sans}"
  tls_leaf client "${USERNAME}" clientAuth ""
  openssl pkcs12 -export -in node.pem -inkey node-key.pem -certfile ca.pem -name node \
    -passout "pass:${STORE_PASSWORD}" -out node-openssl.p12
  keytool -importkeystore -noprompt -srckeystore node-openssl.p12 -srcstoretype PKCS12 \
    -srcstorepass "${STORE_PASSWORD}" -destkeystore keystore.p12 -deststoretype PKCS12 \
    -deststorepass "${STORE_PASSWORD}"
  keytool -importcert -noprompt -alias loom-test-ca -file ca.pem -keystore truststore.p12 \
    -storetype PKCS12 -storepass "${STORE_PASSWORD}"
  rm -f node-openssl.p12
  # The last word: set -e does not reach inside make_tls's `if`, so check what was made.
  openssl verify -CAfile ca.pem node.pem client.pem &&
    keytool -list -keystore keystore.p12 -storepass "${STORE_PASSWORD}" &&
    keytool -list -keystore truststore.p12 -storepass "${STORE_PASSWORD}"
}

# tls_ca NAME COMMON_NAME: a self-signed CA, NAME.pem and NAME-key.pem.
tls_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -subj "/CN=$2" \
    -keyout "$1-key.pem" -out "$1.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}

# tls_leaf NAME COMMON_NAME EXTENDED_KEY_USAGE EXTRA_EXTENSION: NAME.pem signed by ca.pem.
tls_leaf() {
  openssl req -new -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$1-key.pem" -out "$1.csr"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -sha256 -days 3650 \
    -set_serial "0x$(openssl rand -hex 16)" -out "$1.pem" -extfile <(
      printf '%s\n' basicConstraints=CA:FALSE keyUsage=critical,digitalSignature,keyEncipherment \
        "extendedKeyUsage=$3" subjectKeyIdentifier=hash authorityKeyIdentifier=keyid,issuer "$4"
    )
  rm -f "$1.csr"
}

# Launches the current node unless it runs already; its config is rendered on every start.
launch_node() {
  local pid
  if pid="$(running_pid)"; then
    say "already running (pid ${pid})"
    return 0
  fi
  ensure_port_free "${ADDRESS}" "${NATIVE_PORT}"
  ensure_port_free "${ADDRESS}" "${STORAGE_PORT}"
  ensure_port_free 127.0.0.1 "${JMX_PORT}"
  cassandra_render_config cluster.yaml.in ADDRESS="${ADDRESS}" SEEDS="$(seeds)" \
    STORAGE_PORT="${STORAGE_PORT}" NATIVE_PORT="${NATIVE_PORT}" TOKENS="$(node_tokens "${NODE}")" \
    TLS="${TLS_DIR}" STORE_PASSWORD="${STORE_PASSWORD}"
  printf 'dc=%s\nrack=%s\n' "${DC}" "${RACK}" >"${STATE_DIR}/conf/cassandra-rackdc.properties"
  # A node that misses a schema push learns the change by pulling it, by default up to a minute
  # later (migration delay, then a periodic pull every minute), and every schema change waits
  # for all three to agree. A CI rehearsal's cluster started with one node that never received
  # a push from node 1 (5.0.9; its pulls ~60-70 s after each change): a fresh keyspace's schema
  # then took minutes and two tests failed. Pulling within seconds bounds that miss.
  cassandra_launch "${HEAP}" "${HEAP}" "${JMX_PORT}" \
    -Dcassandra.migration_delay_ms=1000 -Dcassandra.schema_pull_interval_ms=2000
  say "started (pid $(running_pid || echo '?')), log: ${EXTRA_LOG}"
}

# ring JMX_PORT: "<status><state> <address>" per node (UN = up, normal), as the node behind that
# JMX port sees the ring: nodetool status, run from the same jars (a small JVM, about 1.5 s). It
# needs the same module flags; its history file goes to the cluster's directory, not ~/.cassandra.
ring() {
  "${JAVA}" -Xmx128m -Xss256k -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "${JVM17_MODULE_FLAGS[@]}" \
    -Duser.home="${CLUSTER_DIR}" -cp "$(cassandra_lib)/*" org.apache.cassandra.tools.NodeTool \
    -h 127.0.0.1 -p "$1" status 2>/dev/null | awk '$1 ~ /^[UD][NLJM]$/ { print $1, $2 }'
}

node_running() { (use_node "$1" && running_pid >/dev/null); }

all_running() {
  local i
  for ((i = 1; i <= NODES; i++)); do node_running "${i}" || return 1; done
}

# Ready: every node's CQL port is open (the last thing a node starts) and node1's nodetool status
# lists all N nodes UN. Authenticated CQL on every node is checked by the setup that follows.
cluster_ready() {
  local i
  for ((i = 1; i <= NODES; i++)); do
    port_open "$(node_address "${i}")" "${NATIVE_PORT}" || return 1
  done
  [[ "$(ring $((JMX_PORT_BASE + 1)) | grep -c '^UN ')" == "${NODES}" ]]
}

# A restarted node is ready when it answers CQL (as loom, over TLS) and sees every node whose
# process runs as UN, so it can coordinate QUORUM requests at once.
node_ready() {
  local i running=0
  port_open "${ADDRESS}" "${NATIVE_PORT}" || return 1
  cql ping "${ADDRESS}" 2>/dev/null || return 1
  for ((i = 1; i <= NODES; i++)); do
    if node_running "${i}"; then running=$((running + 1)); fi
  done
  (($(ring "${JMX_PORT}" | grep -c '^UN ') >= running))
}

# cql ping HOST | cql setup HOST...: the Python half, with the repository's cassandra-driver.
# Every connection is TLS with the client certificate, checks the node's certificate against
# ca.pem and its address against the certificate's IP SANs, and talks to one node alone.
# setup: logs in as loom (a cluster set up before) or else as the default superuser
# cassandra/cassandra, which a node creates only a moment after it joins, so both are retried
# until the timeout; creates the role loom; replicates system_auth to AUTH_RF nodes of dc1; reads
# every system_auth table at ALL, whose read repair copies the rows written while system_auth had
# one replica (the default superuser) to every replica; then logs in as loom on every node.
# Each step is skipped or harmless when already done, so a restart may run it again.
cql() {
  "${LOOM_PYTHON}" - "$1" "${TLS_DIR}" "${NATIVE_PORT}" "${USERNAME}" "${PASSWORD}" "${DC}" \
    "${AUTH_RF}" "${READY_TIMEOUT}" "${@:2}" <<'PY'
import logging, ssl, sys, time
logging.disable(logging.CRITICAL)
from cassandra import ConsistencyLevel
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.policies import WhiteListRoundRobinPolicy
from cassandra.query import SimpleStatement

mode, tls, port, user, password, dc, rf, timeout_s, *hosts = sys.argv[1:]
deadline = time.monotonic() + float(timeout_s)

def say(message):
    print(f"[cassandra-cluster] {message}", file=sys.stderr, flush=True)

def connect(host, name, secret):
    context = ssl.create_default_context(cafile=f"{tls}/ca.pem")
    context.load_cert_chain(f"{tls}/client.pem", f"{tls}/client-key.pem")
    profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([host]),
                               request_timeout=20)
    cluster = Cluster([host], port=int(port), ssl_context=context,
                      auth_provider=PlainTextAuthProvider(name, secret),
                      execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                      connect_timeout=5, control_connection_timeout=5)
    try:
        return cluster, cluster.connect()
    except BaseException:
        cluster.shutdown()
        raise

def retried(what, attempt):
    while True:
        try:
            return attempt()
        except Exception as error:
            if time.monotonic() > deadline:
                raise SystemExit(f"{what} failed until the timeout: {error}")
            time.sleep(2)

def ping(host, name=user, secret=password):
    cluster, session = connect(host, name, secret)
    try:
        session.execute("SELECT release_version FROM system.local")
    finally:
        cluster.shutdown()

if mode == "ping":
    ping(hosts[0])
    sys.exit(0)

def login():
    for host in hosts:
        for name, secret in ((user, password), ("cassandra", "cassandra")):
            try:
                return name, *connect(host, name, secret)
            except Exception as error:
                last = error
    raise last

name, cluster, session = retried("logging in", login)
try:
    say(f"logged in as {name}")
    # The role first, while system_auth may still have its one replica: right after the
    # ALTER, the default superuser's own role is read at QUORUM from replicas not yet
    # repaired, and a statement may be refused as Unauthorized until a read repairs it.
    retried(f"creating the role {user}", lambda: session.execute(
        f"CREATE ROLE IF NOT EXISTS {user} WITH PASSWORD = %s AND LOGIN = true "
        "AND SUPERUSER = true", (password,)))
    replication = session.execute("SELECT replication FROM system_schema.keyspaces "
                                  "WHERE keyspace_name = 'system_auth'").one().replication
    if dict(replication) != {"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", dc: rf}:
        retried("replicating system_auth", lambda: session.execute(
            "ALTER KEYSPACE system_auth WITH replication = "
            f"{{'class': 'NetworkTopologyStrategy', '{dc}': {rf}}}"))
        say(f"system_auth replicated to {rf} nodes of {dc} (was {dict(replication)})")
    tables = session.execute("SELECT table_name FROM system_schema.tables "
                             "WHERE keyspace_name = 'system_auth'")
    for table in [row.table_name for row in tables]:
        statement = SimpleStatement(f"SELECT * FROM system_auth.{table}",
                                    consistency_level=ConsistencyLevel.ALL)
        retried(f"reading system_auth.{table} at ALL", lambda: list(session.execute(statement)))
finally:
    cluster.shutdown()
for host in hosts:
    retried(f"logging in as {user} on {host}", lambda: ping(host))
say(f"role {user} logs in over TLS on {', '.join(hosts)}")
PY
}

# Waits until every node is UN, then sets up security and writes the env lines.
wait_cluster() {
  local i started
  started="$(date +%s)"
  use_cluster
  if ! wait_ready "${READY_TIMEOUT}" cluster_ready all_running; then
    for ((i = 1; i <= NODES; i++)); do
      (use_node "${i}" && LOG_TAIL_LINES=15 log_tail)
    done
    return 1
  fi
  # shellcheck disable=SC2046 # one address per word
  cql setup $(node_list | tr , ' ') || die "security setup failed"
  publish_env
  say "cluster of ${NODES} ready after $(($(date +%s) - started))s"
}

status() {
  local i pid first="" running=0 ring up
  for ((i = 1; i <= NODES; i++)); do
    use_node "${i}"
    if pid="$(running_pid)"; then
      say "running (pid ${pid}) on ${ADDRESS}:${NATIVE_PORT}, JMX 127.0.0.1:${JMX_PORT}"
      running=$((running + 1))
      first="${first:-${JMX_PORT}}"
    else
      say "stopped"
    fi
  done
  use_cluster
  ((running)) || return 3
  say "ring as node $((first - JMX_PORT_BASE)) sees it (a node killed moments ago stays UN until the failure detector convicts it):"
  # Not `tee /dev/stderr`: when stderr is a file, tee would truncate it.
  ring="$(ring "${first}")"
  printf '%s\n' "${ring}" >&2
  up="$(grep -c '^UN ' <<<"${ring}")" || true
  if ((running == NODES)) && [[ "${up}" == "${NODES}" ]]; then
    say "all ${NODES} nodes running and UN"
  else
    say "NOT ready"
    return 1
  fi
}

env_lines() {
  echo "export LOOM_TEST_CASSANDRA_CLUSTER_CONTACT_POINTS=$(node_list)"
  echo "export LOOM_TEST_CASSANDRA_CLUSTER_PORT=${NATIVE_PORT}"
  echo "export LOOM_TEST_CASSANDRA_CLUSTER_DC=${DC}"
  echo "export LOOM_TEST_CASSANDRA_CLUSTER_USERNAME=${USERNAME}"
  echo "export LOOM_TEST_CASSANDRA_CLUSTER_PASSWORD=${PASSWORD}"
  echo "export LOOM_TEST_CASSANDRA_CLUSTER_TLS_DIR=${TLS_DIR}"
  echo "export LOOM_TEST_CASSANDRA_CLUSTER_NODES=${NODES}"
}

usage() {
  echo "usage: $0 start [--no-wait]|stop|restart|status|wait|env|start-node I|stop-node I|pid I" >&2
  return 2
}

main() {
  local cmd="${1:-}" i
  shift || true
  case "${cmd}" in
    start)
      lock_engine
      check_size
      make_tls
      for ((i = 1; i <= NODES; i++)); do
        use_node "${i}"
        launch_node
      done
      use_cluster
      exec 9>&-
      [[ "${1:-}" == "--no-wait" ]] || wait_cluster
      ;;
    wait) wait_cluster ;;
    stop)
      # Every node drains at once (TERM, KILL after 60 s each).
      lock_engine
      for ((i = 1; i <= NODES; i++)); do
        (use_node "${i}" && stop_engine 60) &
      done
      wait
      ;;
    restart)
      "$0" stop
      exec "$0" start "$@"
      ;;
    status) status ;;
    env) env_lines ;;
    start-node)
      (($#)) || usage
      lock_engine
      use_node "$1"
      launch_node
      exec 9>&-
      wait_ready "${READY_TIMEOUT}" node_ready
      ;;
    stop-node)
      (($#)) || usage
      lock_engine
      use_node "$1"
      stop_engine 60
      ;;
    pid)
      (($#)) || usage
      use_node "$1"
      running_pid || { say "not running"; return 1; }
      ;;
    *) usage ;;
  esac
}

main "$@"
