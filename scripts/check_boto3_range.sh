#!/usr/bin/env bash
# s3log's core against both ends of its dependency ranges (`make compat`).
#
# Three throwaway virtualenvs, each installing s3log from this checkout plus pytest
# and moto, and running the behavioural suite over MemoryStore, moto's in-process
# mock and the local HTTP server:
# - oldest: the core alone at the oldest releases pyproject.toml allows (boto3 and
#   botocore at boto3's lower bound, cbor2 at its);
# - oldest-async: s3log[async] beside boto3 at its lower bound and aiobotocore at its
#   (an application pinning an old boto3 can still install the async extra: aioboto3,
#   which pins one exact aiobotocore, could not), plus the async store's own tests;
# - newest: s3log[async] with the newest boto3 that some aiobotocore accepts.
# The async runs add the fast extra (obstore, which has no botocore to pin), so the
# store contract runs over every store.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/s3log-compat.XXXXXX")
trap 'rm -rf "$work"' EXIT

# "name==L ..." from the ">=" bounds of the core ("core"), or of the core and the async
# extra ("async": botocore is then left to what the oldest aiobotocore accepts within
# boto3's range; none accepts botocore at boto3's floor).
lower_bounds() {
    "$PY" - "$1" <<'PY'
import re, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
core = sys.argv[1] == "core"
deps = project["dependencies"] + ([] if core else project["optional-dependencies"]["async"])
pins = []
for dep in deps:
    name, low = re.match(r"([A-Za-z0-9_.-]+).*>=\s*([0-9][^,;\s]*)", dep).groups()
    pins.append(f"{name}=={low}")
    if name == "boto3" and core:  # boto3 X requires botocore >= X: the oldest pair is X, X.
        pins.append(f"botocore=={low}")
print(" ".join(pins))
PY
}
oldest=$(lower_bounds core)
oldest_async=$(lower_bounds async)
# The local S3 server comes from the local extra (what the test suite needs of moto).
tools=("pytest>=8" "pytest-asyncio>=1.0" "hypothesis>=6.100")
core_tests=(tests/test_protocol.py tests/test_behaviour.py -k "not async-server and not obstore")
async_tests=(tests/test_protocol.py tests/test_behaviour.py tests/test_async_store_clients.py
             tests/test_store_contract.py)

run() {
    local name=$1 target=$2; shift 2
    local venv="$work/$name"
    echo "== compat: $name: $*"
    "$PY" -m venv "$venv"
    local start=$SECONDS
    "$venv/bin/pip" install -q --disable-pip-version-check "$target" "$@" "${tools[@]}" 2> >(grep -v "^WARNING: Location" >&2)
    echo "   installed in $((SECONDS - start)) s:" "$("$venv/bin/python" - <<'PY'
import importlib.metadata as m
names = ("boto3", "botocore", "aiobotocore", "cbor2", "moto")
print(", ".join(f"{n} {m.version(n)}" for n in names if any(True for _ in m.distributions(name=n))))
PY
)"
    if [ "$target" = ".[local]" ]; then
        "$venv/bin/python" -m pytest -q -p no:cacheprovider "${core_tests[@]}"
    else
        "$venv/bin/python" -m pytest -q -p no:cacheprovider "${async_tests[@]}"
    fi
}

# shellcheck disable=SC2086  # $oldest is a list of requirements
run oldest ".[local]" $oldest
# shellcheck disable=SC2086
run oldest-async ".[async,fast,local]" $oldest_async
run newest ".[async,fast,local]" --upgrade boto3 botocore aiobotocore cbor2
echo "compat: s3log and s3log[async] pass with the oldest and the newest boto3 in range"
