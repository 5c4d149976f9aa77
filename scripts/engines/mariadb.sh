#!/usr/bin/env bash
# MariaDB from Debian's packages (mariadb-server), as a plain process on 127.0.0.1:13306:
# mariadb-install-db into .engines/mariadb/data on first start, database "loom", user root
# without password on loopback; kept across stop/start (`up.sh --fresh` wipes it). Installs
# the package with apt-get when missing.
# usage: mariadb.sh start [--no-wait]|stop|restart|status|wait|env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
engine_init mariadb

HOST=127.0.0.1
PORT="${LOOM_MARIADB_PORT:-13306}"
READY_TIMEOUT="${LOOM_MARIADB_TIMEOUT:-60}"
DATA="${STATE_DIR}/data"
SOCKET="${STATE_DIR}/mariadb.sock"

ensure_installed() {
  command -v mariadbd >/dev/null || [[ -x /usr/sbin/mariadbd ]] && return 0
  command -v apt-get >/dev/null || die "MariaDB is not installed and apt-get is missing"
  say "installing Debian's mariadb-server (first run only)"
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >&2
}

do_start() {
  ensure_port_free "${HOST}" "${PORT}"
  ensure_installed
  local user=()
  [[ "$(id -u)" == 0 ]] && user=(--user=root)
  if [[ ! -d "${DATA}/mysql" ]]; then
    rm -rf "${DATA}"
    mkdir -p "${DATA}"
    mariadb-install-db --no-defaults --datadir="${DATA}" "${user[@]}" \
      --auth-root-authentication-method=normal --skip-test-db >>"${LOG_FILE}" 2>&1 \
      || die "mariadb-install-db failed; see ${LOG_FILE}"
  fi
  launch /usr/sbin/mariadbd --no-defaults "${user[@]}" --datadir="${DATA}" \
    --bind-address="${HOST}" --port="${PORT}" --socket="${SOCKET}" \
    --pid-file="${STATE_DIR}/$(engine_marker).pid" --skip-name-resolve \
    --innodb-flush-log-at-trx-commit=2 --innodb-buffer-pool-size=256M \
    --log-error="${STATE_DIR}/error.log"
}

do_stop() { stop_engine 30; }

check_ready() {
  port_open "${HOST}" "${PORT}" || return 1
  mariadb --no-defaults -h "${HOST}" -P "${PORT}" -u root -e \
    "CREATE DATABASE IF NOT EXISTS loom" >/dev/null 2>&1
}

env_lines() { echo "export LOOM_TEST_MARIADB_URL=mysql+aiomysql://root@${HOST}:${PORT}/loom"; }

engine_main "$@"
