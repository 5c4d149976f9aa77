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
ENV LOOM_SERVER__HOST=0.0.0.0 LOOM_SQLITE__DATA_DIR=/home/loom/data
EXPOSE 50051
VOLUME ["/home/loom/data"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["loom", "serve"]
