#!/usr/bin/env bash
# The source tree of a Loom release, extracted from git into build/releases/<tag>/ (gitignored)
# and printed. The upgrade tests run it (tests/upgrade/) to write stores the way that release
# did, so "data written by 1.0.0 opens" is checked against 1.0.0's own code, not today's idea
# of it. It runs on today's virtualenv: its dependencies are a subset of today's, and its
# packages (server, storage, loom.v1) are put first on PYTHONPATH by the caller.
#
#   scripts/releases/tree.sh v1.0.0
#
# A clone without tags still works: each release's commit is written here too.
set -euo pipefail
tag=${1:?usage: tree.sh TAG}
declare -A COMMITS=(
  [v1.0.0]=b4f69f76220dbb50e88b32f1f8ff5e1414b7a4ae  # loom.v1 is versioned: protos/VERSION 1.0.0
)
fallback=${COMMITS[$tag]:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
dest="$root/build/releases/$tag"
if [[ -f "$dest/.extracted" ]]; then
  echo "$dest"
  exit 0
fi
ref="$tag"
if ! git -C "$root" rev-parse -q --verify "refs/tags/$tag^{commit}" >/dev/null; then
  [[ -n "$fallback" ]] || { echo "tree.sh: no tag $tag and no fallback commit" >&2; exit 2; }
  echo "tree.sh: tag $tag missing, using commit $fallback" >&2
  ref="$fallback"
fi
tmp="$dest.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
git -C "$root" archive "$ref" | tar -x -C "$tmp"
git -C "$root" rev-parse "$ref^{commit}" >"$tmp/.extracted"
rm -rf "$dest"
mv "$tmp" "$dest"
echo "$dest"
