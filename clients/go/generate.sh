#!/usr/bin/env bash
# Regenerates clients/go/loomv1/*.pb.go from protos/loom/v1/*.proto. DO NOT EDIT the output.
#
# Pinned tools: protoc comes from grpcio-tools (the version pinned in pyproject.toml, with the
# well-known types bundled under grpc_tools/_proto); protoc-gen-go and protoc-gen-go-grpc are
# `go install`ed at the versions below into ~/.cache/loom/bin (skipped when already there).
# Idempotent; run from anywhere:  clients/go/generate.sh
# LOOM_GO_OUT=<dir> writes the files there instead (the freshness test compares the two).
set -euo pipefail

PROTOC_GEN_GO_VERSION="v1.36.12"       # google.golang.org/protobuf/cmd/protoc-gen-go
PROTOC_GEN_GO_GRPC_VERSION="v1.6.2"    # google.golang.org/grpc/cmd/protoc-gen-go-grpc

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
PYTHON="${PYTHON:-${ROOT}/.venv/bin/python}"
BIN_DIR="${LOOM_CACHE_DIR:-${HOME}/.cache/loom}/bin"
mkdir -p "${BIN_DIR}"

say() { printf '[go-generate] %s\n' "$*" >&2; }

# `go install` binaries carry their module version; reinstall only when it differs from the pin.
installed_version() {
  [[ -x "${BIN_DIR}/$1" ]] || return 1
  go version -m "${BIN_DIR}/$1" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'
}

ensure_tool() {  # name, package, version
  if [[ "$(installed_version "$1" || true)" == "$3" ]]; then
    return 0
  fi
  say "installing $1 $3 (go install)"
  GOBIN="${BIN_DIR}" GOFLAGS=-mod=mod go install "$2@$3"
}

ensure_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "${PROTOC_GEN_GO_VERSION}"
ensure_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc \
  "${PROTOC_GEN_GO_GRPC_VERSION}"

WKT_INCLUDE="$("${PYTHON}" -c \
  'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"

OUT="$(mktemp -d)"
trap 'rm -rf "${OUT}"' EXIT

cd "${ROOT}/protos"
PATH="${BIN_DIR}:${PATH}" "${PYTHON}" -m grpc_tools.protoc \
  -I . -I "${WKT_INCLUDE}" \
  --go_out="${OUT}" --go_opt=module=github.com/loom/loom/clients/go \
  --go-grpc_out="${OUT}" --go-grpc_opt=module=github.com/loom/loom/clients/go \
  loom/v1/*.proto

# Replace every .pb.go so a deleted .proto leaves no stale file behind.
DEST="${LOOM_GO_OUT:-${HERE}/loomv1}"
mkdir -p "${DEST}"
rm -f "${DEST}"/*.pb.go
cp "${OUT}"/loomv1/*.pb.go "${DEST}/"
say "wrote $(ls "${DEST}"/*.pb.go | wc -l) files to ${DEST}"
