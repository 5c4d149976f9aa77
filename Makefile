# The same commands locally and in CI. `make run` serves on the embedded engine (with a small
# demo hierarchy for the Iterator); `make test-unit` is the fast loop; `make test` installs
# everything, starts every engine, runs the whole suite.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TOOLS_BIN := $(HOME)/.cache/loom/bin
PORT ?= 50051
DATA_DIR ?= ./data
PROTOS := $(wildcard protos/loom/v1/*.proto)
# The generated Python (loom/v1/*_pb2*.py) is part of the loom-client distribution.
PY_CLIENT := clients/python
# Go lives here on these machines; harmless where it is already on PATH.
export PATH := $(PATH):/usr/local/go/bin

.PHONY: release-tree upgrade-test image image-test compose-images compose-test install run demo-data test cluster-faults test-unit lint protos buf-lint contract contract-baseline engines-up engines-down tools clients bench lock clean

# Two distributions, both editable: loom-client (clients/python) and the server, which needs it.
$(STAMP): pyproject.toml $(PY_CLIENT)/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e $(PY_CLIENT) -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: demo-data
	$(BIN)/loom serve --port $(PORT) --data-dir $(DATA_DIR)

# The embedded Iterator source starts with tables and no rows: fill an empty one with a small
# generated hierarchy (enterprises 1..20; storage/sqlite/demo_source.py), so the README's
# examples have something to iterate. A source holding any enterprise is left alone.
demo-data: install
	$(BIN)/python -m storage.sqlite.demo_source --data-dir $(DATA_DIR)

tools:
	scripts/tools/install.sh

# The Go and TypeScript clients are exercised by tests/e2e/test_clients.py and
# test_client_typescript.py (which compiles with tsc itself; here only its pinned npm packages):
# build them first so a cold compile of grpc-go (~2 min, cached in ~/go) is not charged to one test.
TS_DEPS := clients/typescript/node_modules/.package-lock.json
$(TS_DEPS): clients/typescript/package-lock.json
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error

clients: $(TS_DEPS)
	cd clients/go && go build ./... && go vet ./...
	cd clients/java && mvn -q -B package

# Every engine starts once for the whole suite and is stopped however pytest ends. The suite
# asserts behaviour, never speed, so it needs no quiet machine (speed is `loadtest/`'s job).
# Lint and the contract check run first: STYLE's promises are the gate's too.
# COVERAGE=1 measures branch coverage of server/ and storage/ in the same run and prints it per
# package (scripts/coverage/packages.py; docs/ARCHITECTURE.md "Coverage" keeps a figure and its
# cost); COVERAGE=processes measures the `loom serve` processes the tests start too (pyproject's
# [tool.coverage.run]). The default, 0, measures nothing: tracing the in-process servers made
# the gate's pytest phase ~15 % longer, and on this two-core machine that phase alone now takes
# about an hour of CI's 90 minutes.
# At its end it fails if the suite left a Loom process alive (tests/leftovers.py: every process
# pytest starts carries LOOMTEST_RUN=<this run>; those left are named and killed).
COVERAGE ?= 0
COV_ARGS := $(if $(filter-out 0,$(COVERAGE)),--cov --cov-report=term:skip-covered --cov-report=json:coverage.json)
export COV_SUBPROCESSES := $(if $(filter processes,$(COVERAGE)),subprocess,_exit)
test: install tools clients lint contract
	@set -euo pipefail; \
	export PATH="$(TOOLS_BIN):$$PATH"; \
	trap 'scripts/engines/down.sh' EXIT; \
	scripts/engines/up.sh; \
	source .engines/env; \
	rm -f .coverage .coverage.* coverage.json; \
	status=0; \
	run="$$(date +%s%N)-$$$$"; \
	LOOMTEST_RUN=$$run $(BIN)/pytest -p no:cacheprovider -ra --durations=40 --ignore=tests/image --ignore=tests/compose -m 'not cluster_alone' $(COV_ARGS) $(PYTEST_ARGS) || status=$$?; \
	if [ -f coverage.json ]; then $(BIN)/python scripts/coverage/packages.py coverage.json; fi; \
	$(BIN)/python -m tests.leftovers LOOMTEST_RUN=$$run || status=$$(( status ? status : 1 )); \
	exit $$status

# The cluster's "no call fails" tests (marker cluster_alone): a node killed, then one frozen for
# 30 s, under two replicas' mixed load at 10 calls/s. They hold with the three nodes alone on a
# two-core machine, not beside every other engine and an hour of suite, so `make test` leaves
# them out (it runs the same faults asserting durability and retryable failures) and this
# target starts only the cluster for them (~10 min).
cluster-faults: install tools
	@set -euo pipefail; \
	export PATH="$(TOOLS_BIN):$$PATH"; \
	trap 'scripts/engines/down.sh' EXIT; \
	scripts/engines/up.sh cassandra-cluster; \
	source .engines/env; \
	$(BIN)/pytest -p no:cacheprovider -ra -m cluster_alone --engines cassandra-cluster \
	  tests/reliability/test_cassandra_cluster.py $(PYTEST_ARGS)

# Release 1.0.0's own tree (tag v1.0.0, or its commit in a clone without tags), extracted into
# build/releases/: tests/upgrade/ runs it to write the stores today's server must open.
release-tree:
	scripts/releases/tree.sh v1.0.0

# Data written by 1.0.0 on SQLite and every distributed engine, opened by today's server; a
# rolling upgrade on one Cassandra keyspace (part of `make test`; here with running engines:
# `source .engines/env` first, or narrow with PYTEST_ARGS='--engines sqlite').
upgrade-test: install release-tree
	$(BIN)/pytest -p no:cacheprovider -ra tests/upgrade $(PYTEST_ARGS)

test-unit: install
	$(BIN)/pytest -q tests/unit

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check server storage loadtest clients/python tests scripts
	$(BIN)/mypy

protos: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m grpc_tools.protoc -I protos \
	  --python_out=$(PY_CLIENT) --grpc_python_out=$(PY_CLIENT) \
	  --mypy_out=$(PY_CLIENT) --mypy_grpc_out=$(PY_CLIENT) $(PROTOS)

buf-lint: tools
	cd protos && $(TOOLS_BIN)/buf lint

# The wire contract: buf lint, and buf breaking against the released contract committed in
# protos/contract/ (a change that breaks callers fails here; a release that means to break
# them says so by `make contract-baseline`, reviewed like any other change).
contract: tools
	cd protos && $(TOOLS_BIN)/buf lint && $(TOOLS_BIN)/buf breaking --against contract/loom-v1.binpb

contract-baseline: tools
	cd protos && $(TOOLS_BIN)/buf build -o contract/loom-v1.binpb

engines-up:
	scripts/engines/up.sh

engines-down:
	scripts/engines/down.sh

# requirements.lock: the runtime dependencies (not dev), pinned with hashes for Linux x86_64
# CPython 3.11, what the Dockerfile installs with --require-hashes. Pins already in the file
# are kept unless pyproject.toml needs others; `make lock LOCK_ARGS=--upgrade` takes the
# newest allowed. tests/unit/test_lock_file.py checks it against pyproject.toml. loom-client
# is resolved from clients/python (pyproject's tool.uv.sources) and left out of the lock: it is
# this repository's own code, which the Dockerfile installs from the tree.
lock: install
	test -x $(BIN)/uv || $(BIN)/pip install -q 'uv>=0.9'
	$(BIN)/uv pip compile pyproject.toml --quiet --generate-hashes --python-version 3.11 \
	  --python-platform x86_64-unknown-linux-gnu --annotation-style line \
	  --no-emit-package loom-client \
	  --custom-compile-command 'make lock' $(LOCK_ARGS) -o requirements.lock

# The container image: python:3.11-slim when a registry serves it, else a base built from
# Debian's packages (scripts/image/build.sh). LOOM_IMAGE_TOOL=docker builds with Docker.
image:
	scripts/image/build.sh

# Builds the image, then checks it from outside: health and a call of every service, the uid,
# a SIGTERM drain, TLS and JWT from mounted secrets, a volume surviving a restart.
image-test: install image
	CONTAINERS_CONF=$(HOME)/.cache/loom/images/containers.conf $(BIN)/pytest -p no:cacheprovider -ra tests/image

# docker-compose.yml's images, built here with Docker: the engines' from the artifacts
# scripts/engines/ runs (Maven Central jars, the Cloud SDK's Bigtable emulator, Debian's
# PostgreSQL), and Loom's.
compose-images:
	LOOM_IMAGE_TOOL=docker scripts/image/engines.sh
	LOOM_IMAGE_TOOL=docker LOOM_IMAGE_TAG=localhost/loom/loom:0.1.0 scripts/image/build.sh

# The compose stack brought up with docker-compose and checked from outside: every service
# through both replicas, then a replica and Cassandra crashed (SIGKILL) with nothing
# acknowledged lost.
compose-test: install compose-images
	@set -euo pipefail; source scripts/image/lib.sh; need_packages docker-compose; \
	trap stop_docker_daemon EXIT; \
	$(BIN)/pytest -p no:cacheprovider -ra -s tests/compose

bench: install
	$(BIN)/python -m loadtest threadweaver --json loadtest/results/threadweaver.json --png loadtest/results/threadweaver.png

clean:
	rm -rf $(VENV) .engines .pytest_cache .mypy_cache .ruff_cache .coverage .coverage.* coverage.json
