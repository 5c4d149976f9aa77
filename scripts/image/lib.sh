# shellcheck shell=bash disable=SC2034  # IMAGE_ROOT: used by the scripts that source this
# Shared by scripts/image/*.sh: the container tool made usable on these machines, and a Debian
# base image when no registry answers. Sourced, never executed.
#
# Podman on these VMs needs runc and explicit ulimits (crun fails setrlimit RLIMIT_NOFILE and
# rejects the hybrid cgroup mounts): they go into a containers.conf of our own, pointed at by
# CONTAINERS_CONF, never the machine's. Docker (Debian's docker.io) is started without iptables
# rules and without its default bridge, which these VMs refuse; user-defined networks (compose's)
# work, and builds use the host network.

IMAGE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TOOL="${LOOM_IMAGE_TOOL:-podman}"
IMAGE_CACHE="${HOME}/.cache/loom/images"
DEBIAN_BASE="localhost/loom/python-base:3.11-bookworm"
say() { echo "[image] $*" >&2; }

need_packages() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if ((${#missing[@]})); then
    say "installing ${missing[*]} (Debian packages)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

podman_conf() {
  mkdir -p "${IMAGE_CACHE}"
  # The container's open-file limit must fit under this machine's hard limit (20,000 here):
  # podman's default asks for more, and the kernel refuses setrlimit; the same for processes.
  local nofile nproc
  nofile="$(ulimit -Hn)"
  nproc="$(ulimit -Hu)"
  [[ "${nofile}" == unlimited ]] && nofile=1048576
  # (nproc at the hard limit itself is refused here too; 32,768 is far more than a server
  # with a few dozen threads needs.)
  [[ "${nproc}" == unlimited || "${nproc}" -gt 32768 ]] && nproc=32768
  cat >"${IMAGE_CACHE}/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  export CONTAINERS_CONF="${IMAGE_CACHE}/containers.conf"
}

docker_daemon() {
  if ! docker info >/dev/null 2>&1; then
    say "starting dockerd (no iptables, no default bridge)"
    mkdir -p "${IMAGE_CACHE}"
    (dockerd --iptables=false --bridge=none >"${IMAGE_CACHE}/dockerd.log" 2>&1 &)
    touch "${IMAGE_CACHE}/dockerd.started-here"
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && return; sleep 1; done
    say "dockerd did not start: ${IMAGE_CACHE}/dockerd.log"; exit 1
  fi
}

# stop_docker_daemon: stops the dockerd that docker_daemon started (and the containerd it runs),
# so a CI run leaves no daemon behind; one that was running before is left alone. Never fails.
stop_docker_daemon() {
  local pid
  [[ -f "${IMAGE_CACHE}/dockerd.started-here" ]] || return 0
  rm -f "${IMAGE_CACHE}/dockerd.started-here"
  pid="$(cat /var/run/docker.pid 2>/dev/null)" || return 0
  [[ -n "${pid}" ]] && kill -TERM "${pid}" 2>/dev/null || return 0
  say "stopping dockerd (pid ${pid})"
  for _ in $(seq 30); do kill -0 "${pid}" 2>/dev/null || return 0; sleep 1; done
  kill -KILL "${pid}" 2>/dev/null || true
}

# use_tool: installs and prepares LOOM_IMAGE_TOOL (podman by default, or docker).
use_tool() {
  case "${TOOL}" in
    podman) need_packages podman runc uidmap; podman_conf ;;
    docker) need_packages docker.io; docker_daemon ;;
    *) say "LOOM_IMAGE_TOOL must be podman or docker"; exit 2 ;;
  esac
}

# debian_base PREFERRED: prints PREFERRED (a registry image) when it can be pulled, else a
# Debian bookworm base built from Debian's packages: mmdebstrap (minbase) with python3,
# python3-venv and ca-certificates (bookworm's Python is 3.11), imported as DEBIAN_BASE and
# cached under ~/.cache/loom/images. LOOM_IMAGE_BASE forces a base.
debian_base() {
  local preferred="$1" tarball
  if [[ -n "${LOOM_IMAGE_BASE:-}" ]]; then printf '%s\n' "${LOOM_IMAGE_BASE}"; return; fi
  if "${TOOL}" image inspect "${preferred}" >/dev/null 2>&1 \
      || timeout 60 "${TOOL}" pull -q "${preferred}" >/dev/null 2>&1; then
    printf '%s\n' "${preferred}"
    return
  fi
  if ! "${TOOL}" image inspect "${DEBIAN_BASE}" >/dev/null 2>&1; then
    tarball="${IMAGE_CACHE}/python-base-3.11-bookworm.tar"
    if [[ ! -s "${tarball}" ]]; then
      need_packages mmdebstrap
      say "no registry: building ${DEBIAN_BASE} from Debian packages (mmdebstrap, once)"
      mkdir -p "${IMAGE_CACHE}"
      # Without documentation, manuals and translations (licences kept): a smaller base.
      # shellcheck disable=SC2016  # $1 is the hook's argument (the new root), not ours.
      mmdebstrap --quiet --format=tar --variant=minbase \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
        --include=python3,python3-venv,ca-certificates \
        bookworm "${tarball}.partial" >&2
      mv "${tarball}.partial" "${tarball}"
    fi
    "${TOOL}" import "${tarball}" "${DEBIAN_BASE}" >/dev/null
  fi
  printf '%s\n' "${DEBIAN_BASE}"
}

# build_image TAG CONTEXT [build args...]: builds and reports the size. Podman writes OCI
# images by default, which have no HEALTHCHECK (podman drops it with a warning): the docker
# format keeps it, as Docker's own build does.
build_image() {
  local tag="$1" context="$2" started format=()
  shift 2
  [[ "${TOOL}" == podman ]] && format=(--format docker)
  started=$(date +%s)
  "${TOOL}" build --network host "${format[@]}" "$@" -t "${tag}" "${context}" >&2
  say "built ${tag} in $(($(date +%s) - started)) s; size $("${TOOL}" image inspect "${tag}" --format '{{.Size}}') bytes"
}
