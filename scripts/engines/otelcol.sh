#!/usr/bin/env bash
# An OpenTelemetry Collector (otelcol/main.go: the OTLP receiver and the file exporter, built
# from the Go module proxy at otelcol/go.mod's versions) on 127.0.0.1:14317, OTLP over gRPC.
# Every span it receives is appended as an OTLP/JSON line to .engines/otelcol/spans.jsonl,
# which tests/e2e/test_tracing.py reads back. The spans file is emptied at every start.
# The binary is cached under ~/.cache/loom/bin, keyed by the sources' hash: the first start
# builds it (a few minutes with an empty Go cache), later starts reuse it.
# usage: otelcol.sh start [--no-wait]|stop|restart|status|wait|env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
engine_init otelcol
export PATH="${PATH}:/usr/local/go/bin"

HOST=127.0.0.1
PORT="${LOOM_OTELCOL_PORT:-14317}"
READY_TIMEOUT="${LOOM_OTELCOL_TIMEOUT:-30}"
HERE="${LOOM_SCRIPTS_DIR}/otelcol"
SPANS="${STATE_DIR}/spans.jsonl"

# Builds (once per source hash) and prints the collector binary's path.
collector_bin() {
  local sum bin
  sum="$(cat "${HERE}/go.mod" "${HERE}/go.sum" "${HERE}/main.go" | sha256sum | cut -c1-16)"
  bin="${LOOM_CACHE_DIR}/bin/loom-otelcol-${sum}"
  if [[ ! -x "${bin}" ]]; then
    command -v go >/dev/null || die "go not found (needed once to build the collector)"
    say "building the collector into ${bin} (first run only; a few minutes with a cold Go cache)"
    mkdir -p "${LOOM_CACHE_DIR}/bin"
    (cd "${HERE}" && go build -trimpath -o "${bin}.tmp.$$" .) >&2 || die "go build failed"
    mv -f "${bin}.tmp.$$" "${bin}"
  fi
  printf '%s\n' "${bin}"
}

do_start() {
  local bin
  ensure_port_free "${HOST}" "${PORT}"
  bin="$(collector_bin)"
  : >"${SPANS}"
  sed -e "s|@PORT@|${PORT}|g" -e "s|@SPANS@|${SPANS}|g" "${HERE}/config.yaml" \
    >"${STATE_DIR}/config.yaml"
  # The ownership marker goes into argv[0], as for cbtemulator (no extra argument is accepted).
  # shellcheck disable=SC2016
  launch bash -c 'exec -a "loom-otelcol[$0]" "$@"' "$(engine_marker)" "${bin}" \
    --config "${STATE_DIR}/config.yaml"
}

do_stop() { stop_engine 10; }

check_ready() { port_open "${HOST}" "${PORT}"; }

env_lines() {
  echo "export LOOM_TEST_OTELCOL_ENDPOINT=http://${HOST}:${PORT}"
  echo "export LOOM_TEST_OTELCOL_SPANS=${SPANS}"
}

do_runtime() { collector_bin; }

engine_main "$@"
