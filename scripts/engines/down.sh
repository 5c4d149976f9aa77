#!/usr/bin/env bash
# Stops local engines by PID (TERM, then KILL after a per-engine timeout) and drops their lines
# from <repo>/.engines/env. Data dirs are kept (up.sh --fresh wipes them).
#   scripts/engines/down.sh [engine...]     default: every engine that has a script here
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "${HERE}/lib.sh"

ALL_ENGINES=(otelcol cassandra-cluster mariadb postgres sqs dynamodb cassandra bigtable)
engines=("$@")
if ((${#engines[@]} == 0)); then
  for e in "${ALL_ENGINES[@]}"; do
    [[ -x "${HERE}/${e}.sh" ]] && engines+=("${e}")
  done
fi

rc=0
for e in "${engines[@]}"; do
  [[ -x "${HERE}/${e}.sh" ]] || { say "unknown engine '${e}'"; rc=1; continue; }
  if "${HERE}/${e}.sh" stop; then
    env_unset "${e}"
  else
    rc=1
  fi
done
exit "${rc}"
