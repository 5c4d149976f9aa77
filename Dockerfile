# Loom server image: the embedded engine by default; point it at Bigtable, Cassandra or
# DynamoDB with LOOM_* environment variables (see README.md).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY protos protos
COPY server server
COPY storage storage
COPY loadtest loadtest
COPY clients/python clients/python
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 loom
COPY --from=build /install /usr/local
USER loom
WORKDIR /home/loom
# Metrics on 9464; TLS and auth come from mounted files, e.g.
#   -e LOOM_SERVER__TLS_CERT_FILE=/run/secrets/tls.crt -e LOOM_SERVER__TLS_KEY_FILE=/run/secrets/tls.key
#   -e LOOM_AUTH__JWT_PUBLIC_KEY_FILE=/run/secrets/issuer.pub
# (without TLS, the server warns at start-up that it serves plaintext on a public interface).
ENV LOOM_SERVER__HOST=0.0.0.0 LOOM_SQLITE__DATA_DIR=/home/loom/data \
    LOOM_SERVER__METRICS_HOST=0.0.0.0 LOOM_SERVER__METRICS_PORT=9464
EXPOSE 50051 9464
VOLUME ["/home/loom/data"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["loom", "serve"]
