# recourselab: `make repro` runs the pipeline, `make test` the test suite.
# Every target is idempotent; `setup` only reinstalls when pyproject.toml changed.
VENV    ?= .venv
PYTHON  ?= python3
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.recourselab-installed

export DVC_NO_ANALYTICS := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: setup repro test bench lint clean-cache

setup: $(STAMP)
	$(BIN)/recourselab fetch-data

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	# CPU build of torch first: an unpinned torch would pull GBs of CUDA wheels.
	$(BIN)/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	# DiCE (a baseline of the evaluate stage) without its second xgboost: the project has xgboost-cpu
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps dice-ml==0.12 raiutils
	touch $@

repro: setup
	$(BIN)/recourselab repro

test: setup
	$(BIN)/python -m pytest

bench: repro  # bench/densityflow.py reads the pipeline outputs
	@for script in bench/*.py; do [ $$script = bench/results_md.py ] && continue; echo "== $$script"; PYTHONPATH=. $(BIN)/python $$script || exit 1; done
	PYTHONPATH=. $(BIN)/python bench/results_md.py  # last: the table of docs/results/pipeline.md

lint: setup
	$(BIN)/ruff check src stages flows tests bench

clean-cache:
	rm -rf .recourselab/cache
