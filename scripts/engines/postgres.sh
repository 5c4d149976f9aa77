#!/usr/bin/env bash
# PostgreSQL from Debian's packages (postgresql), as a plain process on 127.0.0.1:15432: initdb
# into .engines/postgres/data on first start (trust auth on loopback, database "loom"), kept
# across stop/start (`up.sh --fresh` wipes it). Installs the package with apt-get when missing.
# usage: postgres.sh start [--no-wait]|stop|restart|status|wait|env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
engine_init postgres

HOST=127.0.0.1
PORT="${LOOM_POSTGRES_PORT:-15432}"
READY_TIMEOUT="${LOOM_POSTGRES_TIMEOUT:-60}"
DATA="${STATE_DIR}/data"

# The server's bin dir: the one holding `postgres` (psql alone, from postgresql-client, comes
# with machines that have no server).
server_bin_dir() {
  local found
  found="$(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V | tail -n1)"
  [[ -n "${found}" ]] && dirname "${found}"
}

pg_bin() {
  local dir
  dir="$(server_bin_dir || true)"
  if [[ -z "${dir}" ]]; then
    command -v apt-get >/dev/null || die "PostgreSQL is not installed and apt-get is missing"
    say "installing Debian's postgresql (first run only)"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    dir="$(server_bin_dir)"
  fi
  printf '%s\n' "${dir}"
}

# PostgreSQL refuses to run as root: as root, the data dir belongs to the postgres user.
as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

do_start() {
  local bin
  ensure_port_free "${HOST}" "${PORT}"
  bin="$(pg_bin)"
  if [[ ! -f "${DATA}/PG_VERSION" ]]; then
    rm -rf "${DATA}"
    mkdir -p "${DATA}"
    [[ "$(id -u)" == 0 ]] && chown -R postgres: "${STATE_DIR}"
    as_owner "${bin}/initdb" -D "${DATA}" -U postgres --auth=trust -E UTF8 >>"${LOG_FILE}" 2>&1 \
      || die "initdb failed; see ${LOG_FILE}"
  fi
  [[ "$(id -u)" == 0 ]] && chown -R postgres: "${STATE_DIR}"
  # setpriv execs (no fork), so the recorded pid is the postmaster's own.
  if [[ "$(id -u)" == 0 ]]; then
    launch setpriv --reuid=postgres --regid=postgres --init-groups -- "${bin}/postgres" -D "${DATA}" -h "${HOST}" -p "${PORT}" \
      -k "${STATE_DIR}" -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
      -c "cluster_name=$(engine_marker)"
  else
    launch "${bin}/postgres" -D "${DATA}" -h "${HOST}" -p "${PORT}" -k "${STATE_DIR}" \
      -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
      -c "cluster_name=$(engine_marker)"
  fi
}

do_stop() { stop_engine 30 INT; }

check_ready() {
  port_open "${HOST}" "${PORT}" || return 1
  local bin
  bin="$(server_bin_dir)"
  "${bin}/psql" -h "${HOST}" -p "${PORT}" -U postgres -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = 'loom'" 2>/dev/null | grep -q 1 && return 0
  "${bin}/psql" -h "${HOST}" -p "${PORT}" -U postgres -d postgres -qc "CREATE DATABASE loom" \
    >/dev/null 2>&1
}

env_lines() {
  echo "export LOOM_TEST_POSTGRES_URL=postgresql+asyncpg://postgres@${HOST}:${PORT}/loom"
}

engine_main "$@"
