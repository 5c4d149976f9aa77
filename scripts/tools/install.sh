#!/usr/bin/env bash
# Installs the developer tools Loom's docs and e2e tests use, pinned, into ~/.cache/loom/bin:
#   grpcurl, ghz, helm  (Go module proxy: go install)      buf  (npm package @bufbuild/buf)
#   kubernetes-models + yaml  (npm, into ~/.cache/loom/kube): the Kubernetes API schemas that
#     deploy/validate.mjs checks the Helm chart's objects against, offline
# Idempotent: a tool already at the pinned version is skipped. The last line printed is the bin
# dir, so callers can do:  PATH="$(scripts/tools/install.sh | tail -n1):$PATH"
set -euo pipefail

GRPCURL_VERSION="v1.9.4"
GHZ_VERSION="v0.121.0"
BUF_VERSION="1.75.0"
HELM_VERSION="v3.22.0"
HELM_KUBE_MINOR="37"
KUBE_MODELS_VERSION="5.1.0"
YAML_VERSION="2.9.1"

CACHE_DIR="${LOOM_CACHE_DIR:-${HOME}/.cache/loom}"
BIN_DIR="${CACHE_DIR}/bin"
NPM_PREFIX="${CACHE_DIR}/npm"
KUBE_PREFIX="${CACHE_DIR}/kube"
mkdir -p "${BIN_DIR}"

say() { printf '[tools] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# `go install` binaries report "dev build" from -version, so read the module version that the Go
# toolchain stamps into the binary instead.
go_installed_version() {
  [[ -x "${BIN_DIR}/$1" ]] || return 1
  go version -m "${BIN_DIR}/$1" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'
}

# go_install NAME PACKAGE VERSION [LDFLAGS]: a Go command, pinned, into BIN_DIR (skipped when
# current: same module version, built with the same LDFLAGS).
go_install() {
  local name="$1" package="$2" version="$3" ldflags="${4:-}"
  if [[ "$(go_installed_version "${name}" || true)" == "${version}" ]] \
    && { [[ -z "${ldflags}" ]] || go version -m "${BIN_DIR}/${name}" | grep -qF -- "${ldflags}"; }; then
    say "${name} ${version} already installed"
    return 0
  fi
  command -v go >/dev/null || die "go not found (needed to install ${name})"
  say "installing ${name} ${version} (go install)"
  GOBIN="${BIN_DIR}" GOFLAGS=-mod=mod go install -ldflags="${ldflags}" "${package}@${version}"
}

# helm's release build stamps, with -ldflags, its own version and the Kubernetes version that
# `helm template` and `helm lint` assume without a cluster: a plain `go install` leaves them at
# "v3.22" and Kubernetes 1.20, older than the chart's kubeVersion. The same flags as helm's
# Makefile; HELM_KUBE_MINOR follows the k8s.io/client-go of HELM_VERSION's go.mod (v0.37: 1.37).
HELM_LDFLAGS="-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  HELM_LDFLAGS+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${HELM_KUBE_MINOR}"
done

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

npm_package_version() {  # PREFIX NAME: the installed version, or nothing
  local manifest="$1/node_modules/$2/package.json"
  [[ -f "${manifest}" ]] && node -p "require(process.argv[1]).version" "${manifest}" 2>/dev/null
}

# The schemas deploy/validate.mjs validates with: no network at validation time (kubeconform
# would download its schemas from GitHub), nothing but node.
install_kube_models() {
  if [[ "$(npm_package_version "${KUBE_PREFIX}" kubernetes-models || true)" == "${KUBE_MODELS_VERSION}" ]] \
    && [[ "$(npm_package_version "${KUBE_PREFIX}" yaml || true)" == "${YAML_VERSION}" ]]; then
    say "kubernetes-models ${KUBE_MODELS_VERSION} already installed"
    return 0
  fi
  command -v npm >/dev/null || die "npm not found (needed to install kubernetes-models)"
  say "installing kubernetes-models ${KUBE_MODELS_VERSION}, yaml ${YAML_VERSION} (npm)"
  mkdir -p "${KUBE_PREFIX}"
  npm install --prefix "${KUBE_PREFIX}" --save-exact --no-audit --no-fund --loglevel=error \
    "kubernetes-models@${KUBE_MODELS_VERSION}" "yaml@${YAML_VERSION}" >&2
}

go_install grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl "${GRPCURL_VERSION}"
go_install ghz github.com/bojand/ghz/cmd/ghz "${GHZ_VERSION}"
go_install helm helm.sh/helm/v3/cmd/helm "${HELM_VERSION}" "${HELM_LDFLAGS}"
install_buf
install_kube_models
say "grpcurl $(go_installed_version grpcurl)"
say "ghz $(go_installed_version ghz)"
say "buf $("${BIN_DIR}/buf" --version)"
say "helm $("${BIN_DIR}/helm" version --template '{{.Version}}')"
say "kubernetes-models $(npm_package_version "${KUBE_PREFIX}" kubernetes-models)"
printf '%s\n' "${BIN_DIR}"
