# verifiedring developer targets. `make install` then `make test` is all a new user needs.
PYTHON ?= python3
PYTEST_WORKERS ?= auto

.PHONY: install test model-check mutants stress lint bench gpu-check

install:  ## install the library with everything the tests, models and linters need
	$(PYTHON) -m pip install -e '.[dev]'

test:  ## the whole test suite, unit + property + bounded stress, in parallel
	$(PYTHON) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup

model-check:  ## TLC over every model and mutant in spec/models.toml; one table, non-zero on surprise
	$(PYTHON) -m spec.run_models

mutants:  ## every known bug of tests/mutants/catalog.toml, applied to a copy; one table, non-zero if one survives
	$(PYTHON) -m tests.mutants $(MUTANTS_ARGS)

stress:  ## a longer soak of the multiprocess harness (see stress/README.md)
	$(PYTHON) -m stress --duration 60

lint:
	$(PYTHON) -m ruff check src tests stress bench spec
	$(PYTHON) -m mypy

bench:  ## the report: bench/results/bench.json + PNG plots, every figure a ratio (python -m bench: every bench)
	$(PYTHON) -m bench report $(BENCH_ARGS)

gpu-check:  ## just the GPU tests, for a machine that has CUDA (skips elsewhere)
	$(PYTHON) -m pytest -m gpu -n 0 tests
