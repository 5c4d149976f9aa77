#!/usr/bin/env bash
# Builds the Loom image with podman (or Docker: LOOM_IMAGE_TOOL=docker).
#
#   scripts/image/build.sh            -> localhost/loom/loom:dev
#
# The base is python:3.11-slim when a registry serves it, else a Debian bookworm base built from
# Debian's packages (scripts/image/lib.sh). The host's CA bundle is given to pip inside the
# build (TLS to the package index is verified against it here) as build-ca.pem in the context.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TAG="${LOOM_IMAGE_TAG:-localhost/loom/loom:dev}"

use_tool
base="$(debian_base docker.io/library/python:3.11-slim)"
say "base ${base}"

cp /etc/ssl/certs/ca-certificates.crt "${IMAGE_ROOT}/build-ca.pem" 2>/dev/null || true
trap 'rm -f "${IMAGE_ROOT}/build-ca.pem"' EXIT
build_image "${TAG}" "${IMAGE_ROOT}" --build-arg "BASE=${base}"
echo "${TAG}"
