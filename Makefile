# s3log: make demo (the main job), make test (the suite). Both install first when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint demo bench checkov compat sim soak clean

# The project's own environment: pyproject.toml's ranges, pinned by constraints.txt.
$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[test,dev]"
	touch $(STAMP)

install: $(STAMP)

# Longer soaks are marked slow: `make soak` runs them.
test: $(STAMP)
	$(BIN)/pytest -q -x -p no:cacheprovider -m "not slow"

soak: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider -m slow

# The deterministic simulator over thousands of seeds (make test runs a few hundred).
sim: $(STAMP)
	$(BIN)/python scripts/sim.py --seeds 5000

lint: $(STAMP)
	$(BIN)/ruff check s3log tests scripts
	$(BIN)/mypy --strict s3log

demo: $(STAMP)
	$(BIN)/s3log demo

bench: $(STAMP)
	$(BIN)/pip install -q -c constraints.txt -e ".[bench]"
	$(BIN)/python scripts/bench.py --docs docs/benchmarks.md

# checkov pins an old boto3: it gets a virtualenv of its own, never the project's.
CHECKOV_VENV := .venv-checkov
$(CHECKOV_VENV)/.installed:
	$(PY) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q "checkov==3.3.30"
	touch $@

checkov: $(CHECKOV_VENV)/.installed
	$(CHECKOV_VENV)/bin/checkov -d terraform --framework terraform --quiet --compact --skip-download

# The core against the oldest and the newest releases its ranges allow, each in a
# throwaway virtualenv (boto3 above all: applications pin their own).
compat:
	PY=$(PY) bash scripts/check_boto3_range.sh

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
