# shellcheck shell=bash
# Shared helpers for scripts/engines/*.sh. Sourced, never executed.
#
# Layout: runtime state (pid file, log, data) lives in <repo>/.engines/<engine>/, the env file in
# <repo>/.engines/env; downloads are cached under ~/.cache/loom (and ~/.m2 for Maven) so that a
# second start is fast and works offline.

LOOM_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# LOOM_ENGINES_DIR moves all of it (a test that stops an engine runs its own instance there).
LOOM_ENGINES_DIR="${LOOM_ENGINES_DIR:-${LOOM_REPO_ROOT}/.engines}"
LOOM_ENV_FILE="${LOOM_ENGINES_DIR}/env"
LOOM_CACHE_DIR="${LOOM_CACHE_DIR:-${HOME}/.cache/loom}"
# shellcheck disable=SC2034
LOOM_SCRIPTS_DIR="${LOOM_REPO_ROOT}/scripts/engines"
LOOM_PYTHON="${LOOM_PYTHON:-${LOOM_REPO_ROOT}/.venv/bin/python}"
# shellcheck disable=SC2034
JAVA="${JAVA_HOME:+${JAVA_HOME}/bin/}java"

# Set by engine_init.
ENGINE=""
STATE_DIR=""
PID_FILE=""
LOG_FILE=""

say() { printf '[%s] %s\n' "${ENGINE:-engines}" "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

engine_init() {
  ENGINE="$1"
  STATE_DIR="${LOOM_ENGINES_DIR}/${ENGINE}"
  PID_FILE="${STATE_DIR}/pid"
  LOG_FILE="${STATE_DIR}/${ENGINE}.log"
  mkdir -p "${STATE_DIR}"
}

# The marker is a literal argument every engine puts on its command line, so a recycled PID that
# now belongs to some other process is never mistaken for (or killed as) our engine.
engine_marker() { printf 'loom.engine=%s' "${ENGINE}"; }

# Prints the engine's PID and succeeds only if the recorded process is alive and is ours.
running_pid() {
  local pid
  [[ -s "${PID_FILE}" ]] || return 1
  pid="$(<"${PID_FILE}")"
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
  kill -0 "${pid}" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -qF -- "$(engine_marker)" || return 1
  printf '%s\n' "${pid}"
}

port_open() { timeout 1 bash -c ">/dev/tcp/$1/$2" 2>/dev/null; }

# Refuses to start when something else already owns the port: clearer than a bind error buried
# in a JVM log, and it keeps us from talking to a stranger's server.
ensure_port_free() {
  if port_open "$1" "$2"; then
    die "port $1:$2 is already in use by another process (not started by these scripts)"
  fi
}

# Launches "$@" detached (own session, so a Ctrl-C in the caller's terminal does not reach it)
# and records the PID of the engine itself: the inner shell writes its own PID, then execs.
launch() {
  rm -f "${PID_FILE}"
  # The full command line is long (JVM flags): keep it in a file, not in every log tail.
  printf '%q ' "$@" >"${STATE_DIR}/command"
  printf '\n===== %s starting %s (full command: %s)\n' "$(date -u +%FT%TZ)" "$(basename "$1")" \
    "${STATE_DIR}/command" >>"${LOG_FILE}"
  # Lock fds 8/9 are closed so the engine never holds our locks. $$ and "$@" are the inner shell's.
  # shellcheck disable=SC2016
  nohup setsid bash -c 'echo $$ >"$0"; exec "$@"' "${PID_FILE}" "$@" >>"${LOG_FILE}" 2>&1 </dev/null 8>&- 9>&- &
  local i
  for i in $(seq 1 50); do
    [[ -s "${PID_FILE}" ]] && break
    sleep 0.1
  done
  [[ -s "${PID_FILE}" ]] || die "failed to launch (no pid file); see ${LOG_FILE}"
}

# Engines whose real log is elsewhere (Cassandra's system.log) set EXTRA_LOG.
EXTRA_LOG=""
log_tail() {
  local f
  for f in "${LOG_FILE}" ${EXTRA_LOG:+"${EXTRA_LOG}"}; do
    [[ -f "${f}" ]] || continue
    say "last lines of ${f}:"
    tail -n "${LOG_TAIL_LINES:-30}" "${f}" >&2 || true
  done
}

# wait_ready TIMEOUT_S CHECK_FN [ALIVE_FN]: polls CHECK_FN until it succeeds, printing progress;
# fails fast with the log tail if the process dies (ALIVE_FN says whether it runs, default
# running_pid; an engine of several processes passes its own), and with the log tail on timeout.
wait_ready() {
  local timeout_s="$1" check="$2" alive="${3:-running_pid}" start now elapsed last_report=0
  start="$(date +%s)"
  while true; do
    if ! "${alive}" >/dev/null; then
      say "process is not running"
      log_tail
      return 1
    fi
    if "${check}"; then
      now="$(date +%s)"
      say "ready after $((now - start))s"
      return 0
    fi
    now="$(date +%s)"
    elapsed=$((now - start))
    if ((elapsed >= timeout_s)); then
      say "not ready after ${timeout_s}s"
      log_tail
      say "left running (pid $(running_pid || echo '?')): '$0 wait' to keep waiting, '$0 stop' to stop"
      return 1
    fi
    if ((elapsed - last_report >= 5)); then
      say "waiting... ${elapsed}s / ${timeout_s}s"
      last_report="${elapsed}"
    fi
    sleep 1
  done
}

# Graceful TERM first (Cassandra flushes and syncs its commit log on TERM), KILL after a timeout.
# stop_engine TIMEOUT [SIGNAL]: PostgreSQL takes INT (its "fast" shutdown: TERM is "smart",
# which waits for every pooled client connection to close).
stop_engine() {
  local timeout_s="${1:-30}" signal="${2:-TERM}" pid i
  if ! pid="$(running_pid)"; then
    say "not running"
    rm -f "${PID_FILE}"
    return 0
  fi
  say "stopping pid ${pid} (${signal}, KILL after ${timeout_s}s)"
  kill -"${signal}" "${pid}" 2>/dev/null || true
  for ((i = 0; i < timeout_s * 5; i++)); do
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "${pid}" 2>/dev/null; then
    say "still alive after ${timeout_s}s: KILL"
    kill -KILL "${pid}" 2>/dev/null || true
    while kill -0 "${pid}" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "${PID_FILE}"
  say "stopped"
}

# env_set ENGINE < lines: replaces this engine's lines in .engines/env (atomic rename, so a
# concurrent reader never sees a half-written file). Lines are tagged "# engine:<name>".
env_set() {
  local engine="$1" tmp
  mkdir -p "${LOOM_ENGINES_DIR}"
  # Serialize read-modify-write with other up/down runs (fd 8 closes when the function returns).
  exec 8>"${LOOM_ENGINES_DIR}/.env.lock"
  flock 8
  tmp="$(mktemp "${LOOM_ENV_FILE}.XXXXXX")"
  if [[ -f "${LOOM_ENV_FILE}" ]]; then
    grep -vF "# engine:${engine}" "${LOOM_ENV_FILE}" >"${tmp}" || true
  fi
  local line
  while IFS= read -r line; do
    [[ -n "${line}" ]] && printf '%s  # engine:%s\n' "${line}" "${engine}" >>"${tmp}"
  done
  chmod 644 "${tmp}"
  mv -f "${tmp}" "${LOOM_ENV_FILE}"
  exec 8>&-
}

env_unset() { env_set "$1" </dev/null; }

# publish_env: this engine's env lines, and where every engine's state lives. A test that
# stops and restarts an engine (tests/reliability) acts on the instance the suite talks to
# through LOOM_TEST_ENGINES_DIR, whichever checkout's scripts it runs.
publish_env() {
  env_lines | env_set "${ENGINE}"
  echo "export LOOM_TEST_ENGINES_DIR=${LOOM_ENGINES_DIR}" | env_set dir
}

# Resolves a Maven pom's dependencies into a cached directory of jars, once per pom content.
# mvn_lib_dir POM NAME -> prints the directory.
mvn_lib_dir() {
  local pom="$1" name="$2" sum dir tmp
  sum="$(sha256sum "${pom}" | cut -c1-16)"
  dir="${LOOM_CACHE_DIR}/${name}-${sum}"
  if [[ ! -f "${dir}/.complete" ]]; then
    command -v mvn >/dev/null || die "mvn not found (needed once to download ${name})"
    say "resolving ${name} from Maven into ${dir} (first run only)"
    tmp="${dir}.tmp.$$"
    rm -rf "${tmp}"
    mkdir -p "${tmp}"
    local log="${tmp}/mvn.log"
    # Offline first: a warm ~/.m2 needs no network at all.
    if ! mvn -B -o -Dstyle.color=never -f "${pom}" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="${tmp}/lib" >"${log}" 2>&1; then
      if ! mvn -B -Dstyle.color=never -f "${pom}" dependency:copy-dependencies \
          -DincludeScope=runtime -DoutputDirectory="${tmp}/lib" >"${log}" 2>&1; then
        tail -n 30 "${log}" >&2
        die "mvn failed for ${pom} (full log: ${log})"
      fi
    fi
    touch "${tmp}/.complete"
    rm -rf "${dir}"
    mv "${tmp}" "${dir}"
  fi
  printf '%s\n' "${dir}"
}

# One start/stop at a time per engine, even across shells (two test runs calling up.sh together
# would otherwise both see "not running" and launch twice). Released when the script exits.
lock_engine() {
  exec 9>"${STATE_DIR}/.lock"
  flock 9
}

# Dispatches start|stop|status|wait|env|restart to the engine's do_* functions.
# Engines define: do_start, do_stop, check_ready, env_lines, READY_TIMEOUT.
engine_main() {
  local cmd="${1:-}"
  shift || true
  case "${cmd}" in
    start)
      local pid
      lock_engine
      if pid="$(running_pid)"; then
        say "already running (pid ${pid})"
      else
        do_start
        say "started (pid $(running_pid || echo '?')), log: ${LOG_FILE}"
      fi
      exec 9>&-
      if [[ "${1:-}" != "--no-wait" ]]; then
        wait_ready "${READY_TIMEOUT}" check_ready
        publish_env
      fi
      ;;
    stop) lock_engine; do_stop ;;
    restart)
      lock_engine
      do_stop
      exec 9>&-
      "$0" start "$@"
      ;;
    status)
      local pid
      if pid="$(running_pid)"; then
        if check_ready; then say "running (pid ${pid}), ready"; else say "running (pid ${pid}), NOT ready"; return 1; fi
      else
        say "stopped"
        return 3
      fi
      ;;
    wait)
      wait_ready "${READY_TIMEOUT}" check_ready
      publish_env
      ;;
    env) env_lines ;;
    # Where the engine's runtime (jars, binary) is, prepared and cached: what
    # scripts/image/engines.sh copies into an engine's container image.
    runtime)
      declare -F do_runtime >/dev/null || die "${ENGINE} has no runtime to package"
      do_runtime
      ;;
    *)
      echo "usage: $0 start [--no-wait]|stop|restart|status|wait|env|runtime" >&2
      return 2
      ;;
  esac
}
