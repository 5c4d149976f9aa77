#!/usr/bin/env bash
# Installs the developer tools Loom's docs and e2e tests use, pinned, into ~/.cache/loom/bin:
#   grpcurl  (Go module proxy: go install)      buf  (npm package @bufbuild/buf)
# Idempotent: a tool already at the pinned version is skipped. The last line printed is the bin
# dir, so callers can do:  PATH="$(scripts/tools/install.sh | tail -n1):$PATH"
set -euo pipefail

GRPCURL_VERSION="v1.9.4"
BUF_VERSION="1.75.0"

CACHE_DIR="${LOOM_CACHE_DIR:-${HOME}/.cache/loom}"
BIN_DIR="${CACHE_DIR}/bin"
NPM_PREFIX="${CACHE_DIR}/npm"
mkdir -p "${BIN_DIR}"

say() { printf '[tools] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# `go install` binaries report "dev build" from -version, so read the module version that the Go
# toolchain stamps into the binary instead.
grpcurl_installed_version() {
  [[ -x "${BIN_DIR}/grpcurl" ]] || return 1
  go version -m "${BIN_DIR}/grpcurl" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'
}

install_grpcurl() {
  if [[ "$(grpcurl_installed_version || true)" == "${GRPCURL_VERSION}" ]]; then
    say "grpcurl ${GRPCURL_VERSION} already installed"
    return 0
  fi
  command -v go >/dev/null || die "go not found (needed to install grpcurl)"
  say "installing grpcurl ${GRPCURL_VERSION} (go install)"
  GOBIN="${BIN_DIR}" GOFLAGS=-mod=mod go install \
    "github.com/fullstorydev/grpcurl/cmd/grpcurl@${GRPCURL_VERSION}"
}

install_buf() {
  local bin="${NPM_PREFIX}/node_modules/.bin/buf"
  if [[ -x "${bin}" ]] && [[ "$("${bin}" --version 2>/dev/null || true)" == "${BUF_VERSION}" ]]; then
    say "buf ${BUF_VERSION} already installed"
  else
    command -v npm >/dev/null || die "npm not found (needed to install buf)"
    say "installing buf ${BUF_VERSION} (npm)"
    # A private prefix keeps it out of the project's and the user's global node_modules.
    npm install --prefix "${NPM_PREFIX}" --no-audit --no-fund --loglevel=error \
      "@bufbuild/buf@${BUF_VERSION}" >&2
  fi
  ln -sfn "${bin}" "${BIN_DIR}/buf"
}

install_grpcurl
install_buf
say "grpcurl $(grpcurl_installed_version)"
say "buf $("${BIN_DIR}/buf" --version)"
printf '%s\n' "${BIN_DIR}"
