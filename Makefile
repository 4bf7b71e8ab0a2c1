# selfbench-runner. `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
TASK   ?=
ARGS   ?=
N      ?= 5
# Tests at a time in the main pass. Two on 2 cores: three kept the cores 96% busy against 88%
# but took 3,046 s against an estimated 3,100-3,200 s (clean-clone CI, 2026-12-06), each test
# about 1.35x slower, and the extra contention made two tests that looked beyond their own
# objects fail; CPU, not waiting, bounds the pass.
WORKERS ?= 2

.DEFAULT_GOAL := help
.PHONY: help setup test test-harbor flake unit lint verify engine base-image bench bench-batch bench-worker bench-hack clean

help: ## Show the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: ## Make .venv and install the project with every extra (sidecar, fleet) and its dev tools
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --no-compile -e '.[dev,sidecar,fleet]'
	@# Bytecode for everything installed and the editable package (which pip would not compile):
	@# start-up reads it even where PYTHONDONTWRITEBYTECODE keeps Python from writing its own.
	@# On every core, not one file at a time as pip does (measured: pip's own pass cost 25-30 s
	@# of the install's 98 s; this one 19 s on 2 cores).
	@# A file of some dependency that does not compile costs only its speed, as under pip.
	$(BIN)/python -m compileall -q -j 0 runner
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib >/dev/null 2>&1 || true

test: engine ## All tests: unit, integration on a real Docker engine, and the bundle under real Harbor
	@# $(WORKERS) workers, a test each at a time (a file's tests together when they share a module
	@# fixture: its xdist_group; real Harbor's on a private engine among them); then, alone, the
	@# tests that act on every container or image of the engine. Each pass prints its slowest
	@# tests and its time. pytest's 5 (nothing selected) is a failure in the first pass and fine
	@# in the second (ARGS may select none).
	$(BIN)/python -m pytest -m "not serial" -n $(WORKERS) --dist loadgroup --durations=30 $(ARGS)
	$(BIN)/python -m pytest -m "serial" --durations=10 $(ARGS); status=$$?; \
	  [ $$status -eq 0 ] || [ $$status -eq 5 ]

test-harbor: engine ## Only the bundle under real Harbor 0.26 (make test runs it too; builds its image once, a few minutes)
	$(BIN)/python -m pytest -m harbor --durations=10 $(ARGS)

flake: engine ## Run chosen tests N times, as many at a time as CI does, and name each unstable one: make flake ARGS="tests/integration/test_x.py -k y" [N=5]
	@# A make-level check: ARGS may hold quotes of its own (-k "a or b"), which a shell test breaks on.
	$(if $(strip $(ARGS)),,$(error usage: make flake ARGS="<tests to check>" [N=5]))
	$(BIN)/python scripts/flake.py --count $(N) --workers $(WORKERS) $(ARGS)

unit: ## Unit tests only (no Docker)
	$(BIN)/python -m pytest -m "not docker" $(ARGS)

lint: ## ruff and mypy --strict
	$(BIN)/ruff check runner tests scripts
	$(BIN)/ruff format --check runner tests scripts
	$(BIN)/mypy
	$(BIN)/actionlint .github/workflows/*.yml

verify: engine ## Verify a task: make verify TASK=path/to/task [ARGS="--json"]
	@test -n "$(TASK)" || { echo "usage: make verify TASK=path/to/task" >&2; exit 2; }
	PATH="$(abspath $(BIN)):$$PATH" scripts/verify.sh "$(TASK)" $(ARGS)

engine: ## Start a Docker engine when none answers (installs Debian's docker.io if needed)
	scripts/start-docker.sh

base-image: ## Build the local Debian base image (for machines without a registry)
	scripts/make-base-image.sh

bench: engine ## Measure warm re-verify overhead of the example task
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python scripts/bench_warm_verify.py

bench-hack: engine ## Measure the defaults against nop + oracle + determinism alone (the hack gate's cost)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python scripts/bench_hack_gate.py

bench-batch: engine ## Measure batch throughput: two test-bound tasks at once vs one after the other
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python scripts/bench_batch.py

bench-worker: engine ## Measure the fleet: a synthetic pool by reference on one worker and two (tasks/hour, overhead per task, history sizes)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python scripts/bench_worker.py

clean: ## Remove what the runner left behind in Docker (containers, networks, volumes)
	$(BIN)/selfbench-runner clean
