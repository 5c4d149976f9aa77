#!/usr/bin/env bash
# Regenerates clients/typescript/src/gen/ from protos/loom/v1/*.proto and the vendored
# protos/google/rpc/*.proto. DO NOT EDIT the output.
#
# Pinned tools: buf (the project's, installed by `make tools` into ~/.cache/loom/bin) runs
# ts-proto's protoc-gen-ts_proto from node_modules (package-lock.json pins it; `npm ci` here
# when it is missing). No remote plugin. Options: buf.gen.yaml.
# Idempotent; run from anywhere:  clients/typescript/generate.sh   (or: npm run generate)
# LOOM_TS_OUT=<dir> writes the files there instead (the freshness test compares the two).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN_DIR="${LOOM_CACHE_DIR:-${HOME}/.cache/loom}/bin"
BUF="${BUF:-${BIN_DIR}/buf}"

say() { printf '[ts-generate] %s\n' "$*" >&2; }

if [[ ! -x "${BUF}" ]]; then
  say "buf not found at ${BUF}: run \`make tools\` (or set BUF=/path/to/buf)"
  exit 1
fi
cd "${HERE}"
if [[ ! -x node_modules/.bin/protoc-gen-ts_proto ]]; then
  say "installing the pinned npm packages (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error
fi

OUT="$(mktemp -d)"
trap 'rm -rf "${OUT}"' EXIT
PATH="${HERE}/node_modules/.bin:${PATH}" "${BUF}" generate --template buf.gen.yaml -o "${OUT}"

# Replace the whole tree so a deleted .proto leaves no stale file behind.
DEST="${LOOM_TS_OUT:-${HERE}/src/gen}"
rm -rf "${DEST}"
mkdir -p "$(dirname "${DEST}")"
cp -R "${OUT}/gen" "${DEST}"
say "wrote $(find "${DEST}" -name '*.ts' | wc -l) files to ${DEST}"
