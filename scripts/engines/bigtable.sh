#!/usr/bin/env bash
# Cloud Bigtable emulator (cbtemulator from the Google Cloud SDK) on 127.0.0.1:18086.
# In-memory only: every start begins empty (that is how the emulator works).
# usage: bigtable.sh start [--no-wait]|stop|restart|status|wait|env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
engine_init bigtable

HOST=127.0.0.1
PORT="${LOOM_BIGTABLE_PORT:-18086}"
READY_TIMEOUT="${LOOM_BIGTABLE_TIMEOUT:-30}"

find_emulator() {
  local root candidate
  # gcloud knows where its SDK lives; the Debian package path is the fallback.
  root="$(gcloud info --format='value(installation.sdk_root)' 2>/dev/null || true)"
  for candidate in \
      ${root:+"${root}/platform/bigtable-emulator/cbtemulator"} \
      /usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator; do
    if [[ -x "${candidate}" ]]; then
      printf '%s\n' "${candidate}"
      return 0
    fi
  done
  die "cbtemulator not found (install the Google Cloud SDK component 'bigtable')"
}

do_start() {
  local bin
  bin="$(find_emulator)"
  ensure_port_free "${HOST}" "${PORT}"
  # cbtemulator rejects extra arguments, so the ownership marker goes into argv[0] instead.
  # shellcheck disable=SC2016  # $0/$@ belong to the inner shell.
  launch bash -c 'exec -a "cbtemulator[$0]" "$@"' "$(engine_marker)" "${bin}" -host "${HOST}" -port "${PORT}"
}

do_stop() { stop_engine 10; }

check_ready() { port_open "${HOST}" "${PORT}"; }

env_lines() { echo "export BIGTABLE_EMULATOR_HOST=${HOST}:${PORT}"; }

do_runtime() { dirname "$(find_emulator)"; }

engine_main "$@"
