#!/usr/bin/env bash
# Starts the local engines (default: bigtable cassandra dynamodb sqs postgres mariadb
# cassandra-cluster otelcol), waits until each really answers, and writes <repo>/.engines/env.
# Already-running engines are left alone.
#   scripts/engines/up.sh [--fresh] [engine...]      then:  source .engines/env
# --fresh (or LOOM_ENGINES_FRESH=1) stops the named engines and wipes their data first.
# LOOM_ENGINES (space-separated) chooses them when none are named, so `make test` can leave one
# out: LOOM_ENGINES="bigtable cassandra dynamodb sqs postgres mariadb" make test
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "${HERE}/lib.sh"

# The cluster next to last: it is the slowest to become ready, and the others are ready by then.
# The collector last: its first start builds it (minutes with a cold Go cache) while the JVMs
# launched before it warm up.
DEFAULT_ENGINES=(bigtable cassandra dynamodb sqs postgres mariadb cassandra-cluster otelcol)
fresh="${LOOM_ENGINES_FRESH:-0}"
engines=()
for arg in "$@"; do
  case "${arg}" in
    --fresh) fresh=1 ;;
    -h | --help) sed -n '2,8p' "$0"; exit 0 ;;
    -*) die "unknown option ${arg}" ;;
    *) engines+=("${arg}") ;;
  esac
done
((${#engines[@]})) || read -r -a engines <<<"${LOOM_ENGINES:-${DEFAULT_ENGINES[*]}}"

for e in "${engines[@]}"; do
  [[ -x "${HERE}/${e}.sh" ]] || die "unknown engine '${e}' (no ${HERE}/${e}.sh)"
done

if [[ "${fresh}" == 1 ]]; then
  for e in "${engines[@]}"; do
    "${HERE}/${e}.sh" stop
    # Wipe only this engine's state dir; never follow a symlink out of .engines.
    rm -rf --one-file-system "${LOOM_ENGINES_DIR:?}/${e:?}"
    say "wiped ${LOOM_ENGINES_DIR}/${e}"
  done
fi

started_at="$(date +%s)"
# Launch everything first so the JVMs warm up in parallel, then wait on each in turn.
for e in "${engines[@]}"; do
  "${HERE}/${e}.sh" start --no-wait
done
failed=()
for e in "${engines[@]}"; do
  "${HERE}/${e}.sh" wait || failed+=("${e}")
done

if ((${#failed[@]})); then
  ENGINE="" say "FAILED: ${failed[*]} (others are up; stop with scripts/engines/down.sh)"
  exit 1
fi
ENGINE="" say "all up in $(($(date +%s) - started_at))s: ${engines[*]}"
ENGINE="" say "env file: ${LOOM_ENV_FILE}  (source it, or: eval \"\$(grep ^export ${LOOM_ENV_FILE})\")"
cat "${LOOM_ENV_FILE}"
