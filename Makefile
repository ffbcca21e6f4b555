# RLark — `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
UV := uv
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (2 on 2 cores; 0: one process). Tests are spread over both, host-touching
# ones included: each takes its own bridge, subnet, ports, namespaces and users (see README, "Tests").
# `worksteal`: each process starts with half of the tests and an idle one takes half of the other's queue, so
# the run does not end with one process alone on the last long end-to-end tests (`load` left ~250 s of that).
TEST_WORKERS ?= 2
BENCH_ARGS ?=

.PHONY: help setup prereqs run stop status test test-web test-fast screenshots lint format bench gpu-check-wheels clean

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: ## Install uv, the locked Python environment and missing Debian packages (idempotent)
	@bash scripts/setup.sh

prereqs: setup ## Build or download every heavy test prerequisite once (Kafka jars, Go-built Kubernetes test bed, console); idempotent
	@$(UV) run python -m rlark_devinfra.prereqs

run: setup ## Start PostgreSQL, Kafka, every service and a local cluster; run a first Ray job (the README's first command)
	@$(UV) run python -m rlark_devinfra.demo

stop: ## Stop the local agent and its workers, every service and the infrastructure started by `make run`
	@$(UV) run python -m rlark_devinfra.stack down

status: ## Show what runs
	@$(UV) run python -m rlark_devinfra.stack status

test: setup prereqs test-web ## Run every test: the console's component tests, then pytest against real PostgreSQL, Kafka and Chromium (the README's second command)
	@$(UV) run pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

test-web: prereqs ## Run the web console's component tests (Vitest)
	@cd web && npm test

test-fast: ## Unit tests only (no servers)
	@$(UV) run pytest -m "not integration and not e2e and not k8s and not netns and not images" $(PYTEST_ARGS)

screenshots: setup ## Write docs/screenshots/<page>.<zh-CN|en>.png from a seeded platform, in Chromium
	@$(UV) run python -m rlark_devinfra.web >/dev/null
	@RLARK_SCREENSHOTS_DIR=$(CURDIR)/docs/screenshots $(UV) run pytest tests/e2e/test_console_e2e.py \
		-k every_main_page_renders -p no:cacheprovider $(PYTEST_ARGS)
	@ls docs/screenshots

lint: setup ## ruff, ruff format --check, mypy (strict) and import-linter contracts
	@$(UV) run ruff check .
	@$(UV) run ruff format --check .
	@$(UV) run mypy libs/*/src services/*/src cli/src
	@$(UV) run lint-imports

format: ## Apply ruff's fixes and formatting
	@$(UV) run ruff check --fix .
	@$(UV) run ruff format .

bench: setup ## Run the benchmarks and print them against their baselines and targets
	@$(UV) run python -m rlark_devinfra.bench $(BENCH_ARGS)

gpu-check-wheels: setup ## Fetch into .whl/ the Python 3.12 wheels scripts/gpu-check carries to a lent GPU machine (docs/gpu-checks); print the carried size
	@rm -rf .whl && mkdir -p .whl
	@$(UV) run python scripts/gpu-check --requirements > .whl/requirements.txt
	@python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
		--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
		--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl -r .whl/requirements.txt
	@$(UV) run python scripts/gpu-check --sizes

clean: stop ## Stop everything and delete this checkout's state (.state/)
	rm -rf .state
