# Loom server image: the embedded engine by default; point it at Bigtable, Cassandra or
# DynamoDB with LOOM_* environment variables (see README.md).
#
# BASE must be a Debian-family CPython 3.11 on x86_64 (useradd, glibc): requirements.lock
# pins wheels for that platform. Override it to use a mirror or a digest-pinned image, e.g.
#   --build-arg BASE=docker.io/library/python:3.11-slim@sha256:...
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# A virtualenv rather than pip --prefix: the same steps work on python:3.11-slim and on a
# Debian base (python3 + python3-venv), whose system Python has no pip of its own.
# Dependencies first, in a layer of their own keyed on the lock alone: a source change
# reuses it (no download, no reinstall). --require-hashes: every file is checked against
# the reviewed lock; --no-deps: the lock is the complete set, pip resolves nothing else.
# build-ca.pem (optional; scripts/image/build.sh puts the host's CA bundle there) is the
# trust store for TLS to the package index where a proxy re-signs it; the wildcard lets the
# COPY succeed without it.
COPY requirements.lock build-ca.pe[m] ./
RUN if [ -f build-ca.pem ]; then export PIP_CERT=/src/build-ca.pem; fi \
 && python3 -m venv /opt/loom \
 && /opt/loom/bin/pip install -q --require-hashes --no-deps -r requirements.lock
# Then Loom itself, into a directory of its own so the final image keeps the two as separate
# layers too: two distributions from this tree, both --no-deps (the lock holds every
# dependency of both and leaves loom-client itself out): loom-client (clients/python: the
# generated loom.v1 and loom_client), then the server (pyproject's packages.find: server,
# storage). The load harness (loadtest/) is in neither wheel.
# The build backend (setuptools, wheel) is fetched by pip's build isolation at this step.
COPY clients/python/pyproject.toml clients/python/
COPY clients/python/loom clients/python/loom
COPY clients/python/loom_client clients/python/loom_client
COPY pyproject.toml ./
COPY server server
COPY storage storage
RUN if [ -f build-ca.pem ]; then export PIP_CERT=/src/build-ca.pem; fi \
 && /opt/loom/bin/pip install -q --no-deps --target=/opt/app ./clients/python . \
 && /opt/loom/bin/python -m pip uninstall -q -y pip setuptools
# (pip and setuptools are build tools: ~20 MB the running server never imports.)

FROM ${BASE}
# A fixed uid/gid (10001) so mounted secrets can be granted to it (group 10001, mode 0640)
# without knowing the image's /etc/passwd; a login shell is of no use to a server.
# The data directory is made here, owned by loom, before VOLUME: Docker copies it (ownership
# included) into a fresh named volume, so the non-root server can write there. Without it
# Docker creates the mount point root-owned (podman gives a new volume to the container's
# user; Docker does not).
RUN groupadd --gid 10001 loom \
 && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin loom \
 && install -d -o 10001 -g 10001 -m 0750 /home/loom/data
# Two layers: the dependencies' changes only when requirements.lock does.
COPY --from=build /opt/loom /opt/loom
COPY --from=build /opt/app /opt/app
ENV PATH=/opt/app/bin:/opt/loom/bin:$PATH PYTHONPATH=/opt/app
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /home/loom
# Metrics on 9464; TLS and auth come from mounted files, e.g.
#   -e LOOM_SERVER__TLS_CERT_FILE=/run/secrets/tls.crt -e LOOM_SERVER__TLS_KEY_FILE=/run/secrets/tls.key
#   -e LOOM_AUTH__JWT_PUBLIC_KEY_FILE=/run/secrets/issuer.pub
# (without TLS, the server warns at start-up that it serves plaintext on a public interface).
ENV LOOM_SERVER__HOST=0.0.0.0 LOOM_SQLITE__DATA_DIR=/home/loom/data \
    LOOM_SERVER__METRICS_HOST=0.0.0.0 LOOM_SERVER__METRICS_PORT=9464
EXPOSE 50051 9464
VOLUME ["/home/loom/data"]
# Readiness: "" and every service SERVING, i.e. no engine's circuit breaker open (what
# compose's depends_on: service_healthy and a load balancer want). `loom probe` reads this
# container's environment: the port, and TLS when LOOM_SERVER__TLS_CERT_FILE is set,
# trusting that certificate (self-signed); a CA-issued one needs LOOM_PROBE__CA_FILE (and for
# mTLS LOOM_PROBE__CLIENT_CERT_FILE/_KEY_FILE) in the container's environment, or the flags.
# An orchestrator's restart (liveness) check should be `loom probe --live` instead:
# restarting cannot bring a database back.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["loom", "probe", "--ready"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["loom", "serve"]
