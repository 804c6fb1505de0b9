# Floe: developer entry points. `make` alone lists the targets.
#
# Every target that runs something depends on `deps`, so a fresh machine needs nothing but GNU make,
# Python 3.11 and apt (Debian) to get going. Installs are stamped, so a second run skips them.

SHELL := /bin/bash
.DEFAULT_GOAL := help

# Python 3.11 first: pyproject pins requires-python to 3.11 (pyspark 4.3 + localstack-core 4.13.1 pins).
PYTHON_BOOT := $(shell command -v python3.11 2>/dev/null || command -v python3 2>/dev/null)
VENV := .venv
PY := $(VENV)/bin/python
LS_VENV := .floe/localstack-venv
LS_VERSION := 4.13.1
STATE_DIR := $(or $(FLOE_STATE_DIR),.floe)
STACK := $(PY) -m infra.stack
# apt needs root; use sudo only when we are not root already (CI containers have no sudo).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: help deps venv localstack-install redis-install chromium-install up down status services-up services-down \
        run test chaos volume lint bench bench-smoke clean redis-cluster-up redis-cluster-down test-cluster \
        cluster-up cluster-down

help: ## list the targets
	@echo "Floe make targets:"
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) \
	  | awk 'BEGIN {FS = ":.*## "} {printf "  %-20s %s\n", $$1, $$2}'

# ------------------------------------------------------------------------------------------ installs

$(VENV)/.stamp: pyproject.toml
	@test -n "$(PYTHON_BOOT)" || { echo "python3.11 (or python3) not found" >&2; exit 1; }
	test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.stamp ## create .venv and install Floe with its dev extras (skipped when up to date)

# LocalStack gets its own venv: its pins conflict with aiobotocore. The pin list is known to work here.
$(LS_VENV)/.stamp: infra/localstack-pins.txt
	@test -n "$(PYTHON_BOOT)" || { echo "python3.11 (or python3) not found" >&2; exit 1; }
	@mkdir -p $(dir $(LS_VENV))
	test -x $(LS_VENV)/bin/python || $(PYTHON_BOOT) -m venv $(LS_VENV)
	$(LS_VENV)/bin/python -m pip install -q -c infra/localstack-pins.txt 'localstack-core[runtime]==$(LS_VERSION)'
	touch $@

localstack-install: $(LS_VENV)/.stamp ## install LocalStack 4.13.1 into .floe/localstack-venv

# The Debian package may start a system Redis on 6379 without `appendfsync always`, and the stack would
# then use it as it is. The stack starts its own durable Redis instead, so switch the system one off.
redis-install: ## install Debian's redis-server unless one is on PATH
	@if ! command -v redis-server >/dev/null 2>&1; then \
	  echo "installing redis-server (apt)"; \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server || exit 1; \
	  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then \
	    echo "disabling the system redis-server service (Floe's stack runs its own)"; \
	    $(SUDO) systemctl disable --now redis-server; \
	  fi; \
	fi

# The web console's browser test (tests/e2e/test_console.py) drives Debian's chromium through Playwright
# for Python; Playwright's own browser download is not used.
chromium-install: ## install Debian's chromium (for the console's browser test) unless /usr/bin/chromium is there
	@if ! test -x /usr/bin/chromium; then \
	  echo "installing chromium (apt)"; \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium || exit 1; \
	fi

deps: venv localstack-install redis-install ## install everything above

# ----------------------------------------------------------------------------------------- the stack

up: deps ## start LocalStack, Redis and the Floe services in the background; returns once all are ready
	$(STACK) up

down: deps ## stop everything `make up` started
	$(STACK) down

status: deps ## show what runs, with pids, endpoints and logs
	$(STACK) status

services-up: deps ## start only LocalStack and Redis
	$(STACK) services-up

services-down: deps ## stop LocalStack and Redis if the stack started them
	$(STACK) services-down

# A local Redis Cluster of 3 primaries (infra/redis_cluster.py) on REDIS_CLUSTER_URL's port and the two
# after it. `FLOE_REDIS__CLUSTER=true FLOE_REDIS__URL=<that URL> make up` runs the stack on it (and starts
# it, if it is not running).
REDIS_CLUSTER_URL ?= redis://127.0.0.1:7001/0
REDIS_CLUSTER_ENV := FLOE_REDIS__CLUSTER=true FLOE_REDIS__URL=$(REDIS_CLUSTER_URL)

redis-cluster-up: venv redis-install ## start a local Redis Cluster of 3 primaries (ports 7001-7003)
	$(REDIS_CLUSTER_ENV) $(STACK) up redis

redis-cluster-down: venv redis-install ## stop the local Redis Cluster (its data stays in .floe/redis-cluster)
	$(REDIS_CLUSTER_ENV) $(STACK) down redis

# A Spark standalone cluster on this machine (infra/spark_cluster.py): a master on 127.0.0.1:7077 and two
# workers of one core each. `FLOE_PIPELINE__SPARK_MASTER=spark://127.0.0.1:7077 make up` runs the job on it.
cluster-up: venv ## start a Spark standalone master and two workers on 127.0.0.1 (spark://127.0.0.1:7077)
	$(PY) -m infra.spark_cluster up

cluster-down: venv ## stop the Spark standalone cluster
	$(PY) -m infra.spark_cluster down

# Ctrl-C reaches `floe demo` (the parts run in their own sessions); the INT trap turns it into an exit,
# and the EXIT trap stops the stack in order whichever way the recipe ends.
run: deps ## the demo: start the stack, load sample files, follow until Ctrl-C, then stop the stack
	@trap '$(STACK) down' EXIT; trap 'exit 130' INT TERM; \
	$(STACK) up && $(VENV)/bin/floe demo

# ------------------------------------------------------------------------------------------- checks

# Only the services this run started are stopped afterwards: a stack you started yourself stays up.
# The EXIT trap keeps pytest's exit code.
# The kill tests are `make chaos` (each restarts the Spark job, about half a minute a time), which CI
# runs after this; the volume tests are `make volume`, and the cluster ones `make test-cluster`.
# Two pytest-xdist workers: the tests of the running stack all on one, the rest shared out a module at
# a time (tests/workers.py). TEST_WORKERS=0 runs them in this process, one after another.
TEST_WORKERS ?= 2

test: deps lint chromium-install ## lint, the unit, integration and end-to-end tests, then a smoke run of the benchmarks (services started and stopped)
	@record="$(STATE_DIR)/run/test-services.txt"; \
	$(STACK) services-up --record "$$record" || exit $$?; \
	trap '$(STACK) services-down --recorded "$$record"' EXIT; trap 'exit 130' INT TERM; \
	$(VENV)/bin/pytest -n $(TEST_WORKERS) -m "not chaos and not volume and not spark_cluster" --durations=15 tests && $(PY) -m bench.run --smoke

# The tests marked `cluster` (tests/infra/conftest.py marks the e2e ones): Floe's steps on a real
# cluster, and the auto-ingest, REST and kill tests with the whole stack on it; and those marked
# `spark_cluster`: the job on a Spark standalone cluster (tests/e2e/test_spark_cluster.py). Services as in `test`.
test-cluster: deps ## the e2e auto-ingest, REST and kill tests on a local Redis Cluster, and the job on a Spark cluster
	@export $(REDIS_CLUSTER_ENV); \
	record="$(STATE_DIR)/run/cluster-services.txt"; \
	$(STACK) services-up --record "$$record" || exit $$?; \
	trap '$(STACK) services-down --recorded "$$record"' EXIT; trap 'exit 130' INT TERM; \
	$(VENV)/bin/pytest -m "cluster or spark_cluster" --durations=10 tests

chaos: deps ## the fault-injection tests: kill -9 and SIGTERM of each process mid-load, exactly-once checked (-rP: their figures)
	@record="$(STATE_DIR)/run/chaos-services.txt"; \
	$(STACK) services-up --record "$$record" || exit $$?; \
	trap '$(STACK) services-down --recorded "$$record"' EXIT; trap 'exit 130' INT TERM; \
	$(VENV)/bin/pytest -m "chaos and not volume and not spark_cluster" --durations=10 -rP tests

volume: deps ## the large loads: 10,000 files put at once, a 2 GB CSV with the Spark job's peak memory (-rP: their figures)
	@record="$(STATE_DIR)/run/volume-services.txt"; \
	$(STACK) services-up --record "$$record" || exit $$?; \
	trap '$(STACK) services-down --recorded "$$record"' EXIT; trap 'exit 130' INT TERM; \
	$(VENV)/bin/pytest -m volume -rP tests

# mypy gets only the packages that have Python files yet (it fails on an empty directory).
# lint-imports checks the layering in pyproject's [tool.importlinter] (docs/architecture.md, "Packages");
# it takes a fraction of a second, so it keeps no cache in the checkout.
lint: deps ## ruff check, ruff format --check, mypy, import layering and cycles (lint-imports)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy $(foreach d,floe services pipeline front infra bench,$(if $(wildcard $(d)/*.py $(d)/*/*.py),$(d)))
	$(VENV)/bin/lint-imports --no-cache --no-logo

bench: deps ## run the benchmarks (results in bench/results/)
	$(PY) -m bench.run

bench-smoke: deps ## a quick benchmark run that checks the harness works
	$(PY) -m bench.run --smoke

clean: ## stop the stack and delete Floe state under .floe (keys, logs, data); keeps the venvs
	@if [ -x $(PY) ]; then $(STACK) down; fi
	@if [ -d .floe ]; then find .floe -mindepth 1 -maxdepth 1 ! -name localstack-venv -exec rm -rf {} +; fi
	@if [ "$(STATE_DIR)" != ".floe" ] && [ -d "$(STATE_DIR)" ]; then rm -rf "$(STATE_DIR)"; fi
