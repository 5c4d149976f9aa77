#!/usr/bin/env bash
# Builds the engines' images for docker-compose.yml from the same artifacts scripts/engines/
# runs in the tests: Cassandra, DynamoDB Local and ElasticMQ from Maven Central (on a Java 17
# image from Debian's packages), the Bigtable emulator from this machine's Google Cloud SDK, and
# PostgreSQL from Debian's packages. No registry is needed.
#
#   scripts/image/engines.sh    (LOOM_IMAGE_TOOL=docker for Docker; podman by default)
#
# Images: localhost/loom/{jre:17, cassandra:5.0, dynamodb-local:2, elasticmq:1,
# bigtable-emulator:latest, postgres:15}. Dockerfiles: deploy/compose/engines/<engine>/.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ENGINES="${IMAGE_ROOT}/scripts/engines"
DOCKERFILES="${IMAGE_ROOT}/deploy/compose/engines"

use_tool
base="$(debian_base docker.io/library/debian:bookworm-slim)"
say "base ${base}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# context NAME [RUNTIME_DIR]: a build context of the Dockerfile directory plus the engine's
# runtime (hard links where the file system allows: jars are not copied twice).
context() {
  local name="$1" runtime="${2:-}" dir="${work}/$1"
  mkdir -p "${dir}"
  cp -r "${DOCKERFILES}/${name}/." "${dir}/"
  if [[ -n "${runtime}" ]]; then
    cp -rl "${runtime}" "${dir}/runtime" 2>/dev/null || cp -r "${runtime}" "${dir}/runtime"
  fi
  printf '%s\n' "${dir}"
}

build_image localhost/loom/jre:17 "$(context jre)" --build-arg "BASE=${base}"

ctx="$(context cassandra "$("${ENGINES}/cassandra.sh" runtime)")"
mkdir -p "${ctx}/scripts" && cp -r "${ENGINES}/cassandra" "${ctx}/scripts/"
build_image localhost/loom/cassandra:5.0 "${ctx}"

build_image localhost/loom/dynamodb-local:2 "$(context dynamodb "$("${ENGINES}/dynamodb.sh" runtime)")"
build_image localhost/loom/elasticmq:1 "$(context elasticmq "$("${ENGINES}/sqs.sh" runtime)")"
build_image localhost/loom/bigtable-emulator:latest \
  "$(context bigtable "$("${ENGINES}/bigtable.sh" runtime)")" --build-arg "BASE=${base}"
build_image localhost/loom/postgres:15 "$(context postgres)" --build-arg "BASE=${base}"
