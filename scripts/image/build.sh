#!/usr/bin/env bash
# Builds the Loom image with podman (or Docker: LOOM_IMAGE_TOOL=docker).
#
#   scripts/image/build.sh            -> localhost/loom/loom:dev
#
# The base is python:3.11-slim when a registry serves it. Where none is reachable (these
# development machines), the base is built from Debian's packages instead: mmdebstrap
# bookworm (minbase) with python3, python3-venv and ca-certificates (bookworm's Python is
# 3.11), imported as localhost/loom/python-base:3.11-bookworm and cached under
# ~/.cache/loom/images. LOOM_IMAGE_BASE forces a base.
#
# Podman on these VMs needs runc and explicit ulimits (crun fails setrlimit RLIMIT_NOFILE and
# rejects the hybrid cgroup mounts): they go into a containers.conf of our own, pointed at by
# CONTAINERS_CONF, never the machine's. The host's CA bundle is given to pip inside the build
# (TLS to the package index is verified against it here) as build-ca.pem in the context.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
TAG="${LOOM_IMAGE_TAG:-localhost/loom/loom:dev}"
TOOL="${LOOM_IMAGE_TOOL:-podman}"
CACHE="${HOME}/.cache/loom/images"
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
  mkdir -p "${CACHE}"
  # The container's open-file limit must fit under this machine's hard limit (20,000 here):
  # podman's default asks for more, and the kernel refuses setrlimit; the same for processes.
  local nofile nproc
  nofile="$(ulimit -Hn)"
  nproc="$(ulimit -Hu)"
  [[ "${nofile}" == unlimited ]] && nofile=1048576
  # (nproc at the hard limit itself is refused here too; 32,768 is far more than a server
  # with a few dozen threads needs.)
  [[ "${nproc}" == unlimited || "${nproc}" -gt 32768 ]] && nproc=32768
  cat >"${CACHE}/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  export CONTAINERS_CONF="${CACHE}/containers.conf"
}

docker_daemon() {
  if ! docker info >/dev/null 2>&1; then
    say "starting dockerd (no iptables, no bridge: builds use the host network)"
    mkdir -p "${CACHE}"
    (dockerd --iptables=false --bridge=none >"${CACHE}/dockerd.log" 2>&1 &)
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && return; sleep 1; done
    say "dockerd did not start: ${CACHE}/dockerd.log"; exit 1
  fi
}

case "${TOOL}" in
  podman) need_packages podman runc uidmap; podman_conf ;;
  docker) need_packages docker.io; docker_daemon ;;
  *) say "LOOM_IMAGE_TOOL must be podman or docker"; exit 2 ;;
esac

base="${LOOM_IMAGE_BASE:-}"
if [[ -z "${base}" ]]; then
  if timeout 60 "${TOOL}" pull -q docker.io/library/python:3.11-slim >/dev/null 2>&1; then
    base="docker.io/library/python:3.11-slim"
  else
    base="${DEBIAN_BASE}"
    if ! "${TOOL}" image inspect "${base}" >/dev/null 2>&1; then
      tarball="${CACHE}/python-base-3.11-bookworm.tar"
      if [[ ! -s "${tarball}" ]]; then
        need_packages mmdebstrap
        say "no registry: building ${base} from Debian packages (mmdebstrap, once)"
        # Without documentation, manuals and translations (licences kept): a smaller base.
        mmdebstrap --quiet --format=tar --variant=minbase \
          --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
          --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
          --dpkgopt='path-include=/usr/share/doc/*/copyright' \
          --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
          --include=python3,python3-venv,ca-certificates \
          bookworm "${tarball}.partial"
        mv "${tarball}.partial" "${tarball}"
      fi
      "${TOOL}" import "${tarball}" "${base}" >/dev/null
    fi
  fi
fi
say "base ${base}"

cp /etc/ssl/certs/ca-certificates.crt "${ROOT}/build-ca.pem" 2>/dev/null || true
trap 'rm -f "${ROOT}/build-ca.pem"' EXIT
started=$(date +%s)
"${TOOL}" build --network host --build-arg "BASE=${base}" -t "${TAG}" "${ROOT}" >&2
say "built ${TAG} in $(($(date +%s) - started)) s; size $("${TOOL}" image inspect "${TAG}" --format '{{.Size}}') bytes"
echo "${TAG}"
