#!/usr/bin/env bash
# First start: initdb (password authentication over TCP, from POSTGRES_PASSWORD_FILE), the
# database POSTGRES_DB, then every /docker-entrypoint-initdb.d/*.sql. Every start: the server in
# the foreground on all interfaces (SIGINT: a fast shutdown that keeps every committed row).
set -euo pipefail
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-${user}}"
if [[ ! -s "${PGDATA}/PG_VERSION" ]]; then
  [[ -r "${POSTGRES_PASSWORD_FILE:-}" ]] || { echo "POSTGRES_PASSWORD_FILE is not readable" >&2; exit 1; }
  initdb -D "${PGDATA}" --username="${user}" --pwfile="${POSTGRES_PASSWORD_FILE}" \
    --auth-host=scram-sha-256 --auth-local=trust >/dev/null
  echo "host all all all scram-sha-256" >>"${PGDATA}/pg_hba.conf"
  pg_ctl -D "${PGDATA}" -o "-c listen_addresses=''" -w start >/dev/null
  [[ "${db}" == postgres ]] || createdb --username="${user}" "${db}"
  for script in /docker-entrypoint-initdb.d/*.sql; do
    [[ -e "${script}" ]] || continue
    psql -v ON_ERROR_STOP=1 --username="${user}" --dbname="${db}" -q -f "${script}"
  done
  pg_ctl -D "${PGDATA}" -m fast -w stop >/dev/null
fi
exec postgres -D "${PGDATA}" -c listen_addresses='*'
