#!/usr/bin/env bash
# AWS DynamoDB Local (Maven Central jars + sqlite4java JNI library) on 127.0.0.1:18000.
# One shared SQLite database file under .engines/dynamodb/data (-sharedDb: every credential and
# region sees the same tables); it survives stop/start, `up.sh --fresh` wipes it.
# usage: dynamodb.sh start [--no-wait]|stop|restart|status|wait|env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
engine_init dynamodb

HOST=127.0.0.1
PORT="${LOOM_DYNAMODB_PORT:-18000}"
READY_TIMEOUT="${LOOM_DYNAMODB_TIMEOUT:-60}"
HERE="${LOOM_SCRIPTS_DIR}/dynamodb"

# Jars from Maven, the JNI library renamed to what sqlite4java looks for, and our loopback
# launcher compiled once; all cached together, keyed by the pom's content.
prepare_runtime() {
  local dir so
  dir="$(mvn_lib_dir "${HERE}/pom.xml" dynamodb-local)"
  [[ "$(uname -m)" == x86_64 ]] || die "sqlite4java on Maven Central ships linux-amd64 only"
  if [[ ! -f "${dir}/native/libsqlite4java-linux-amd64.so" ]]; then
    so="$(compgen -G "${dir}/lib/libsqlite4java-linux-amd64-*.so" | head -n1)" \
      || die "libsqlite4java-linux-amd64 missing in ${dir}/lib"
    mkdir -p "${dir}/native"
    # sqlite4java tries "sqlite4java-linux-amd64-<version>" then the unversioned name.
    cp "${so}" "${dir}/native/libsqlite4java-linux-amd64.so.tmp"
    mv "${dir}/native/libsqlite4java-linux-amd64.so.tmp" "${dir}/native/libsqlite4java-linux-amd64.so"
  fi
  if [[ ! -f "${dir}/launcher/LoopbackServerRunner.class" ]] \
      || [[ "${HERE}/LoopbackServerRunner.java" -nt "${dir}/launcher/LoopbackServerRunner.class" ]]; then
    mkdir -p "${dir}/launcher"
    "${JAVA_HOME:+${JAVA_HOME}/bin/}javac" -nowarn -d "${dir}/launcher" -cp "${dir}/lib/*" \
      "${HERE}/LoopbackServerRunner.java"
  fi
  printf '%s\n' "${dir}"
}

do_start() {
  local dir
  ensure_port_free "${HOST}" "${PORT}"
  dir="$(prepare_runtime)"
  mkdir -p "${STATE_DIR}/data"
  launch "${JAVA}" \
    "-D$(engine_marker)" \
    -Xms128m -Xmx"${LOOM_DYNAMODB_HEAP_MAX:-512m}" \
    -Djava.library.path="${dir}/native" \
    -Dloom.dynamodb.host="${HOST}" \
    -cp "${dir}/launcher:${dir}/lib/*" \
    LoopbackServerRunner \
    -port "${PORT}" -sharedDb -dbPath "${STATE_DIR}/data" -disableTelemetry
}

do_stop() { stop_engine 20; }

# Ready means a signed API call answers (the HTTP port opens before the handler is wired).
check_ready() {
  port_open "${HOST}" "${PORT}" || return 1
  "${LOOM_PYTHON}" - "http://${HOST}:${PORT}" >/dev/null 2>&1 <<'PY'
import sys
import boto3
from botocore.config import Config
client = boto3.client(
    "dynamodb", endpoint_url=sys.argv[1], region_name="us-east-1",
    aws_access_key_id="local", aws_secret_access_key="local",
    config=Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}),
)
client.list_tables()
PY
}

env_lines() { echo "export LOOM_TEST_DYNAMODB_ENDPOINT=http://${HOST}:${PORT}"; }

do_runtime() { prepare_runtime; }

engine_main "$@"
