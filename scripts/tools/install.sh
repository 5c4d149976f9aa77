#!/usr/bin/env bash
# Installs the developer tools Loom's docs and e2e tests use, pinned, into ~/.cache/loom/bin:
#   grpcurl, ghz  (Go module proxy: go install)      buf  (npm package @bufbuild/buf)
# Idempotent: a tool already at the pinned version is skipped. The last line printed is the bin
# dir, so callers can do:  PATH="$(scripts/tools/install.sh | tail -n1):$PATH"
set -euo pipefail

GRPCURL_VERSION="v1.9.4"
GHZ_VERSION="v0.121.0"
BUF_VERSION="1.75.0"

CACHE_DIR="${LOOM_CACHE_DIR:-${HOME}/.cache/loom}"
BIN_DIR="${CACHE_DIR}/bin"
NPM_PREFIX="${CACHE_DIR}/npm"
mkdir -p "${BIN_DIR}"

say() { printf '[tools] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# `go install` binaries report "dev build" from -version, so read the module version that the Go
# toolchain stamps into the binary instead.
go_installed_version() {
  [[ -x "${BIN_DIR}/$1" ]] || return 1
  go version -m "${BIN_DIR}/$1" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'
}

# go_install NAME PACKAGE VERSION: a Go command, pinned, into BIN_DIR (skipped when current).
go_install() {
  local name="$1" package="$2" version="$3"
  if [[ "$(go_installed_version "${name}" || true)" == "${version}" ]]; then
    say "${name} ${version} already installed"
    return 0
  fi
  command -v go >/dev/null || die "go not found (needed to install ${name})"
  say "installing ${name} ${version} (go install)"
  GOBIN="${BIN_DIR}" GOFLAGS=-mod=mod go install "${package}@${version}"
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

go_install grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl "${GRPCURL_VERSION}"
go_install ghz github.com/bojand/ghz/cmd/ghz "${GHZ_VERSION}"
install_buf
say "grpcurl $(go_installed_version grpcurl)"
say "ghz $(go_installed_version ghz)"
say "buf $("${BIN_DIR}/buf" --version)"
printf '%s\n' "${BIN_DIR}"
