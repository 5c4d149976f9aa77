#!/usr/bin/env bash
# ElasticMQ (SQS-compatible, Maven Central jars) on 127.0.0.1:19324. In-memory: queues and
# messages do not survive a restart.
# usage: sqs.sh start [--no-wait]|stop|restart|status|wait|env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
engine_init sqs

HOST=127.0.0.1
PORT="${LOOM_SQS_PORT:-19324}"
READY_TIMEOUT="${LOOM_SQS_TIMEOUT:-60}"
HERE="${LOOM_SCRIPTS_DIR}/sqs"

do_start() {
  local dir
  ensure_port_free "${HOST}" "${PORT}"
  dir="$(mvn_lib_dir "${HERE}/pom.xml" elasticmq)"
  sed -e "s|@PORT@|${PORT}|g" "${HERE}/elasticmq.conf" >"${STATE_DIR}/elasticmq.conf"
  launch "${JAVA}" \
    "-D$(engine_marker)" \
    -Xms64m -Xmx"${LOOM_SQS_HEAP_MAX:-256m}" \
    -Dconfig.file="${STATE_DIR}/elasticmq.conf" \
    -cp "${dir}/lib/*" \
    org.elasticmq.server.Main
}

do_stop() { stop_engine 15; }

check_ready() {
  port_open "${HOST}" "${PORT}" || return 1
  "${LOOM_PYTHON}" - "http://${HOST}:${PORT}" >/dev/null 2>&1 <<'PY'
import sys
import boto3
from botocore.config import Config
client = boto3.client(
    "sqs", endpoint_url=sys.argv[1], region_name="us-east-1",
    aws_access_key_id="local", aws_secret_access_key="local",
    config=Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}),
)
client.list_queues()
PY
}

env_lines() { echo "export LOOM_TEST_SQS_ENDPOINT=http://${HOST}:${PORT}"; }

do_runtime() { mvn_lib_dir "${HERE}/pom.xml" elasticmq; }

engine_main "$@"
